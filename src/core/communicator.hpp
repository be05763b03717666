// CommImpl: one rank's communicator. Owns the transports, the connections to every peer, the executor, the
// schedule cache and the progress thread; validates every call before touching a buffer.
//
// Who drives progress: a blocking call with nothing queued runs on the calling thread (no hand-off); async
// calls, and blocking calls that arrive while async work is queued, go to the progress thread in order. The
// progress thread sleeps on a condition variable when idle.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "base/poller.hpp"
#include "core/bootstrap.hpp"
#include "core/executor.hpp"
#include "core/tuner.hpp"
#include "transport/transport.hpp"

namespace collie::core {

struct StagedOp;
class DeviceStager;

/// Completion state shared by a Work handle and the communicator.
struct WorkState {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  ErrorCode code = ErrorCode::Success;
  std::string message;

  void complete(ErrorCode c, std::string msg);
  void wait();
  bool test();
};

/// One call as the user made it.
struct OpDesc {
  algorithms::Collective coll = algorithms::Collective::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  ///< as in the C API (per rank for AllGather/ReduceScatter/AllToAll)
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;                     ///< root, or peer for Send/Recv
  std::shared_ptr<WorkState> work;  ///< set for async calls and calls deferred by a group
  // Device buffers (device_stager.hpp). Set by run/runAsync, not by callers.
  void* stream = nullptr;            ///< cudaStream_t of a C API call (StreamScope); NULL: the default stream
  bool streamOrdered = false;        ///< a C API call: enqueue on `stream` and return at once
  bool device = false;               ///< the buffers are device memory (classifyMemory)
  int deviceOrdinal = -1;            ///< their GPU (-1: pinned host memory passed with a stream)
  std::shared_ptr<StagedOp> staged;  ///< the pinned copies and events, once staged
};

class CommImpl {
 public:
  /// Joins communicator `id` as `rank` of `nranks` (collective; blocks until all have joined).
  static std::unique_ptr<CommImpl> create(int nranks, const UniqueIdData& id, int rank, const Options& options);
  ~CommImpl();  ///< waits for queued work, then closes every connection

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  const std::string& name() const { return name_; }

  /// Throws InvalidArgument / InvalidUsage (naming the argument) or the communicator's earlier failure.
  void validate(const OpDesc& op) const;
  /// Sets op.device and op.deviceOrdinal from the buffers' memory kinds (loading the CUDA plugin only when a
  /// stream was passed or CUDA is in use in this process); throws InvalidUsage, naming the buffer, for host and
  /// device buffers mixed in one call, a stream with pageable host buffers, or buffers on another GPU.
  void classifyMemory(OpDesc& op) const;
  /// Binds the communicator to a GPU (collieCommInitAll's devlist); device buffers elsewhere are refused.
  void bindDevice(int device) { boundDevice_ = device; }
  /// Validates, then runs the call (or defers it when this thread is inside a group).
  void run(OpDesc op);
  /// Validates, then queues the call; the returned state completes when it is done.
  std::shared_ptr<WorkState> runAsync(OpDesc op);
  /// Queues a batch (a group's calls on this communicator) and returns its completion state.
  std::shared_ptr<WorkState> submitBatch(std::vector<OpDesc> ops);

  void barrier();
  std::unique_ptr<CommImpl> split(int color, int key, const Options& options);
  /// Stops all work: running and later calls fail; connections are closed.
  void abort();
  ErrorCode asyncError() const { return failCode_.load(); }
  std::string failureMessage() const;
  /// What the most recent executed call ran (Communicator::lastCall).
  CallInfo lastCall() const;

  /// The last error message of a failed call through the C API (kept here so it outlives the handle).
  std::string lastError;
  std::mutex lastErrorMu;

 private:
  CommImpl(int rank, int nranks, const Options& options);
  void connectAll(const std::vector<transport::PeerInfo>& peers, const std::array<uint8_t, 16>& secret);
  // Tuning (calibrate.cpp): the transport kinds in use, and their costs measured at init (or read from
  // COLLIE_TUNE_FILE) by rank 0 and broadcast, so that every rank's tuner decides alike.
  std::vector<std::string> kindsInUse(const std::vector<transport::PeerInfo>& peers) const;
  /// The measured costs of those kinds, with beta and gamma scaled by cpuShare_.
  CostModel costModel(const std::vector<std::string>& kinds) const;
  void calibrate(const std::vector<transport::PeerInfo>& peers);
  void pingPong(int peer, double* alpha, double* beta);
  void execute(const std::vector<OpDesc>& ops);
  /// The transports of the peers `schedule` touches ("shm", "shm+tcp", "self"), cached per schedule.
  const std::string& transportsOf(const algorithms::Schedule& schedule);
  // Device buffers (device_stager.hpp).
  void stageDevice(OpDesc& op);
  void runDevice(OpDesc op);
  void runBatch(std::vector<OpDesc>& ops);
  void finishDevice(std::vector<OpDesc>& ops, ErrorCode& code, std::string& message);
  const algorithms::Schedule& schedule(algorithms::Algorithm algo, const algorithms::ScheduleKey& key);
  bool recordFailure(ErrorCode code, const std::string& message);  ///< true if this is the first failure
  void fail(ErrorCode code, const std::string& message);           ///< record, then close every connection
  void progressLoop();
  void enqueue(std::vector<OpDesc> ops, std::shared_ptr<WorkState> work);

  const int rank_, nranks_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  bool oversubscribed_ = true;  // more ranks on this host than CPUs: spin politely
  double cpuShare_ = 1;         // ranks of this host per CPU, at least 1: copies and reductions queue for CPUs
  std::array<uint8_t, 16> secret_{};
  int splitCount_ = 0;

  base::Poller poller_;
  std::vector<std::unique_ptr<transport::Transport>> transports_;  // in order of preference
  std::vector<std::unique_ptr<transport::Connection>> conns_;      // by rank (self included)
  std::unique_ptr<Executor> executor_;
  Tuner tuner_;
  MeasuredCosts measured_;  // per transport kind, as agreed at init (inherited by split)
  std::atomic<bool> abort_{false};

  std::unordered_map<algorithms::ScheduleId, algorithms::Schedule, algorithms::ScheduleIdHash> cache_;
  std::vector<Job> jobs_;
  std::vector<std::string> peerTransport_;  // by rank: the transport that connected it ("self" for this rank)
  std::unordered_map<const algorithms::Schedule*, std::string> transportCache_;  // follows cache_
  mutable std::mutex callMu_;
  CallInfo lastCall_;

  std::atomic<ErrorCode> failCode_{ErrorCode::Success};
  mutable std::mutex failMu_;
  std::string failMessage_;

  // Ordering between the calling thread and the progress thread (see the file comment).
  struct Batch {
    std::vector<OpDesc> ops;
    std::shared_ptr<WorkState> work;
  };
  std::mutex qmu_;
  std::condition_variable qcv_;
  std::deque<Batch> queue_;
  size_t pending_ = 0;  // queued or running on the progress thread
  bool inlineRunning_ = false;
  bool stop_ = false;
  std::thread progress_;

  // Device buffers: the staging machinery, made on the first call on device buffers. deviceMu_ orders staging
  // and queueing between calling threads.
  std::mutex deviceMu_;
  std::unique_ptr<DeviceStager> stager_;
  int boundDevice_ = -1;
};

/// The transports a communicator may use, in order of preference (the first that can connect a pair wins).
std::vector<std::unique_ptr<transport::Transport>> makeTransports();
/// This process's PeerInfo before any transport has listened.
transport::PeerInfo localPeerInfo(int rank);

/// Thread-local group state (collieGroupStart/End).
bool inGroup();
void groupStart();
void groupEnd();
/// Records a call made inside a group.
void groupAdd(CommImpl* comm, OpDesc op);

}  // namespace collie::core
