// The plan of init's table exchange (see bootstrap_plan.hpp): the root's answer, the all-gather's rounds and the
// links init closes all derive from one tree (treePlace), so they cannot disagree.
#include "core/bootstrap_plan.hpp"

#include <algorithm>
#include <functional>
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
  // Every rank's plan, flat: rank r's rounds are [roundAt[r], roundAt[r + 1]), round g's messages [msgAt[g],
  // msgAt[g + 1]); a receive knows which of its receives from that peer it is (the k-th matches the peer's k-th send).
  struct Msg {
    int peer, count, k;
    bool send;
  };
  const size_t n = static_cast<size_t>(nranks);
  std::vector<size_t> roundAt(n + 1), msgAt;
  std::vector<Msg> msgs;
  for (int r = 0; r < nranks; ++r) {
    roundAt[static_cast<size_t>(r)] = msgAt.size();
    int fromParent = 0, fromLeft = 0, fromRight = 0;  // receives so far from each peer
    const TreePlace t = treePlace(r, nranks);
    const std::vector<TableRound> plan = tableGatherPlan(r, nranks, chunk);
    cost.rounds = std::max(cost.rounds, static_cast<int>(plan.size()));
    for (const TableRound& round : plan) {
      msgAt.push_back(msgs.size());
      for (const TableMessage& m : round.sends) msgs.push_back({m.peer, m.count, 0, true});
      for (const TableMessage& m : round.recvs) {
        int& from = m.peer == t.parent ? fromParent : m.peer == t.left ? fromLeft : fromRight;
        msgs.push_back({m.peer, m.count, from++, false});
      }
    }
  }
  roundAt[n] = msgAt.size();
  msgAt.push_back(msgs.size());
  // The round of p that sends q its k-th message, and when after that round's start the message has arrived.
  const auto sentBy = [&](int p, int q, int k) {
    const size_t g0 = 0;
    int seen = 0;
    for (size_t g = roundAt[static_cast<size_t>(p)]; g < roundAt[static_cast<size_t>(p) + 1]; ++g) {
      double behind = 0;
      for (size_t m = msgAt[g]; m < msgAt[g + 1]; ++m) {
        if (!msgs[m].send || msgs[m].peer != q) continue;
        behind += perEntry * msgs[m].count;
        if (seen++ == k) return std::make_pair(g, perMessage + behind);
      }
    }
    COLLIE_INTERNAL_CHECK(false, "table all-gather of %d ranks, chunk %d: rank %d never sends rank %d its message %d",
                          nranks, chunk, p, q, k);
    return std::make_pair(g0, 0.0);
  };
  constexpr double kUnknown = -1, kVisiting = -2;
  std::vector<double> start(msgAt.size(), kUnknown);
  std::vector<int> rankOf(msgAt.size() - 1);
  for (size_t r = 0; r < n; ++r)
    for (size_t g = roundAt[r]; g < roundAt[r + 1]; ++g) rankOf[g] = static_cast<int>(r);
  // done(g): round g's start, or the last arrival of its receives if later. Rounds depend only on earlier rounds of
  // their rank and on the rounds that send to them (tableGatherPlan's tests check there is no cycle).
  std::function<double(size_t)> startOf, doneOf;
  doneOf = [&](size_t g) {
    double t = startOf(g);
    for (size_t m = msgAt[g]; m < msgAt[g + 1]; ++m) {
      if (msgs[m].send) continue;
      const auto [sender, after] = sentBy(msgs[m].peer, rankOf[g], msgs[m].k);
      t = std::max(t, startOf(sender) + after);
    }
    return t;
  };
  startOf = [&](size_t g) {
    double& slot = start[g];
    if (slot == kVisiting) return 0.0;
    if (slot != kUnknown) return slot;
    slot = kVisiting;
    const double t = g == roundAt[static_cast<size_t>(rankOf[g])] ? 0.0 : doneOf(g - 1);
    return start[g] = t;
  };
  for (size_t r = 0; r < n; ++r)
    if (roundAt[r + 1] > roundAt[r]) cost.finish = std::max(cost.finish, doneOf(roundAt[r + 1] - 1));
  return cost;
}

}  // namespace collie::core
