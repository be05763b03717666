// Direct exchange: AllToAll posts one send and one receive per peer, all at once (every step overlaps the
// next), visiting peers in the order r+1, r+2, ... so that no peer is everyone's first target. Send and Recv
// are a single step to or from the peer.
//
// Direct AllReduce: one exchange instead of the ring's or halving-doubling's two or more rounds, for tiny
// messages where the per-round latency is the whole cost (2 ranks: one flag write and one read each way). Every
// rank sends its whole input to every rank, itself included, and folds what it receives strictly in rank order:
//   out = x0;  out = out op x1;  ...;  out = out op x(n-1)
// so every rank performs the same operations on the same operands and ends with the same bits (for floats too).
// Ranks 0 and 1 start from their own input instead of receiving it from themselves; rank 1 folds x0 in as the first
// operand (Step::receivedFirst), so it too computes x0 op x1 (y op x may differ from x op y in a NaN's bits). The
// input is first copied to Scratch and sent from there, so that an in-place call may overwrite Output (= Input)
// while its sends are still in flight. It moves (n-1) x count elements per rank, so the tuner picks it only for
// small messages.
#include "algorithms/algorithms.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/steps.hpp"

namespace collie::algorithms {

namespace {

void directAllReduce(const ScheduleKey& k, Schedule& sch) {
  using namespace steps;
  const int n = k.nranks, r = k.rank;
  const size_t count = k.count;
  sch.inputCount = sch.outputCount = sch.resultCount = count;
  sch.result = out(0);
  if (n == 1) {
    sch.steps.push_back(copy(in(0), out(0), count));
    return;
  }
  const bool ownFirst = r <= 1;  // ranks 0 and 1 start from their own input (see above)
  sch.scratchCount = count;
  Step keep = copy(in(0), scratch(0), count);
  keep.overlapNext = true;
  sch.steps.push_back(keep);
  auto sendTo = [&](int peer) {
    Step s = send(peer, scratch(0), count);
    s.overlapNext = true;
    sch.steps.push_back(s);
  };
  for (int i = 1; i < n; ++i) sendTo(patterns::ringAdd(r, i, n));  // r+1, r+2, ...: no peer is everyone's first
  if (ownFirst) {
    sch.steps.push_back(copy(in(0), out(0), count));
    Step first = recvReduce(r == 0 ? 1 : 0, -1, out(0), out(0), count);
    first.receivedFirst = r == 1;  // x0 op x1 on both
    sch.steps.push_back(first);
    for (int j = 2; j < n; ++j) sch.steps.push_back(recvReduce(j, -1, out(0), out(0), count));
  } else {
    sendTo(r);  // to itself, over the self connection, to fold its input in at its place
    sch.steps.push_back(recv(0, out(0), count));
    for (int j = 1; j < n; ++j) sch.steps.push_back(recvReduce(j, -1, out(0), out(0), count));
  }
}

}  // namespace

Schedule buildDirect(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank;
  if (k.coll == Collective::AllReduce) {
    directAllReduce(k, sch);
  } else if (k.coll == Collective::AllToAll) {
    const size_t block = k.count;
    sch.inputCount = sch.outputCount = block * static_cast<size_t>(n);
    Step self;
    self.kind = StepKind::Copy;
    self.src = {Buffer::Input, static_cast<size_t>(r) * block};
    self.dst = {Buffer::Output, static_cast<size_t>(r) * block};
    self.count = block;
    self.overlapNext = true;
    sch.steps.push_back(self);
    for (int i = 1; i < n; ++i) {
      int peer = patterns::ringAdd(r, i, n);
      int from = patterns::ringAdd(r, -i, n);
      Step send;
      send.kind = StepKind::Send;
      send.sendPeer = peer;
      send.src = {Buffer::Input, static_cast<size_t>(peer) * block};
      send.count = block;
      send.overlapNext = true;
      sch.steps.push_back(send);
      Step recv;
      recv.kind = StepKind::Recv;
      recv.recvPeer = from;
      recv.dst = {Buffer::Output, static_cast<size_t>(from) * block};
      recv.count = block;
      recv.overlapNext = true;
      sch.steps.push_back(recv);
    }
    sch.steps.back().overlapNext = false;
  } else if (k.coll == Collective::Send) {
    Step send;
    send.kind = StepKind::Send;
    send.sendPeer = k.root;
    send.src = {Buffer::Input, 0};
    send.count = k.count;
    sch.steps.push_back(send);
    sch.inputCount = k.count;
  } else if (k.coll == Collective::Recv) {
    Step recv;
    recv.kind = StepKind::Recv;
    recv.recvPeer = k.root;
    recv.dst = {Buffer::Output, 0};
    recv.count = k.count;
    sch.steps.push_back(recv);
    sch.outputCount = k.count;
  } else {
    refuseUnsupported(Algorithm::Direct, k.coll);
  }
  return sch;
}

}  // namespace collie::algorithms
