#include "core/executor.hpp"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/call_fingerprint.hpp"
#include "core/call_trace.hpp"
#include "core/flight_recorder.hpp"

namespace collie::core {

using algorithms::Buffer;
using algorithms::Step;
using algorithms::StepKind;
using transport::Transfer;
using Clock = std::chrono::steady_clock;

/// How often a waiting executor asks its connections whether a silent peer is dead (Connection::checkAlive).
constexpr std::chrono::milliseconds kAliveCheckEvery{1000};

namespace {

char* resolve(const JobBuffers& b, char* scratch, const algorithms::Range& r, size_t elemSize) {
  if (r.buffer == Buffer::Input) return const_cast<char*>(static_cast<const char*>(b.input)) + r.offset * elemSize;
  if (r.buffer == Buffer::Output) return static_cast<char*>(b.output) + r.offset * elemSize;
  if (r.buffer == Buffer::Scratch) return scratch + r.offset * elemSize;
  return nullptr;
}

bool overlaps(const char* a, const char* b, size_t bytes) { return a && b && a < b + bytes && b < a + bytes; }

Transfer transfer(void* buf, size_t bytes, const transport::Fingerprint& fp) {
  Transfer t{buf, bytes};
  t.fp = fp;
  return t;
}

}  // namespace

Executor::Executor(int rank, int nranks, std::vector<transport::Connection*> conns, base::Poller& poller,
                   const std::atomic<bool>& abortFlag, std::string commName)
    : rank_(rank),
      nranks_(nranks),
      conns_(std::move(conns)),
      poller_(poller),
      abort_(abortFlag),
      name_(std::move(commName)),
      peerMark_(static_cast<size_t>(nranks), 0),
      lastSeen_(static_cast<size_t>(nranks)) {}

Executor::~Executor() {
  for (char* s : allSlots_) free(s);
  free(scratch_);
}

char* Executor::acquireSlot() {
  if (freeSlots_.empty()) {
    char* s = static_cast<char*>(aligned_alloc(64, (slotBytes_ + 63) / 64 * 64));
    COLLIE_ENFORCE(s != nullptr, ErrorCode::SystemError, "out of memory allocating a %zu-byte slice slot", slotBytes_);
    allSlots_.push_back(s);
    return s;
  }
  char* s = freeSlots_.back();
  freeSlots_.pop_back();
  return s;
}

bool Executor::canStart(size_t flat) const {
  if (flat == 0) return true;
  const StepState& prev = steps_[flat - 1];
  if (flat == jobFirstStep_[steps_[flat].job]) {
    size_t job = steps_[flat].job;
    if (jobs_[job].concurrentWithPrevious) return prev.started;
    for (size_t j = 0; j < job; ++j)
      if (!jobDone_[j]) return false;
    return true;
  }
  return prev.started && (prev.step->overlapNext || stepRecvsDone(prev));
}

// Resolves buffers and cuts the step into slices; done for every step before the run starts, so that the
// per-peer turn order can skip steps that move nothing.
void Executor::planStep(StepState& st) {
  const Step& s = *st.step;
  const Job& job = jobs_[st.job];
  st.elemSize = base::dataTypeSize(job.buffers.type);
  const size_t bytes = s.count * st.elemSize;
  char* scratch = scratch_ + jobScratch_[st.job];
  const bool reduces = s.kind == StepKind::RecvReduce || s.kind == StepKind::RecvReduceSend;
  const bool lazyInput = s.src.buffer == Buffer::Input && scalesLazily(st.job);
  st.fusesScale = reduces && lazyInput;  // reads the user's input itself
  st.scalesSrc = (s.kind == StepKind::Send || s.kind == StepKind::Copy) && lazyInput;
  JobBuffers buffers = job.buffers;
  if (jobScaledInput_[st.job] != kNoScaledInput) buffers.input = scratch_ + jobScaledInput_[st.job];
  st.src = resolve(st.fusesScale ? job.buffers : buffers, scratch, s.src, st.elemSize);
  st.dst = resolve(buffers, scratch, s.dst, st.elemSize);
  st.sliceElems = std::max<size_t>(1, job.sliceBytes / st.elemSize);
  // A step of 0 elements is kept only by a Send or Recv (algorithms::build): one message of 0 bytes.
  st.nslices = s.kind == StepKind::Copy ? 0 : std::max<size_t>(1, (s.count + st.sliceElems - 1) / st.sliceElems);
  st.viaSlot = reduces && (s.dst.buffer == Buffer::Transient || overlaps(st.src, st.dst, bytes));
}

void Executor::startStep(size_t flat) {
  StepState& st = steps_[flat];
  const Step& s = *st.step;
  st.started = true;
  scaleInputAt(flat, st);
  if (trace_) [[unlikely]]
    st.startTicks = TickClock::ticks();
  st.slices.clear();
  st.slices.resize(st.nslices);
  if (s.kind == StepKind::Copy) {
    size_t bytes = s.count * st.elemSize;
    scaleSourceSlice(st, 0, s.count);
    if (bytes && st.src != st.dst) memmove(st.dst, st.src, bytes);
  } else if (s.kind == StepKind::Send) {
    for (size_t i = 0; i < st.nslices; ++i)
      st.slices[i].send =
          transfer(st.src + st.sliceOffset(i) * st.elemSize, st.sliceCount(i) * st.elemSize, jobs_[st.job].sendFp);
    // Nothing to receive: every slice is ready to send, or, after another step, once that step finished it.
    st.finished = st.after == kNoStep ? st.nslices : 0;
  }
}

// Posts receives and sends while this step holds the peer's turn (steps talk to one peer in schedule order,
// so both ends match transfers one to one), reduces/copies received slices, and retires completed sends.
bool Executor::advanceStep(size_t flat) {
  StepState& st = steps_[flat];
  const Step& s = *st.step;
  bool moved = false;
  if (st.receives()) {
    auto peer = static_cast<size_t>(s.recvPeer);
    transport::Connection* in = conns_[peer];
    const size_t window = static_cast<size_t>(std::max(1, jobs_[st.job].slicesInFlight));
    while (recvTurn_[peer] == flat && st.posted < st.nslices && st.posted - st.finished < window) {
      SliceState& sl = st.slices[st.posted];
      size_t bytes = st.sliceCount(st.posted) * st.elemSize;
      char* target;
      if (st.viaSlot) {
        sl.slot = acquireSlot();
        target = sl.slot;
      } else {
        target = st.dst + st.sliceOffset(st.posted) * st.elemSize;
      }
      sl.recv = transfer(target, bytes, jobs_[st.job].recvFp);
      in->postRecv(&sl.recv);
      if (++st.posted == st.nslices) recvTurn_[peer] = st.nextSameRecvPeer;
      moved = true;
    }
    const size_t ready = st.after == kNoStep ? st.nslices : steps_[st.after].finished;
    while (st.finished < st.posted && st.finished < ready && st.slices[st.finished].recv.complete) {
      SliceState& sl = st.slices[st.finished];
      const size_t off = st.sliceOffset(st.finished) * st.elemSize;
      const size_t count = st.sliceCount(st.finished);
      char* out = st.dst ? st.dst + off : sl.slot;  // where this slice's result lives
      if (s.kind == StepKind::RecvReduce || s.kind == StepKind::RecvReduceSend) {
        reduceSlice(st, out, st.src + off, st.viaSlot ? sl.slot : out, count);
        if (st.dst) releaseSlot(sl.slot);  // the result is in dst now
      }
      lastSeen_[peer] = jobs_[st.job].recvFp;  // its fingerprint matched: the peer was in this call
      if (st.sends()) {
        sl.send = transfer(out, count * st.elemSize, jobs_[st.job].sendFp);
      } else {
        releaseSlot(sl.slot);
      }
      ++st.finished;
      moved = true;
      if (trace_ && st.finished == st.nslices) [[unlikely]]
        traceWait(flat, true);
    }
  }
  if (!st.receives() && st.after != kNoStep && st.finished < steps_[st.after].finished) {
    st.finished = steps_[st.after].finished;  // a Send after another step: its slices are ready now
    moved = true;
  }
  if (st.sends()) {
    auto peer = static_cast<size_t>(s.sendPeer);
    while (sendTurn_[peer] == flat && st.sendsPosted < st.finished) {
      if (s.kind == StepKind::Send) scaleSourceSlice(st, st.sliceOffset(st.sendsPosted), st.sliceCount(st.sendsPosted));
      conns_[peer]->postSend(&st.slices[st.sendsPosted].send);
      if (++st.sendsPosted == st.nslices) sendTurn_[peer] = st.nextSameSendPeer;
      moved = true;
    }
    while (st.sendsDone < st.sendsPosted && st.slices[st.sendsDone].send.complete) {
      releaseSlot(st.slices[st.sendsDone].slot);
      ++st.sendsDone;
      moved = true;
      if (trace_ && st.sendsDone == st.nslices) [[unlikely]]
        traceWait(flat, false);
    }
  }
  return moved;
}

// Steps retire in order (firstLive_), so a job is done once firstLive_ has passed its last step: checking that
// is O(1), where scanning the job's steps at every retirement was quadratic in the steps of a job.
void Executor::finishJobIfDone(size_t job) {
  if (jobDone_[job] || firstLive_ < jobFirstStep_[job + 1]) return;
  jobDone_[job] = 1;
  const Job& j = jobs_[job];
  if (j.buffers.op == ReduceOp::Avg && j.schedule->resultCount > 0) {
    char* res = resolve(j.buffers, scratch_ + jobScratch_[job], j.schedule->result, base::dataTypeSize(j.buffers.type));
    const double divisor = base::avgDivisors(j.buffers.type, nranks_).result;
    if (divisor != 1) base::divideInPlace(res, j.schedule->resultCount, j.buffers.type, divisor);
  }
}

bool Executor::scalesInput(const Job& j) const {
  const ReduceOp op = j.buffers.op;
  if (op != ReduceOp::PreMulSum && op != ReduceOp::Avg) return false;  // the common case, asked on every call
  if (j.schedule->inputCount == 0) return false;
  return op == ReduceOp::PreMulSum || base::avgDivisors(j.buffers.type, nranks_).input > 1;
}

// Scaling a job's input (scalesInput says where and when; the user's send buffer is left as it was, an in-place
// call's included). NCCL's kernels scale as they load; here a reduction scales through an L1-sized block
// (base::reduceScaled), and what is sent or copied is scaled into scratch just before, still in cache for the copy.
void Executor::scaleInputRange(size_t job, size_t firstElem, size_t count) {
  const JobBuffers& b = jobs_[job].buffers;
  const size_t es = base::dataTypeSize(b.type);
  base::scaleInto(scratch_ + jobScaledInput_[job] + firstElem * es, static_cast<const char*>(b.input) + firstElem * es,
                  count, b.type, inputScaleOf(job));
}

base::InputScale Executor::inputScaleOf(size_t job) const {
  const JobBuffers& b = jobs_[job].buffers;
  if (b.op == ReduceOp::PreMulSum) return {true, 1, b.factor};
  return {false, base::avgDivisors(b.type, nranks_).input, 0};
}

void Executor::scaleInputAt(size_t flat, const StepState& st) {
  const size_t j = st.job;
  if (jobScaledInput_[j] == kNoScaledInput || scalesLazily(j) || flat != jobFirstStep_[j]) return;
  scaleInputRange(j, 0, jobs_[j].schedule->inputCount);
}

void Executor::reduceScaledSlice(const StepState& st, char* out, const char* src, const char* received,
                                 size_t count) const {
  const JobBuffers& b = jobs_[st.job].buffers;
  base::reduceScaled(out, src, received, count, b.type, b.op, inputScaleOf(st.job), st.step->receivedFirst);
}

// A step's transfers with one peer are done: the trace gets its wait on that peer (none for this rank itself).
void Executor::traceWait(size_t flat, bool recv) {
  const StepState& st = steps_[flat];
  const int peer = recv ? st.step->recvPeer : st.step->sendPeer;
  if (peer == rank_) return;
  trace_->stepWait(st.job, flat - jobFirstStep_[st.job], peer, recv, st.step->count * st.elemSize, st.startTicks,
                   TickClock::ticks());
}

bool Executor::samePlanAsLast(std::span<const Job> jobs) const {
  if (jobs.size() != 1 || prepared_.schedule == nullptr || steps_.empty()) return false;
  const Job& j = jobs[0];
  return j.schedule == prepared_.schedule && j.scheduleGeneration == prepared_.scheduleGeneration &&
         j.sliceBytes == prepared_.sliceBytes && j.slicesInFlight == prepared_.slicesInFlight &&
         j.buffers.type == prepared_.buffers.type && scalesInput(j) == scalesInput(prepared_);
}

void Executor::begin(std::span<const Job> jobs) {
  jobs_ = jobs;
  if (samePlanAsLast(jobs)) {
    // A repeated call: the steps, peers, turn chains, scratch and slots are as the last run left them; only the
    // progress counters are new, and the buffers (planStep) unless they are the last run's too.
    jobDone_[0] = 0;
    const JobBuffers& b = jobs[0].buffers;
    const bool sameBuffers = b.input == prepared_.buffers.input && b.output == prepared_.buffers.output;
    prepared_.buffers = b;
    for (StepState& st : steps_) {
      st.started = false;
      st.posted = st.finished = st.sendsPosted = st.sendsDone = 0;
      if (!sameBuffers) planStep(st);
    }
    if (!small_) {  // the small run posts in schedule order without turns
      recvTurn_ = firstRecvTurn_;
      sendTurn_ = firstSendTurn_;
    }
    frontier_ = firstLive_ = 0;
    return;  // small_ stays as the prepared run decided
  }
  prepared_ = Job{};
  small_ = false;
  size_t maxSlice = 0;
  for (const Job& j : jobs) maxSlice = std::max(maxSlice, j.sliceBytes);
  if (maxSlice > slotBytes_) {  // slots are sized for the largest slice seen; drop smaller ones
    for (char* s : allSlots_) free(s);
    allSlots_.clear();
    freeSlots_.clear();
    slotBytes_ = maxSlice;
  }

  // Scratch areas of the jobs, one allocation (kept for later runs).
  jobScratch_.assign(jobs.size(), 0);
  jobScaledInput_.assign(jobs.size(), kNoScaledInput);
  size_t scratchTotal = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const size_t elemSize = base::dataTypeSize(jobs[j].buffers.type);
    jobScratch_[j] = scratchTotal;
    scratchTotal += (jobs[j].schedule->scratchCount * elemSize + 63) / 64 * 64;
    if (scalesInput(jobs[j])) {
      jobScaledInput_[j] = scratchTotal;
      scratchTotal += (jobs[j].schedule->inputCount * elemSize + 63) / 64 * 64;
    }
  }
  if (scratchTotal > scratchBytes_) {
    free(scratch_);
    scratch_ = static_cast<char*>(aligned_alloc(64, scratchTotal));
    COLLIE_ENFORCE(scratch_ != nullptr, ErrorCode::SystemError, "out of memory allocating %zu bytes of scratch",
                   scratchTotal);
    scratchBytes_ = scratchTotal;
  }

  // Flatten the steps of all jobs; collect the peers we talk to.
  jobFirstStep_.assign(1, 0);
  size_t total = 0;
  for (const Job& j : jobs) {
    total += j.schedule->steps.size();
    jobFirstStep_.push_back(total);
  }
  steps_.resize(total);
  jobDone_.assign(jobs.size(), 0);
  for (size_t j = 0; j < jobs.size(); ++j) jobDone_[j] = jobFirstStep_[j] == jobFirstStep_[j + 1];  // no steps
  activePeers_.clear();
  size_t flat = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    for (const Step& s : jobs[j].schedule->steps) {
      StepState& st = steps_[flat++];
      st.step = &s;
      st.job = j;
      st.started = false;
      st.posted = st.finished = st.sendsPosted = st.sendsDone = 0;
      st.nextSameRecvPeer = st.nextSameSendPeer = kNoStep;
      st.after = kNoStep;
      if (s.sliceAfter >= 0) {
        st.after = jobFirstStep_[j] + static_cast<size_t>(s.sliceAfter);
        const Step& a = jobs[j].schedule->steps[static_cast<size_t>(s.sliceAfter)];
        COLLIE_INTERNAL_CHECK(st.after + 1 < flat && a.count == s.count && a.kind != StepKind::Copy,
                              "schedule step %zu: sliceAfter=%d must name an earlier non-Copy step of equal count",
                              flat - 1 - jobFirstStep_[j], s.sliceAfter);
      }
      planStep(st);
      for (int p : {s.sendPeer, s.recvPeer}) {
        if (p >= 0 && !peerMark_[static_cast<size_t>(p)]) {
          peerMark_[static_cast<size_t>(p)] = 1;
          activePeers_.push_back(p);
        }
      }
    }
  }
  for (int p : activePeers_) peerMark_[static_cast<size_t>(p)] = 0;
  waitOnPoller_ = !activePeers_.empty();
  for (int p : activePeers_) waitOnPoller_ = waitOnPoller_ && conns_[static_cast<size_t>(p)]->announcedByPoller();
  // Turn chains: per peer, the steps that move bytes to (from) it, in schedule order.
  recvTurn_.assign(static_cast<size_t>(nranks_), kNoStep);
  sendTurn_.assign(static_cast<size_t>(nranks_), kNoStep);
  for (size_t i = total; i-- > 0;) {
    StepState& st = steps_[i];
    if (st.nslices == 0) continue;
    if (st.receives()) {
      st.nextSameRecvPeer = recvTurn_[static_cast<size_t>(st.step->recvPeer)];
      recvTurn_[static_cast<size_t>(st.step->recvPeer)] = i;
    }
    if (st.sends()) {
      st.nextSameSendPeer = sendTurn_[static_cast<size_t>(st.step->sendPeer)];
      sendTurn_[static_cast<size_t>(st.step->sendPeer)] = i;
    }
  }
  firstRecvTurn_ = recvTurn_;
  firstSendTurn_ = sendTurn_;
  if (jobs.size() == 1) prepared_ = jobs[0];
  small_ = prepareSmall();
  frontier_ = firstLive_ = 0;
}

bool Executor::step() {
  const size_t total = steps_.size();
  bool moved = false;
  while (frontier_ < total && canStart(frontier_)) {
    startStep(frontier_++);
    moved = true;
  }
  for (size_t i = firstLive_; i < frontier_; ++i) moved |= advanceStep(i);
  for (int p : activePeers_) moved |= conns_[static_cast<size_t>(p)]->progress();
  for (size_t i = firstLive_; i < frontier_; ++i) moved |= advanceStep(i);
  while (firstLive_ < frontier_ && stepDone(steps_[firstLive_])) {
    ++firstLive_;
    finishJobIfDone(steps_[firstLive_ - 1].job);
    moved = true;
  }
  return moved;
}

bool Executor::done() const { return firstLive_ == steps_.size(); }

void Executor::cancel() {
  for (StepState& st : steps_)
    for (SliceState& sl : st.slices) releaseSlot(sl.slot);
  steps_.clear();
  prepared_ = Job{};
  small_ = false;
  frontier_ = firstLive_ = 0;
}

void Executor::run(std::span<const Job> jobs, const ExecConfig& config) {
  config_ = config;
  begin(jobs);
  // Idle passes spin (reading the clock only every 16th pass) for config.spin, then sleep in the poller. The
  // spin yields the CPU only when this host has more ranks than CPUs; otherwise a yield costs more than the
  // wait it is meant to cover. The idle time is counted from the 16th idle pass after a move (a small call is
  // usually over before: no clock read at all), which delays the timeout by those few passes only.
  // When every connection the run waits on is announced by the poller (tcp), an idle pass asks the poller
  // (epoll_wait without sleeping) and steps again only once something is ready, instead of trying every socket
  // again: 2 ranks over loopback, 256 KiB-1 MiB, 1.2-1.7x the busbw (perf/RESULTS.md; a recvmsg that finds
  // nothing takes the socket's lock, which the peer's sendmsg needs to deliver into it, while epoll_wait takes
  // none). No readiness is lost: an edge stays queued in epoll until a wait takes it, as for the sleep below.
  auto lastMove = Clock::time_point{};
  auto lastAliveCheck = lastMove;
  uint64_t idlePasses = 0;
  bool ready = true;  // step on the next pass (false: the poller said nothing is ready)
  try {
    while (true) {
      bool moved = ready && (small_ ? stepSmall() : step());
      if (done()) break;
      if (abort_.load(std::memory_order_relaxed)) {
        COLLIE_FAIL(ErrorCode::InvalidUsage, "%s rank %d: the communicator was aborted", name_.c_str(), rank_);
      }
      if (moved) {
        idlePasses = 0;
        if (looks_ != 0) restartAsking();  // a stall after this one asks afresh
        continue;
      }
      if (waitOnPoller_) {
        ready = poller_.readyNow();
        if (ready) continue;
      }
      if (++idlePasses % 16 != 0) {
        if (config_.yieldWhileSpinning) {
          sched_yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
        continue;
      }
      if (idlePasses == 16) lastMove = Clock::now();  // the first clock read after a move stamps it
      auto idle = Clock::now() - lastMove;
      if (idle > config_.timeout) failTimeout();
      if (idle < config_.spin) continue;
      if (idle > kAliveCheckEvery && Clock::now() - lastAliveCheck > kAliveCheckEvery) {
        // Asleep for a while: ask the transports whether a peer we wait on is dead rather than late.
        lastAliveCheck = Clock::now();
        for (int p : activePeers_)
          if (p != rank_) conns_[static_cast<size_t>(p)]->checkAlive();
        lookAtIdleConnections();
      }
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(config_.timeout - idle);
      poller_.wait(std::min<std::chrono::microseconds>(left, std::chrono::milliseconds(100)));
      ready = true;
    }
  } catch (...) {
    stopShowingWaiting();
    cancel();
    throw;
  }
  stopShowingWaiting();
}

}  // namespace collie::core
