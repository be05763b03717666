// The executor: runs schedules (src/algorithms/schedule.hpp) over this rank's Connections.
//
// Every step is cut into slices. For a receiving step, up to `slicesInFlight` slice receives are posted
// ahead; as each completes (in order) it is reduced or copied and, for the *Send kinds, forwarded at once,
// so receive, reduce and forward of consecutive slices overlap and a ring streams. The next step starts as
// soon as the current one's receives are done (or at once when the step says overlapNext); sends may still
// be in flight then. Several jobs (the calls of one group) run one after another, except consecutive
// point-to-point jobs of a group, which run together.
//
// Steps that are active together may talk to the same peer. Transfers on a connection match one to one in
// posting order, so each peer has a send turn and a receive turn that pass from step to step in schedule
// order: a step posts to a peer only while it holds that peer's turn.
//
// A step with sliceAfter (schedule.hpp) processes slice j only once the named earlier step has finished its
// slice j: a receiving step reduces/copies/forwards it then, a Send posts it then. With steps that all start at
// once, this pipelines slice j through several steps (a tree node reducing from two children, then sending).
//
// The executor runs on one thread (the caller's for a blocking call, the progress thread for async work).
// When nothing moved it polls for COLLIE_SPIN_US, then sleeps in the Poller. If nothing moves for the
// timeout it fails with Timeout naming the call it is in and the peers it waits on, each with the last call it
// was seen in; a set abort flag ends it at once. Every transfer carries its job's call fingerprint
// (call_fingerprint.hpp). With a trace set (COLLIE_TRACE, call_trace.hpp), each step's wait on its peers is traced.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "algorithms/schedule.hpp"
#include "base/datatypes.hpp"
#include "base/poller.hpp"
#include "core/call_fingerprint.hpp"
#include "transport/transport.hpp"

namespace collie::core {

class CallTrace;

/// One call's buffers and arithmetic.
struct JobBuffers {
  const void* input = nullptr;
  void* output = nullptr;
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  uint64_t factor = 0;  ///< PreMulSum: this rank's factor (OpDesc::factor), by which its input is multiplied first

  /// A reducing step's arithmetic on `count` elements: out = src op received, or received op src where the step
  /// says so (Step::receivedFirst: both ends of a pair then compute the same operation, bit for bit).
  void reduceReceived(const algorithms::Step& s, char* out, const char* src, const char* received, size_t count) const {
    if (s.receivedFirst)
      base::reduce(out, received, src, count, type, op);
    else
      base::reduce(out, src, received, count, type, op);
  }
};

struct Job {
  const algorithms::Schedule* schedule = nullptr;
  /// Changes whenever the planner's schedule cache was cleared, so that a schedule rebuilt at the address of a
  /// dropped one is not taken for it (the executor's prepared run, below).
  uint64_t scheduleGeneration = 0;
  JobBuffers buffers;
  bool concurrentWithPrevious = false;  ///< start without waiting for the previous job to finish
  /// Pipelining, chosen by the tuner from the job alone so that both sides of every link agree.
  size_t sliceBytes = 512 * 1024;
  int slicesInFlight = 4;
  /// The call's fingerprint (core/call_fingerprint.hpp): what its sends carry and what its receives expect.
  transport::Fingerprint sendFp, recvFp;
};

struct ExecConfig {
  std::chrono::milliseconds timeout{300000};
  std::chrono::microseconds spin{20};
  bool yieldWhileSpinning = true;  ///< give the CPU away while spinning (when: CommImpl::setSpinPolicy)
};

class Executor {
 public:
  /// conns[r] is the connection to rank r (conns[rank] is the self connection).
  Executor(int rank, int nranks, std::vector<transport::Connection*> conns, base::Poller& poller,
           const std::atomic<bool>& abortFlag, std::string commName);
  ~Executor();

  /// Gives the executor the connection to `peer` made after it was constructed (lazy connection); between runs.
  void setConnection(int peer, transport::Connection* conn) {
    conns_[static_cast<size_t>(peer)] = conn;
    waitOnPoller_ = false;  // until the next run's peers are looked at again:
    prepared_ = Job{};      // a repeated plan too (begin() decides the wait only for a new one)
  }

  /// Runs the jobs to completion. Throws collie::Error on failure (the connections are then unusable).
  void run(std::span<const Job> jobs, const ExecConfig& config);

  // The same work one pass at a time, for drivers that interleave many executors on one thread (the
  // simulator): begin(), then step() until done(). step() returns whether anything moved; it never waits.
  void begin(std::span<const Job> jobs);
  bool step();
  bool done() const;
  /// Drops the current run's state after a failure (posted transfers must no longer be progressed).
  void cancel();
  /// Where each step's waits on its peers go (null: nowhere, the default).
  void setTrace(CallTrace* trace) { trace_ = trace; }
  /// The call of the last message received from `peer`, in words, for a timeout's message: "last seen in <call>",
  /// "last seen in init, before this communicator's first call", or "nothing received from it yet".
  std::string lastSeenText(int peer) const;
  /// The user's calls begin (numbered from 0 again: Planner::setRecorder): a peer last seen in one of init's calls,
  /// numbered the old way, is said to have been seen in init instead.
  void beginUserCalls();
  /// How many looks a waiting run lets pass before it asks again a peer it has asked `asked` times: 1, 2, 4, then
  /// kAskGapMax (compareWaitingCalls).
  static constexpr uint32_t kAskGapMax = 8;
  static constexpr uint32_t askGapAfter(uint32_t asked) { return asked >= 3 ? kAskGapMax : 1u << asked; }
  /// What the look at idle connections needs of the communicator.
  struct LookHooks {
    /// Gives the executor the connections this rank answered but has not taken (adoptConnection).
    std::function<void()> takeAnswered;
    /// Tells peers that ask which collective calls this run waits in (Transport::showWaitingCalls); empty: none.
    std::function<void(const std::vector<transport::Fingerprint>&)> showWaiting;
    /// What `peer` shows (Transport::askWaitingCalls; nullopt: no answer); may throw MismatchError.
    std::function<std::optional<transport::ToldCalls>(int peer)> askWaiting;
    /// This rank's call that `theirs` names when it is another member's of a sharing family
    /// (ShareFamily::recalledCall); nullopt: none known.
    std::function<std::optional<transport::Fingerprint>(const transport::Fingerprint& theirs)> recall;
  };
  /// This rank's collective call that a peer's fingerprint `theirs` names: its own communicator's (the history
  /// given to enableLook) or another sharing member's (LookHooks::recall); nullopt when this rank has no such call in
  /// memory, or before enableLook.
  std::optional<transport::Fingerprint> mineFor(const transport::Fingerprint& theirs) const;
  /// Makes a waiting run look at its idle connections and ask the peers it waits on (lookAtIdleConnections): it
  /// judges what it finds against `history`, this rank's recent collective calls (the planner's). Until then (and
  /// during init) it does not look.
  void enableLook(const CallHistory* history, LookHooks hooks) {
    history_ = history;
    look_ = std::move(hooks);
  }
  /// The connection to `peer`, which the current run (if any) does not use; unlike setConnection, the current run's
  /// state stays as it is.
  void adoptConnection(int peer, transport::Connection* conn) { conns_[static_cast<size_t>(peer)] = conn; }

 private:
  static constexpr size_t kNoStep = ~size_t{0};
  static constexpr size_t kNoScaledInput = ~size_t{0};  // jobScaledInput_: the job reads its input as it is
  struct SliceState {
    transport::Transfer recv;
    transport::Transfer send;
    char* slot = nullptr;
  };
  /// A step of the current run: its resolved buffers, its slicing and how far it got.
  struct StepState {
    const algorithms::Step* step = nullptr;
    size_t job = 0;
    bool started = false;
    bool viaSlot = false;  // receive into a transient slot, not into dst
    bool gated = false;    // the small run: may start only once the previous step's receives are done
    // A Send or Copy of its job's input, which scales each slice as it reads it (scaleSourceSlice).
    bool scalesSrc = false;
    // A reduction of its job's input, which scales it block by block as it reduces (reduceSlice).
    bool fusesScale = false;
    char* src = nullptr;  // resolved step.src (null when unused)
    char* dst = nullptr;  // resolved step.dst (null for Transient)
    size_t elemSize = 0;
    size_t sliceElems = 0;
    size_t nslices = 0;
    size_t posted = 0;                  // receives posted
    size_t finished = 0;                // slices received and processed (ready to send)
    size_t sendsPosted = 0;             // sends posted
    size_t sendsDone = 0;               // sends completed, in order
    size_t nextSameRecvPeer = kNoStep;  // the next step that receives from the same peer
    size_t nextSameSendPeer = kNoStep;  // the next step that sends to the same peer
    size_t after = kNoStep;             // step.sliceAfter as a flat index: its slice j must be finished first
    uint64_t startTicks = 0;            // when it started (only while tracing)
    std::vector<SliceState> slices;

    bool receives() const { return step->recvPeer >= 0; }
    bool sends() const { return step->sendPeer >= 0; }
    size_t sliceOffset(size_t i) const { return i * sliceElems; }
    size_t sliceCount(size_t i) const { return std::min(sliceElems, step->count - i * sliceElems); }
  };

  /// Whether `jobs` is one job of the same schedule and slicing as the previous run, whose flattened steps, peers
  /// and turn chains are then reused as they are (the prepared plan of a repeated call).
  bool samePlanAsLast(std::span<const Job> jobs) const;
  bool canStart(size_t flat) const;
  // The small run (one slice per step): executor_small.cpp.
  /// Whether the current run may take stepSmall; then marks the steps that wait behind a receive (gated).
  bool prepareSmall();
  bool stepSmall();
  void startSmall(StepState& st);
  bool finishSmall(size_t flat);
  void planStep(StepState& st);
  void startStep(size_t flat);
  bool advanceStep(size_t flat);
  static bool stepRecvsDone(const StepState& st) { return st.started && st.finished == st.nslices; }
  static bool stepDone(const StepState& st) { return stepRecvsDone(st) && (!st.sends() || st.sendsDone == st.nslices); }
  void finishJobIfDone(size_t job);
  /// Whether job `j` sums inputs scaled first: divided (ReduceOp::Avg over a floating type: base::AvgDivisors) or
  /// multiplied by this rank's factor (ReduceOp::PreMulSum). Where no two steps read the same elements of the input
  /// (Schedule::inputReadOnce), a step that reduces the input scales it block by block as it reduces (fusesScale: no
  /// pass of its own), and a Send or Copy of it scales each slice into the job's area of scratch_ (jobScaledInput_)
  /// just before it is read (scalesSrc); otherwise the whole input is scaled there as the job starts (scaleInputAt)
  /// and every step reads it from there. Never before the job starts: an earlier job of a group may write that input
  /// (a Sum then an Avg in place).
  bool scalesInput(const Job& j) const;
  /// Job `job` scales its input as its steps read it (scalesInput, and its schedule reads each input element once).
  bool scalesLazily(size_t job) const {
    return jobScaledInput_[job] != kNoScaledInput && jobs_[job].schedule->inputReadOnce;
  }
  void scaleInputAt(size_t flat, const StepState& st);
  /// Scales elements [first, first + count) of step `st`'s source (its input) into scratch, when st.scalesSrc: as a
  /// Copy starts and before each slice of a Send is posted.
  void scaleSourceSlice(const StepState& st, size_t first, size_t count) {
    if (st.scalesSrc) [[unlikely]]
      scaleInputRange(st.job, st.step->src.offset + first, count);
  }
  void scaleInputRange(size_t job, size_t firstElem, size_t count);
  /// How job `job` scales its input (read from its buffers at each use: a repeated call may bring another factor).
  base::InputScale inputScaleOf(size_t job) const;
  /// A reducing step's arithmetic on one slice (JobBuffers::reduceReceived; scaling src first where st.fusesScale).
  void reduceSlice(const StepState& st, char* out, const char* src, const char* received, size_t count) const {
    if (st.fusesScale) [[unlikely]]
      return reduceScaledSlice(st, out, src, received, count);
    jobs_[st.job].buffers.reduceReceived(*st.step, out, src, received, count);
  }
  void reduceScaledSlice(const StepState& st, char* out, const char* src, const char* received, size_t count) const;
  char* acquireSlot();
  void releaseSlot(char*& slot) {
    if (slot) freeSlots_.push_back(slot);
    slot = nullptr;
  }
  [[noreturn]] void failTimeout();
  void lookAtIdleConnections();
  /// Shows the calls this run waits in and compares the calls a waited-on peer shows with this rank's.
  void compareWaitingCalls();
  /// Ends what compareWaitingCalls showed (the run is over).
  void stopShowingWaiting();
  /// The next look asks every waited-on peer afresh (the run moved, or is over).
  void restartAsking();
  /// What `peer` said when this run last asked it which calls it waits in ("; asked 3 s ago, ..."), for the timeout's
  /// message; empty when this run did not ask it.
  std::string toldText(int peer) const;
  void traceWait(size_t flat, bool recv);

  int rank_, nranks_;
  std::vector<transport::Connection*> conns_;
  base::Poller& poller_;
  const std::atomic<bool>& abort_;
  std::string name_;

  // State of the current run (reused between runs to avoid allocations).
  std::span<const Job> jobs_;
  ExecConfig config_;
  std::vector<StepState> steps_;      // flattened over all jobs
  size_t frontier_ = 0;               // next step to start
  size_t firstLive_ = 0;              // first step not yet done
  std::vector<size_t> jobFirstStep_;  // jobs_.size() + 1 entries
  std::vector<uint8_t> jobDone_;
  std::vector<size_t> recvTurn_;                       // by peer: the step allowed to post receives from it now
  std::vector<size_t> sendTurn_;                       // by peer: the step allowed to post sends to it now
  std::vector<size_t> firstRecvTurn_, firstSendTurn_;  // their values at the start of a run
  Job prepared_;                                       // the last run's single job (schedule null: none)
  bool small_ = false;                                 // the current run takes stepSmall (prepareSmall)
  std::vector<int> activePeers_;
  bool waitOnPoller_ = false;  // every active peer's connection is announcedByPoller (run(): how idle passes wait)
  std::vector<uint8_t> peerMark_;
  std::vector<char*> freeSlots_;
  std::vector<char*> allSlots_;
  size_t slotBytes_ = 0;
  char* scratch_ = nullptr;  // Buffer::Scratch of every job (grows, kept between runs)
  size_t scratchBytes_ = 0;
  std::vector<size_t> jobScratch_;                // byte offset of each job's scratch in scratch_
  std::vector<size_t> jobScaledInput_;            // byte offset of each job's scaled input in scratch_
  std::vector<transport::Fingerprint> lastSeen_;  // by peer: the call of the last message received from it
  std::vector<uint8_t> seenInInit_;               // by peer: last seen in one of init's calls (beginUserCalls)
  const CallHistory* history_ = nullptr;
  LookHooks look_;
  bool showingWaiting_ = false;  // this run told look_.showWaiting its calls
  size_t askNext_ = 0;           // compareWaitingCalls: whose turn it is among the waited-on peers
  uint32_t looks_ = 0;           // compareWaitingCalls of this stall so far
  struct PeerAsked {        // a waited-on peer's questions in this stall (compareWaitingCalls; failTimeout tells them)
    uint32_t nextLook = 0;  // the look from which it may be asked again (0: at once)
    uint8_t asked = 0;      // how often it was asked
    uint8_t count = 0;      // calls it showed in its last answer
    transport::Fingerprint first{};                        // the first of them
    std::chrono::steady_clock::time_point answeredAt{};    // its last answer (epoch: none)
    std::chrono::steady_clock::time_point unansweredAt{};  // its last question without an answer (epoch: none)
  };
  std::vector<PeerAsked> asking_;  // by peer
  CallTrace* trace_ = nullptr;
};

}  // namespace collie::core
