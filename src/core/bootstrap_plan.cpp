// The plan of init's table exchange (see bootstrap_plan.hpp): the root's answer, the all-gather's rounds and the
// links init closes all derive from one function, tableGatherPlan, so they cannot disagree.
#include "core/bootstrap_plan.hpp"

#include <algorithm>

namespace collie::core {
namespace {

int wrap(int r, int n) { return ((r % n) + n) % n; }

std::vector<int> sortedUnique(std::vector<int> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

bool tableGatherNeeded(int nranks) { return nranks > 3; }

std::vector<TableRound> tableGatherPlan(int rank, int nranks) {
  std::vector<TableRound> plan;
  if (!tableGatherNeeded(nranks)) return plan;
  const int n = nranks, r = rank;
  // This rank holds [r - radius, r + radius]; so do its partners, each around itself (the windows stay centred until
  // the last round, which ends the gather).
  for (int radius = 1; 2 * radius + 1 < n; radius *= 2) {
    const int missing = n - (2 * radius + 1);
    const int ahead = std::min(radius, (missing + 1) / 2);  // entries after the window, from r + radius
    const int behind = std::min(radius, missing / 2);       // entries before it, from r - radius
    const int next = wrap(r + radius, n), prev = wrap(r - radius, n);
    TableRound round;
    auto add = [n](std::vector<TableMessage>& list, int peer, int first, int count) {
      if (count > 0) list.push_back({peer, wrap(first, n), count});
    };
    add(round.recvs, next, r + radius + 1, ahead);
    add(round.recvs, prev, r - radius - behind, behind);
    add(round.sends, next, r - behind, behind);  // next's window starts at r: it lacks the entries just before
    add(round.sends, prev, r + 1, ahead);        // prev's window ends at r: it lacks the entries just after
    plan.push_back(std::move(round));
  }
  return plan;
}

std::vector<int> bootstrapPeers(int rank, int nranks) {
  std::vector<int> out;
  for (int p : {rank - 1, rank + 1})
    if (nranks > 1 && wrap(p, nranks) != rank) out.push_back(wrap(p, nranks));
  return sortedUnique(out);
}

std::vector<int> tableGatherPartners(int rank, int nranks) {
  std::vector<int> out;
  for (const TableRound& round : tableGatherPlan(rank, nranks)) {
    for (const TableMessage& m : round.sends) out.push_back(m.peer);
    for (const TableMessage& m : round.recvs) out.push_back(m.peer);
  }
  return sortedUnique(out);
}

std::vector<int> gatherOnlyPeers(int rank, int nranks) {
  std::vector<int> out;
  const std::vector<int> ring = bootstrapPeers(rank, nranks);
  for (int p : tableGatherPartners(rank, nranks))
    if (!std::binary_search(ring.begin(), ring.end(), p)) out.push_back(p);
  return out;
}

int tableGatherRounds(int nranks) { return static_cast<int>(tableGatherPlan(0, nranks).size()); }

}  // namespace collie::core
