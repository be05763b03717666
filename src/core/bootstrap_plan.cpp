// The plan of init's table exchange (see bootstrap_plan.hpp): the root's answer, the all-gather's rounds and the
// links init closes all derive from one tree (treePlace), so they cannot disagree.
#include "core/bootstrap_plan.hpp"

#include <algorithm>
#include <utility>

#include "base/errors.hpp"

namespace collie::core {
namespace {

int wrap(int r, int n) { return ((r % n) + n) % n; }

int floorLog2(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

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

bool subtreeHolds(int holder, int rank, int nranks) {
  const TreePlace t = treePlace(holder, nranks);
  return wrap(rank - t.first, nranks) < t.size;
}

std::vector<int> directorySeeds(int rank, int nranks) {
  std::vector<int> seeds = bootstrapPeers(rank, nranks);
  const TreePlace top = treePlace(0, nranks);
  for (int r : {0, top.left, top.right})
    if (r >= 0) seeds.push_back(r);
  seeds = sortedUnique(std::move(seeds));
  seeds.erase(std::remove(seeds.begin(), seeds.end(), rank), seeds.end());
  return seeds;
}

std::vector<int> rootAnswerRanks(int rank, int nranks, bool cardDirectory) {
  return cardDirectory ? directorySeeds(rank, nranks) : bootstrapPeers(rank, nranks);
}

int tableChunkEntries(int nranks) {
  const int height = std::max(1, floorLog2(nranks));
  return std::max(kMinTableChunk, (nranks - 1 + height - 1) / height);
}

std::vector<TableRound> tableGatherPlan(int rank, int nranks, int chunkEntries) {
  std::vector<TableRound> plan;
  if (!tableGatherNeeded(nranks)) return plan;
  const int n = nranks, r = rank, chunk = chunkEntries > 0 ? chunkEntries : tableChunkEntries(n);
  const TreePlace t = treePlace(r, n);
  const int rightSize = t.size - t.leftSize - 1;
  auto add = [n](std::vector<TableMessage>& list, int peer, int first, int count) {
    if (peer >= 0 && count > 0) list.push_back({peer, wrap(first, n), count});
  };
  // What the parent streams here: everything but this subtree, from the subtree's end on, in chunks.
  const int inFirst = t.first + t.size, inCount = n - t.size, inChunks = (inCount + chunk - 1) / chunk;
  // What this node streams to a child: everything but the child's subtree, from its end on. Its positions
  // [inAt, inAt + inCount) are this node's incoming stream; the rest it holds since the up round (the left child's
  // stream starts with this node and the right subtree, the right child's ends with the left subtree and this node).
  struct Out {
    int peer, first, count, inAt, sent;
  };
  std::vector<Out> outs;
  if (t.left >= 0) outs.push_back({t.left, r, n - t.leftSize, 1 + rightSize, 0});
  if (t.right >= 0) outs.push_back({t.right, inFirst, n - rightSize, 0, 0});
  // Whether chunk j of o's stream is held once `received` chunks of the incoming stream have arrived.
  const auto held = [&](const Out& o, int j, int received) {
    const int lo = std::max(j * chunk - o.inAt, 0), hi = std::min(std::min((j + 1) * chunk, o.count) - o.inAt, inCount);
    return lo >= hi || hi <= std::min(received * chunk, inCount);
  };
  TableRound up;
  add(up.recvs, t.left, t.first, t.leftSize);  // the left subtree's entries
  add(up.recvs, t.right, r + 1, rightSize);    // the right subtree's
  if (!up.recvs.empty()) plan.push_back(std::move(up));
  // Down round k: receive incoming chunk k, send each child the chunks of its stream held by now (chunks 0..k-1 in),
  // so a chunk goes on one round after it came: pipelined.
  for (int k = 0; k <= inChunks; ++k) {
    TableRound round;
    if (k == 0) add(round.sends, t.parent, t.first, t.size);  // this subtree's, up
    if (k < inChunks) add(round.recvs, t.parent, inFirst + k * chunk, std::min(chunk, inCount - k * chunk));
    for (Out& o : outs) {
      for (; o.sent * chunk < o.count && held(o, o.sent, k); ++o.sent)
        add(round.sends, o.peer, o.first + o.sent * chunk, std::min(chunk, o.count - o.sent * chunk));
    }
    if (!round.sends.empty() || !round.recvs.empty()) plan.push_back(std::move(round));
  }
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

TableGatherCost tableGatherCost(int nranks, double perMessage, double perEntry, int chunk) {
  TableGatherCost cost;
  if (!tableGatherNeeded(nranks)) return cost;
  // Every rank's plan, flat: rank r's rounds are [roundAt[r], roundAt[r + 1]). A rank talks to its tree neighbours
  // only (slot 0: parent, 1: left child, 2: right child); sent[3p + slot] lists, in order, p's sends to that
  // neighbour as (its round, when after that round's start it has arrived), so a receive, the k-th from its peer,
  // finds its send at once.
  struct Sent {
    size_t round;
    double after;
  };
  struct Recv {
    size_t round;
    int peer, k;
  };
  const size_t n = static_cast<size_t>(nranks);
  std::vector<size_t> roundAt(n + 1);
  std::vector<int> rankOf;
  std::vector<std::vector<Sent>> sent(3 * n);
  std::vector<Recv> recvs;
  std::vector<TreePlace> places(n);
  for (size_t r = 0; r < n; ++r) places[r] = treePlace(static_cast<int>(r), nranks);
  const auto slot = [&](size_t p, int q) {
    const TreePlace& t = places[p];
    return q == t.parent ? 0 : q == t.left ? 1 : 2;
  };
  std::vector<TableRound> plan;
  for (size_t r = 0; r < n; ++r) {
    roundAt[r] = rankOf.size();
    int received[3] = {0, 0, 0};  // receives so far from each neighbour
    plan = tableGatherPlan(static_cast<int>(r), nranks, chunk);
    cost.rounds = std::max(cost.rounds, static_cast<int>(plan.size()));
    for (const TableRound& round : plan) {
      const size_t g = rankOf.size();
      rankOf.push_back(static_cast<int>(r));
      double behind[3] = {0, 0, 0};  // entries sent to each neighbour in this round so far
      for (const TableMessage& m : round.sends) {
        const int s = slot(r, m.peer);
        behind[s] += perEntry * m.count;
        sent[3 * r + static_cast<size_t>(s)].push_back({g, perMessage + behind[s]});
      }
      for (const TableMessage& m : round.recvs) recvs.push_back({g, m.peer, received[slot(r, m.peer)]++});
    }
  }
  roundAt[n] = rankOf.size();
  // Each round's receives, as the rounds that send them and when after their start they have arrived.
  std::vector<size_t> recvAt(rankOf.size() + 1, 0);
  for (const Recv& v : recvs) ++recvAt[v.round + 1];
  for (size_t g = 0; g < rankOf.size(); ++g) recvAt[g + 1] += recvAt[g];
  std::vector<Sent> from(recvs.size());
  std::vector<size_t> filled(recvAt.begin(), recvAt.end() - 1);
  for (const Recv& v : recvs) {
    const auto p = static_cast<size_t>(v.peer);
    const std::vector<Sent>& list = sent[3 * p + static_cast<size_t>(slot(p, rankOf[v.round]))];
    COLLIE_INTERNAL_CHECK(static_cast<size_t>(v.k) < list.size(),
                          "table all-gather of %d ranks, chunk %d: rank %d never sends rank %d its message %d", nranks,
                          chunk, v.peer, rankOf[v.round], v.k);
    from[filled[v.round]++] = list[static_cast<size_t>(v.k)];
  }
  // done(g): the round's start (0 for a rank's first, else its previous round's done), or the last arrival of its
  // receives (the sending round's start + after) if later. Rounds depend only on earlier rounds of their rank and on
  // the rounds that send to them (tableGatherPlan's tests check there is no cycle); evaluated depth first on an
  // explicit stack, since a chain of rounds can be as long as the table is in chunks.
  constexpr double kUnknown = -1;
  std::vector<double> done(rankOf.size(), kUnknown);
  std::vector<char> onStack(rankOf.size(), 0);
  const auto first = [&](size_t g) { return g == roundAt[static_cast<size_t>(rankOf[g])]; };
  const auto startOf = [&](size_t g) { return first(g) ? 0.0 : done[g - 1]; };
  const auto unstarted = [&](size_t g) { return !first(g) && done[g - 1] == kUnknown; };
  const auto ready = [&](size_t g) {  // what `g` waits for: a round whose done is not known, or g itself
    if (unstarted(g)) return g - 1;
    for (size_t i = recvAt[g]; i < recvAt[g + 1]; ++i)
      if (unstarted(from[i].round)) return from[i].round - 1;
    return g;
  };
  std::vector<size_t> stack;
  for (size_t last = 0; last < rankOf.size(); ++last) {
    if (done[last] != kUnknown) continue;
    stack.push_back(last);
    onStack[last] = 1;
    while (!stack.empty()) {
      const size_t g = stack.back();
      const size_t next = ready(g);
      if (next != g) {
        COLLIE_INTERNAL_CHECK(!onStack[next],
                              "table all-gather of %d ranks, chunk %d: round %zu of rank %d waits on itself", nranks,
                              chunk, next, rankOf[next]);
        stack.push_back(next);
        onStack[next] = 1;
        continue;
      }
      double t = startOf(g);
      for (size_t i = recvAt[g]; i < recvAt[g + 1]; ++i) t = std::max(t, startOf(from[i].round) + from[i].after);
      done[g] = t;
      onStack[g] = 0;
      stack.pop_back();
    }
  }
  for (double t : done) cost.finish = std::max(cost.finish, t);
  return cost;
}

}  // namespace collie::core
