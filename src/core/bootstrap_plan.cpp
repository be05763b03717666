// The plan of init's table exchange (see bootstrap_plan.hpp): the root's answer, the all-gather's rounds and the
// links init closes all derive from one tree (treePlace), so they cannot disagree.
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

TreePlace treePlace(int rank, int nranks) {
  // In positions v = rank + N/2 (mod N) the tree is the in-order one of [0, N): the root is the middle position,
  // which is rank 0's, and each node the middle of its parent's range on its side.
  const int n = nranks, shift = n / 2;
  const auto rankAt = [&](int v) { return wrap(v - shift, n); };
  const int me = wrap(rank + shift, n);
  int lo = 0, hi = n, parent = -1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (me == mid) break;
    parent = mid;
    if (me < mid)
      hi = mid;
    else
      lo = mid + 1;
  }
  TreePlace place;
  place.first = rankAt(lo);
  place.size = hi - lo;
  place.leftSize = me - lo;
  place.parent = parent < 0 ? -1 : rankAt(parent);
  if (lo < me) place.left = rankAt(lo + (me - lo) / 2);
  if (me + 1 < hi) place.right = rankAt(me + 1 + (hi - me - 1) / 2);
  return place;
}

std::vector<TableRound> tableGatherPlan(int rank, int nranks) {
  std::vector<TableRound> plan;
  if (!tableGatherNeeded(nranks)) return plan;
  const int n = nranks, r = rank;
  const TreePlace t = treePlace(r, n);
  const int rightSize = t.size - t.leftSize - 1;
  auto add = [n](std::vector<TableMessage>& list, int peer, int first, int count) {
    if (peer >= 0 && count > 0) list.push_back({peer, wrap(first, n), count});
  };
  TableRound up, parent, down;
  add(up.recvs, t.left, t.first, t.leftSize);    // the left subtree's entries
  add(up.recvs, t.right, r + 1, rightSize);      // the right subtree's
  add(parent.sends, t.parent, t.first, t.size);  // this subtree's, up
  add(parent.recvs, t.parent, t.first + t.size, n - t.size);
  add(down.sends, t.left, r, n - t.leftSize);  // everything but the left subtree's, from its end on
  add(down.sends, t.right, t.first + t.size, n - rightSize);
  for (TableRound* round : {&up, &parent, &down})
    if (!round->sends.empty() || !round->recvs.empty()) plan.push_back(std::move(*round));
  return plan;
}

std::vector<int> bootstrapPeers(int rank, int nranks) {
  std::vector<int> out;
  if (!tableGatherNeeded(nranks)) {
    for (int p = 0; p < nranks; ++p)
      if (p != rank) out.push_back(p);
    return out;
  }
  const TreePlace t = treePlace(rank, nranks);
  for (int p : {t.parent, t.left, t.right})
    if (p >= 0) out.push_back(p);
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
  if (!tableGatherNeeded(nranks)) return out;
  for (int p : tableGatherPartners(rank, nranks))
    if (p != wrap(rank + 1, nranks) && p != wrap(rank - 1, nranks)) out.push_back(p);
  return out;
}

int tableGatherRounds(int nranks) {
  if (!tableGatherNeeded(nranks)) return 0;
  int height = 0;  // of the tree: edges from the root to its deepest leaf, floor(log2 nranks)
  while ((2 << height) <= nranks) ++height;
  return 2 * height;
}

}  // namespace collie::core
