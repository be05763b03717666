#include "algorithms/schedule.hpp"

#include <cstdio>

#include "algorithms/algorithms.hpp"

namespace collie::algorithms {

const char* collectiveName(Collective coll) {
  switch (coll) {
    case Collective::AllReduce:
      return "AllReduce";
    case Collective::Broadcast:
      return "Broadcast";
    case Collective::Reduce:
      return "Reduce";
    case Collective::AllGather:
      return "AllGather";
    case Collective::ReduceScatter:
      return "ReduceScatter";
    case Collective::AllToAll:
      return "AllToAll";
    case Collective::Send:
      return "Send";
    case Collective::Recv:
      return "Recv";
  }
  return "?";
}

const char* algorithmName(Algorithm algo) { return algo == Algorithm::Ring ? "ring" : "direct"; }

bool supports(Algorithm algo, Collective coll) {
  bool p2p = coll == Collective::AllToAll || coll == Collective::Send || coll == Collective::Recv;
  return algo == Algorithm::Direct ? p2p : !p2p;
}

Schedule build(Algorithm algo, const ScheduleKey& key) {
  return algo == Algorithm::Ring ? buildRing(key) : buildDirect(key);
}

namespace {
const char* kindName(StepKind kind) {
  switch (kind) {
    case StepKind::Send:
      return "Send";
    case StepKind::Recv:
      return "Recv";
    case StepKind::RecvReduce:
      return "RecvReduce";
    case StepKind::RecvReduceSend:
      return "RecvReduceSend";
    case StepKind::RecvCopySend:
      return "RecvCopySend";
    case StepKind::Copy:
      return "Copy";
  }
  return "?";
}
const char* bufferName(Buffer b) { return b == Buffer::Input ? "in" : b == Buffer::Output ? "out" : "slot"; }
}  // namespace

std::string describe(const Schedule& schedule) {
  std::string out;
  char line[256];
  int i = 0;
  for (const Step& s : schedule.steps) {
    snprintf(line, sizeof(line), "%3d %-15s recv<-%-3d send->%-3d src=%s+%zu dst=%s+%zu count=%zu%s\n", i++,
             kindName(s.kind), s.recvPeer, s.sendPeer, bufferName(s.src.buffer), s.src.offset, bufferName(s.dst.buffer),
             s.dst.offset, s.count, s.overlapNext ? " overlap" : "");
    out += line;
  }
  return out;
}

}  // namespace collie::algorithms
