// The plan of init's table exchange (see bootstrap_plan.hpp): the root's answer to each rank is derived from the
// very schedule the ranks then run, so the two cannot disagree.
#include "core/bootstrap_plan.hpp"

#include <algorithm>

#include "algorithms/patterns/halving_doubling.hpp"
#include "transport/transport.hpp"

namespace collie::core {

std::string tableGatherSelection() {
  return std::string("allgather:") + algorithms::algorithmName(kTableGatherAlgorithm);
}

bool tableGatherNeeded(int nranks) { return nranks > 2; }

algorithms::Schedule tableGatherSchedule(int rank, int nranks) {
  algorithms::ScheduleKey key;
  key.coll = algorithms::Collective::AllGather;
  key.rank = rank;
  key.nranks = nranks;
  key.count = sizeof(transport::PeerInfo);  // Uint8 elements: one PeerInfo per rank
  return algorithms::build(kTableGatherAlgorithm, key);
}

std::vector<int> bootstrapPeers(int rank, int nranks) {
  std::vector<int> out;
  if (!tableGatherNeeded(nranks)) {
    for (int p = 0; p < nranks; ++p)
      if (p != rank) out.push_back(p);
    return out;
  }
  for (const algorithms::Step& s : tableGatherSchedule(rank, nranks).steps) {
    for (int p : {s.sendPeer, s.recvPeer})
      if (p >= 0 && p != rank) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<int> gatherOnlyPeers(int rank, int nranks) {
  std::vector<int> out;
  if (!tableGatherNeeded(nranks)) return out;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  for (int p : bootstrapPeers(rank, nranks))
    if (p != next && p != prev) out.push_back(p);
  return out;
}

int tableGatherRounds(int nranks) {
  if (!tableGatherNeeded(nranks)) return 0;
  const algorithms::patterns::HalvingDoubling hd(nranks);
  int rounds = 0;
  for (int d = 1; d < hd.pof2; d *= 2) ++rounds;
  return rounds + (hd.extra > 0 ? 2 : 0);  // the folded ranks' entries in, and the whole table back out
}

}  // namespace collie::core
