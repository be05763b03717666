// Direct exchange: AllToAll posts one send and one receive per peer, all at once (every step overlaps the
// next), visiting peers in the order r+1, r+2, ... so that no peer is everyone's first target. Send and Recv
// are a single step to or from the peer.
#include "algorithms/algorithms.hpp"
#include "algorithms/patterns/ring.hpp"

namespace collie::algorithms {

Schedule buildDirect(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank;
  if (k.coll == Collective::AllToAll) {
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
  }
  return sch;
}

}  // namespace collie::algorithms
