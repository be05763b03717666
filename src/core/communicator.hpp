// CommImpl: one rank's communicator, composed of its parts, each in its own file:
//   setup.hpp           transports, PeerInfo, connecting the peers (and bootstrap.hpp, calibrate.cpp at init)
//   validate.hpp        argument checks and buffer extents, before anything is queued
//   device_stager.hpp   device buffers staged through pinned host memory (the communicator's side: device_calls.cpp)
//   progress_queue.hpp  call order, the progress thread and WorkState
//   planner.hpp         tuner + schedule cache -> executor jobs, and the CallInfo record
//   prepared_call.hpp   the fast path of a repeated blocking call (prepared_call.cpp)
// This file keeps what ties them together: a call's path through them, the failure state, barrier and abort;
// group.cpp records and issues groups; split.cpp and shrink.cpp make new communicators from this one's listeners and
// PeerInfo table.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/poller.hpp"
#include "core/any_source.hpp"
#include "core/bootstrap.hpp"
#include "core/executor.hpp"
#include "core/flight_recorder.hpp"
#include "core/link_share.hpp"
#include "core/op_desc.hpp"
#include "core/planner.hpp"
#include "core/prepared_call.hpp"
#include "core/progress_queue.hpp"
#include "core/setup.hpp"
#include "core/tuner.hpp"

namespace collie::core {

class DeviceStager;
struct StagedOp;

/// Lets another thread stop a communicator's creation (the C API's abort of a non-blocking init, as NCCL's
/// ncclCommAbort of a communicator still in ncclInProgress): every wait of CommImpl::create given it ends with
/// InvalidUsage, for the bootstrap root within base::kStopLookMs (20 ms), in the table's all-gather, connecting and
/// calibration at the executor's next look or the handshake's (kLivenessEvery, 100 ms).
class CreationStop {
 public:
  void stop();

 private:
  friend class CommImpl;
  std::shared_ptr<ShareFamily> family_ = std::make_shared<ShareFamily>();  ///< the new communicator's: its abort flag
};

class CommImpl {
 public:
  /// Joins communicator `id` as `rank` of `nranks` (collective; blocks until all have joined). `stop`, when given,
  /// may end the wait from another thread; one CreationStop serves one creation.
  static std::unique_ptr<CommImpl> create(int nranks, const UniqueIdData& id, int rank, const Options& options,
                                          const CreationStop* stop = nullptr);
  ~CommImpl();  ///< waits for queued work, then closes every connection

  int rank() const { return rank_; }
  int size() const { return nranks_; }
  const std::string& name() const { return name_; }

  /// Binds the communicator to a GPU (collieCommInitAll's devlist); device buffers elsewhere are refused.
  void bindDevice(int device) { boundDevice_ = device; }
  /// Validates, then runs the call (or defers it when this thread is inside a group). With op.streamOrdered
  /// (a C API call) a call on device buffers is enqueued on op.stream and returns at once.
  void run(OpDesc op) {
    if (op.stream == nullptr && runPrepared(keyOf(op))) return;
    runGeneral(std::move(op));
  }
  /// Runs a blocking call with the arguments of the prepared call (prepared_call.hpp) on the calling thread; false
  /// (nothing done): the call needs the general path, runGeneral().
  bool runPrepared(const CallKey& key);
  /// run() without trying the prepared path first.
  void runGeneral(OpDesc op);
  /// Validates, then queues the call; the returned state completes when it is done.
  std::shared_ptr<WorkState> runAsync(OpDesc op);
  /// Inside a group: validates the call (a device call's GPU is fixed and checked; it is staged at the group's end)
  /// and records it for the group's end; a call refused here refuses the whole group (group.hpp, groupRefuse), then
  /// throws.
  void recordInGroup(OpDesc op);
  /// Queues a batch (a group's calls on this communicator) and returns its completion state. When it cannot be
  /// queued (a sharing family's turn not given in time) it throws, and every call of it is dropped (dropUnissued).
  std::shared_ptr<WorkState> submitBatch(std::vector<OpDesc> ops);
  /// After every batch of a group is queued: makes the callers' streams wait for this communicator's staged calls of
  /// it (DeviceStager::joinCaller). Throws UnhandledCudaError, after trying each, when CUDA fails.
  void joinCallerStreams();
  /// A call that will never run (its group refused, or not queued): its staged device copies are released, so the
  /// stream they hold goes on, and its Work fails with `message`.
  static void dropUnissued(OpDesc& op, ErrorCode code, const std::string& message);
  /// The sharing family this communicator's connections belong to when any child shares them, else null
  /// (link_share.hpp): a group must not hold calls of two of its members.
  const ShareFamily* sharingFamily() const;

  void barrier();
  std::unique_ptr<CommImpl> split(int color, int key, const Options& options);
  /// The communicator of every rank not in `exclude`, made without this one's connections or bootstrap root, so
  /// that it works after a failure (shrink.cpp). Collective over the survivors, which pass the same list.
  std::unique_ptr<CommImpl> shrink(const std::vector<int>& exclude, const Options& options);
  /// Stops all work: running and later calls fail; connections are closed.
  void abort();
  ErrorCode asyncError() const { return failCode_.load(); }
  std::string failureMessage() const;
  /// What the most recent executed call ran (Communicator::lastCall).
  CallInfo lastCall() const { return planner_.lastCall(); }
  /// The tag its calls' fingerprints carry: 0, or a sharing child's (link_share.hpp).
  uint32_t fingerprintTag() const { return planner_.tag(); }
  /// The user's calls so far, per collective and algorithm (Communicator::stats, call_stats.hpp). Any thread.
  CommStats stats() const;
  /// The timeline (COLLIE_TRACE, call_trace.hpp), or null; the DDP layer adds its spans to it.
  CallTrace* trace() const { return trace_.get(); }
  /// Other ranks this rank has a connection to (Communicator::connectedPeers).
  int connectedPeers() const { return links_.connectedPeers.load(std::memory_order_relaxed); }
  /// Other ranks whose contact card this rank holds (Communicator::knownContactCards). Between calls.
  int knownContactCards() const;
  /// Whether this rank holds `peer`'s contact card (tests). Between calls.
  bool knowsContactCard(int peer) const;

 private:
  /// `share`: the links (and family) of a child that shares its parent's connections; null: links of its own.
  CommImpl(int rank, int nranks, const Options& options, std::shared_ptr<LinkShare> share = nullptr);
  /// Prepares the links to `peers` (setup.hpp) and makes the executor; with eager connection connects every
  /// peer and ends with a barrier, else connects none (ensureConnected does, per call). gatherFirst (init from the
  /// bootstrap root): the ranks first all-gather the table's missing entries (gatherTable).
  void connect(const std::vector<transport::PeerInfo>& peers, bool gatherFirst = false);
  /// The user's calls start: the flight recorder, the stats and the trace (when COLLIE_TRACE is set) see them.
  void startRecording();
  /// All-gathers the PeerInfo table from the entries the bootstrap root sent (bootstrap_plan.hpp).
  void gatherTable();
  /// Under a directory of cards: tells askers this rank's subtree's cards from now on (card_directory.hpp).
  void showCardBook();
  /// Under a directory of cards, before a child of the ranks `members` (old ranks in new-rank order; this rank is
  /// new rank `newRank`) connects: learns the cards of this rank's directorySeeds in it from this communicator's
  /// directory. `what` names the call for errors.
  void learnChildSeeds(const std::vector<int>& members, int newRank, const std::string& what);
  /// Closes, on both ends, the links to the all-gather's peers that are not ring neighbours (gatherOnlyPeers;
  /// release_gather_links.cpp), under lazy connection, once init's own calls are over.
  void closeGatherOnlyLinks();
  /// Connects the peers the jobs' schedules name that have no connection yet (lazy connection).
  void ensureConnected(const std::vector<Job>& jobs);
  /// Connects `peers` (those connected already are left as they are) and gives the executor their connections: dials
  /// them (`dial`), or connects them collectively (each listed peer lists this rank in a connect of its own).
  /// `midRun`: the executor is in a run that uses none of them (Executor::adoptConnection).
  void connectMissing(const std::vector<int>& peers, bool dial = true, bool midRun = false);
  /// Takes the connections this rank answered that no call of its own has needed yet (Transport::answeredPeers), so
  /// that a waiting run looks at them too: the message that shows a mismatch may wait in one. The executor calls it
  /// from its look at idle connections, mid-run: the run uses none of them.
  void takeAnsweredConnections();
  [[noreturn]] void explainConnectFailure(const std::vector<Job>& jobs, const std::vector<int>& missing,
                                          const Error& e);
  /// Throws the communicator's earlier failure (or its sharing family's), then validateOp's errors.
  void validate(const OpDesc& op);
  /// Adopts the failure of a communicator it shares its connections with, if any (link_share.hpp).
  void adoptFamilyFailure();
  /// A call issued on a member of a sharing family waits for the calls issued before it on the other members to end
  /// (link_share.hpp, beginTurn) and holds the returned turn until it ends; null when no child shares. Throws
  /// Timeout after timeout_.
  std::shared_ptr<void> takeTurn();
  /// refuseDials, then closes (or poisons with `mismatch`) every connection of `links`.
  void closeLinks(Links& links, const transport::MismatchRecord* mismatch);
  /// Keeps `op` (validated, classified, about to run inline) as the prepared call when it may be one.
  void armPrepared(const OpDesc& op);
  // Tuning (calibrate.cpp): the costs measured at init (or read from COLLIE_TUNE_FILE) by rank 0 and broadcast, so
  // that every rank's tuner decides alike.
  CostModel costModel(const std::vector<std::string>& kinds) const;  ///< beta and gamma scaled by the CPU share
  void calibrate(const std::vector<transport::PeerInfo>& peers);
  void pingPong(int peer, double* alpha, double* beta);
  void fanOut(const std::vector<int>& fan, double* gap);
  double bounce(int peer, bool initiator, std::vector<char>& buf, size_t bytes, int iters);
  /// Plans `ops` (or takes `repeated`, the planner's jobs of a prepared call) and runs them; a failure is recorded,
  /// fails the communicator when fatal, and is thrown.
  void execute(const std::vector<OpDesc>& ops, const ExecConfig& config, const std::vector<Job>* repeated = nullptr);
  void setSpinPolicy();  ///< execConfig_'s and progressConfig_'s yieldWhileSpinning, from the links
  /// `op` (a Recv from any source) with the peer whose message it takes (any_source.hpp), written to op.source.
  OpDesc matchAnySource(const OpDesc& op, const ExecConfig& config);
  // Device buffers (device_stager.hpp).
  DeviceStager& stagerFor(const OpDesc& op);
  void stageDevice(OpDesc& op);
  void stageDeviceBatch(std::vector<OpDesc>& ops);
  void pinDevice(OpDesc& op);  ///< a group's device call: its GPU fixed now and checked (group.cpp)
  void runDevice(OpDesc op);
  void runBatch(std::vector<OpDesc>& ops);  ///< on the progress thread
  void finishDevice(std::vector<OpDesc>& ops, ErrorCode& code, std::string& message);
  bool recordFailure(ErrorCode code, const std::string& message);  ///< true if this is the first failure
  /// Records the failure, then closes every connection (poisoned with `mismatch` when one is given).
  void fail(ErrorCode code, const std::string& message, const transport::MismatchRecord* mismatch = nullptr);
  /// After abort(), once no call runs (the progress queue's inline claim taken, so none can start): closes the
  /// connections, so that peers waiting on this rank fail now rather than at their timeout. abort() calls it, and
  /// so does every call's end (AbortCheck), for an abort that came while a call ran but after it last looked.
  void closeIfAborted() noexcept;
  /// Calls closeIfAborted() when it goes out of scope: declared before a call's InlineClaim, it runs after the
  /// claim is released.
  struct AbortCheck {
    CommImpl& comm;
    ~AbortCheck() { comm.closeIfAborted(); }
  };

  const int rank_, nranks_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  std::array<uint8_t, 16> secret_{};
  ConnectMode connectMode_ = ConnectMode::Default;
  std::vector<uint8_t> wanted_;                              // ensureConnected's marks, by rank
  const algorithms::Schedule* connectedSchedule_ = nullptr;  // the last single schedule ensureConnected found connected
  uint64_t connectedGeneration_ = 0;
  int splitCount_ = 0;
  int shrinkCount_ = 0;

  std::shared_ptr<LinkShare> share_;  // this communicator's links, owned with its sharing children (link_share.hpp)
  base::Poller& poller_;              // share_'s family's
  Links& links_;                      // share_'s
  uint64_t executorGeneration_ = 0;   // links_.generation when the executor last took the links' connections
  bool connectFailed_ = false;        // a connectMissing failed: the pairs it gave up are half made (fatal)
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<AnySourceMatcher> anySource_;
  ExecConfig execConfig_;          // made once the links are known
  ExecConfig progressConfig_;      // the same for calls run on the progress thread (setSpinPolicy)
  std::vector<OpDesc> inlineOps_;  // the call run on the calling thread (only one at a time: ProgressQueue)
  PreparedCall prepared_;          // read and written only under the inline claim
  Planner planner_;
  std::unique_ptr<CallTrace> trace_;  // before recorder_: the recorder's dumps flush it while the recorder lives
  FlightRecorder recorder_;           // this communicator's last calls (flight_recorder.hpp)
  MeasuredCosts measured_;            // per transport kind, as agreed at init (inherited by split)
  std::atomic<bool>& abort_;          // share_'s family's: an abort of one of a sharing family stops them all
  bool closedByAbort_ = false;        // under the queue's inline claim (closeIfAborted)

  std::atomic<ErrorCode> failCode_{ErrorCode::Success};
  mutable std::mutex failMu_;
  std::string failMessage_;

  // Device buffers: the staging machinery, made on the first call on device buffers. deviceMu_ orders staging
  // and queueing between calling threads.
  std::mutex deviceMu_;
  std::unique_ptr<DeviceStager> stager_;
  std::atomic<int> stagerDevice_{-1};                   // stager_'s GPU once made (read without deviceMu_ by pinDevice)
  std::vector<std::shared_ptr<StagedOp>> callerJoins_;  // staged group calls whose caller's stream waits at the end
  int boundDevice_ = -1;

  ProgressQueue queue_;  // last: its thread stops first
};

}  // namespace collie::core
