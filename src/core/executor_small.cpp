// The executor's small run (executor.hpp). A job whose every step moves at most one slice, with no sliceAfter and no
// forwarding kind (the direct AllReduce and AllToAll of small messages, small Broadcast/Reduce trees' leaves, Send
// and Recv) needs none of the slice machinery: each step posts its one transfer when it starts, in schedule order,
// so per peer the transfers are posted in the order step() would post them (its turn chains reduce to that order),
// and the same messages, with the same fingerprints, cross the same connections. A pass starts what may start,
// progresses the peers, then processes completed receives (reduce or copy, in step order) and sends, and retires
// finished steps.
//
// Which step may start is decided once per prepared run (prepareSmall): a step waits only behind a receiving step
// that does not overlap the next (StepState::gated), so a pass needs no per-step rule; a step whose transfers are
// all done costs one comparison per pass.
#include "base/datatypes.hpp"
#include "base/small_copy.hpp"
#include "core/call_trace.hpp"
#include "core/executor.hpp"
#include "core/flight_recorder.hpp"

namespace collie::core {

using algorithms::Step;
using algorithms::StepKind;

bool Executor::prepareSmall() {
  if (jobs_.size() != 1) return false;
  for (const StepState& st : steps_) {
    const StepKind k = st.step->kind;
    if (st.nslices > 1 || st.after != kNoStep || k == StepKind::RecvReduceSend || k == StepKind::RecvCopySend)
      return false;
  }
  // canStart() of a single job: the previous step started, and overlaps this one or has its receives done; a step
  // that receives nothing (Copy, Send, count 0) has them done once started, and steps start in order.
  for (size_t i = 0; i < steps_.size(); ++i) {
    const StepState* prev = i > 0 ? &steps_[i - 1] : nullptr;
    steps_[i].gated = prev && !prev->step->overlapNext && prev->receives() && prev->nslices > 0;
  }
  return true;
}

void Executor::startSmall(StepState& st) {
  const Step& s = *st.step;
  st.started = true;
  if (trace_) [[unlikely]]
    st.startTicks = TickClock::ticks();
  if (s.kind == StepKind::Copy) {
    const size_t bytes = s.count * st.elemSize;
    scaleSourceSlice(st, 0, s.count);
    if (st.src != st.dst) base::moveBytes(st.dst, st.src, bytes);
    return;
  }
  if (st.nslices == 0) return;  // nothing moves (count 0)
  if (st.slices.size() != 1) st.slices.resize(1);
  SliceState& sl = st.slices[0];
  const Job& job = jobs_[st.job];
  const size_t bytes = s.count * st.elemSize;
  if (st.receives()) {
    char* target = st.dst;
    if (st.viaSlot) target = sl.slot = acquireSlot();
    sl.recv = transport::Transfer{target, bytes};
    sl.recv.fp = job.recvFp;
    conns_[static_cast<size_t>(s.recvPeer)]->postRecv(&sl.recv);
    st.posted = 1;
  } else {
    sl.send = transport::Transfer{st.src, bytes};
    sl.send.fp = job.sendFp;
    scaleSourceSlice(st, 0, s.count);
    conns_[static_cast<size_t>(s.sendPeer)]->postSend(&sl.send);
    st.finished = st.sendsPosted = 1;  // nothing to receive: ready, and posted
  }
}

bool Executor::finishSmall(size_t flat) {
  StepState& st = steps_[flat];
  if (st.finished < st.posted) {
    SliceState& sl = st.slices[0];
    if (!sl.recv.complete) return false;
    const Step& s = *st.step;
    if (s.kind == StepKind::RecvReduce) {
      char* out = st.dst ? st.dst : sl.slot;
      reduceSlice(st, out, st.src, st.viaSlot ? sl.slot : out, s.count);
    }
    releaseSlot(sl.slot);
    lastSeen_[static_cast<size_t>(s.recvPeer)] = jobs_[st.job].recvFp;  // its fingerprint matched
    st.finished = 1;
    if (trace_) [[unlikely]]
      traceWait(flat, true);
    return true;
  }
  if (st.sendsDone < st.sendsPosted && st.slices[0].send.complete) {
    st.sendsDone = 1;
    if (trace_) [[unlikely]]
      traceWait(flat, false);
    return true;
  }
  return false;
}

bool Executor::stepSmall() {
  const size_t total = steps_.size();
  bool moved = false;
  for (; frontier_ < total; ++frontier_) {
    StepState& st = steps_[frontier_];
    if (st.gated && steps_[frontier_ - 1].finished == 0) break;  // behind a receive not done yet
    scaleInputAt(frontier_, st);
    startSmall(st);
    moved = true;
  }
  for (int p : activePeers_) moved |= conns_[static_cast<size_t>(p)]->progress();
  for (size_t i = firstLive_; i < frontier_; ++i) {
    const StepState& st = steps_[i];
    if (st.finished < st.posted || st.sendsDone < st.sendsPosted) moved |= finishSmall(i);
  }
  while (firstLive_ < frontier_ && stepDone(steps_[firstLive_])) {
    ++firstLive_;
    moved = true;
  }
  if (firstLive_ == total) finishJobIfDone(0);
  return moved;
}

}  // namespace collie::core
