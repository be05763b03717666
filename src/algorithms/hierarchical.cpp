// Hierarchical (host-aware) algorithms: AllReduce, Broadcast and Reduce that move each byte across the network once per
// host instead of once per rank, and use every rank's link to do it. Rank arithmetic in patterns/hosts.hpp:
// H hosts, host h holds L_h ranks (uneven allowed), the buffer is cut into S = max L_h shards, and shard j is
// owned on host h by its rank of local index j mod L_h (one shard per rank when the hosts are even).
//
// AllReduce, on rank r of host h (local index i):
//   1. reduce-scatter inside the host (shared memory in practice): r sends input shard j to the shard's owner on
//      h, for each shard it does not own; for each shard it owns it receives the shard from every other rank of
//      h in local order and folds it in (out[j] = in[j] op x_a op x_b ...), slice by slice (sliceAfter), as a
//      tree node folds its children. Now out[j] of the owner holds shard j reduced over host h.
//   2. all-reduce of each shard between hosts: the owners of shard j on hosts 0..H-1 run the fused ring
//      all-reduce (compose.hpp, as ring.cpp) on out[j], position = host index. Each rank's network link carries
//      2 (H-1)/H of its own shards; each host's link 2 (H-1)/H of the buffer, against 2 (n-1)/n per rank for the
//      flat ring (L_h times more per host when ranks of one host are not neighbours on the flat ring).
//   3. all-gather inside the host: each owner sends its reduced shards to the other ranks of h, which receive
//      each shard they do not own from its owner.
//   A rank that owns several shards (on a host with fewer ranks than S) runs the rings of its shards one after
//   the other, in shard order; every rank lists shards in that order, so the rings cannot wait on each other in a
//   cycle. The phases run one after the other: the last step of each phase keeps the next one from starting before
//   its receives are complete. Every rank ends with the same bits: each shard is reduced once, by its owners.
//   With one rank per host it is the flat ring over hosts; with one host, a direct reduce-scatter and all-gather.
//
// Broadcast from root t on host ht:
//   1. scatter on ht: t sends input shard j to its owner on ht, which forwards it at once (step 2);
//   2. each shard travels a chain over the hosts ht, ht+1, ..., ht-1 between its owners, pipelined in slices
//      (RecvCopySend);
//   3. all-gather inside each host as above (on ht, t receives nothing: it has the whole input).
//   Each host's link carries the buffer once, against L_h times for the flat chain with interleaved hosts.
//
// Reduce to root t on host ht: Broadcast backwards.
//   1. reduce-scatter inside each host as for AllReduce, into Scratch (a non-root's output stays untouched);
//   2. each shard's partial sums travel a chain over the hosts ht+1, ..., ht-1, ht between its owners, each adding
//      its own (RecvReduceSend through a transient slot), pipelined in slices; the owner on ht folds the last;
//   3. the owners on ht send their shards to t (t's own shards are folded straight into its output).
//
// AllGather and ReduceScatter have no hierarchical schedule (supports() says so): their blocks belong to ranks, not
// to shards, so a host's share would have to be gathered in rank order on every host and permuted for uneven
// hosts; the tuner uses the flat algorithms for them.
#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/compose.hpp"
#include "algorithms/patterns/hosts.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/steps.hpp"
#include "base/errors.hpp"

namespace collie::algorithms {
namespace {

using patterns::ChunkSplit;
using patterns::HostLayout;

// This rank's place in the layout.
struct Place {
  int host = 0;
  int local = 0;
  int nlocal = 1;
  bool owns(int shard) const { return shard % nlocal == local; }
};

Place placeOf(const HostLayout& hl, int rank) {
  Place p;
  p.host = hl.hostOf[static_cast<size_t>(rank)];
  p.local = hl.local[static_cast<size_t>(rank)];
  p.nlocal = static_cast<int>(hl.ranks[static_cast<size_t>(p.host)].size());
  return p;
}

int push(Schedule& sch, Step s, bool overlap) {
  s.overlapNext = overlap;
  sch.steps.push_back(s);
  return static_cast<int>(sch.steps.size()) - 1;
}

// Ends a phase: the next step starts only once the last step's receives are complete.
void endPhase(Schedule& sch) {
  if (!sch.steps.empty()) sch.steps.back().overlapNext = false;
}

// Phase 1 of both: reduce-scatter inside the host. Every rank sends the shards it does not own (from in) to their
// owners; an owner folds its shard from the other ranks of its host into `into(offset)` (out for AllReduce, Scratch
// for Reduce), the first fold reading its own input. A host of one rank copies its input there.
template <typename Into>
void reduceScatterInHost(Schedule& sch, const HostLayout& hl, int rank, const ChunkSplit& shards, size_t count,
                         Into into) {
  const Place me = placeOf(hl, rank);
  if (me.nlocal == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), into(0), count));
    return;
  }
  for (int j = 0; j < shards.parts; ++j)
    if (!me.owns(j)) push(sch, steps::send(hl.owner(me.host, j), steps::in(shards.offset(j)), shards.size(j)), true);
  for (int j = 0; j < shards.parts; ++j) {
    if (!me.owns(j)) continue;
    int prev = -1;
    for (int p : hl.ranks[static_cast<size_t>(me.host)]) {
      if (p == rank) continue;
      Range src = prev < 0 ? steps::in(shards.offset(j)) : into(shards.offset(j));
      Step s = steps::recvReduce(p, -1, src, into(shards.offset(j)), shards.size(j));
      s.sliceAfter = prev;
      prev = push(sch, s, true);
    }
    endPhase(sch);  // the next shard's folds (or phase 2) wait for this shard's last fold
  }
}

// Phase 3 of both: every owner sends its shards (from out) to the other ranks of its host, which receive the
// shards they do not own. `skip` (a rank of this host, or -1) receives nothing.
void allGatherShards(Schedule& sch, const HostLayout& hl, int rank, const ChunkSplit& shards, int skip) {
  const Place me = placeOf(hl, rank);
  const auto& locals = hl.ranks[static_cast<size_t>(me.host)];
  if (locals.size() < 2) return;
  for (int j = 0; j < shards.parts; ++j) {
    if (!me.owns(j)) continue;
    for (int p : locals)
      if (p != rank && p != skip) push(sch, steps::send(p, steps::out(shards.offset(j)), shards.size(j)), true);
  }
  if (rank != skip) {
    for (int j = 0; j < shards.parts; ++j)
      if (!me.owns(j)) push(sch, steps::recv(hl.owner(me.host, j), steps::out(shards.offset(j)), shards.size(j)), true);
  }
  endPhase(sch);
}

// The owners of shard j on every host, in host order.
std::vector<int> ownersOf(const HostLayout& hl, int j) {
  std::vector<int> group;
  for (int h = 0; h < hl.nhosts(); ++h) group.push_back(hl.owner(h, j));
  return group;
}

Schedule allReduce(const ScheduleKey& k, const HostLayout& hl) {
  Schedule sch;
  sch.inputCount = sch.outputCount = sch.resultCount = k.count;
  sch.result = steps::out(0);
  const Place me = placeOf(hl, k.rank);
  const ChunkSplit shards{k.count, hl.maxLocal};
  // 1. reduce-scatter inside the host
  reduceScatterInHost(sch, hl, k.rank, shards, k.count, [](size_t off) { return steps::out(off); });
  // 2. all-reduce of each owned shard between hosts
  if (hl.nhosts() > 1) {
    for (int j = 0; j < shards.parts; ++j) {
      if (!me.owns(j) || shards.size(j) == 0) continue;
      const std::vector<int> group = ownersOf(hl, j);
      const Range shard = steps::out(shards.offset(j));
      appendRingAllReduce(sch, RingGroup{hl.nhosts(), me.host, &group}, shard, shard, shards.size(j));
      endPhase(sch);
    }
  }
  // 3. all-gather inside the host
  allGatherShards(sch, hl, k.rank, shards, -1);
  return sch;
}

Schedule broadcast(const ScheduleKey& k, const HostLayout& hl) {
  Schedule sch;
  const bool root = k.rank == k.root;
  sch.inputCount = root ? k.count : 0;
  sch.outputCount = k.count;
  const Place me = placeOf(hl, k.rank);
  const int rootHost = hl.hostOf[static_cast<size_t>(k.root)];
  const int H = hl.nhosts();
  const int pos = (me.host - rootHost + H) % H;  // 0 on the root's host, H-1 at the end of the chains
  const int nextHost = (me.host + 1) % H, prevHost = (me.host - 1 + H) % H;
  const ChunkSplit shards{k.count, hl.maxLocal};
  if (root) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), k.count));
    for (int j = 0; j < shards.parts; ++j)  // 1. scatter to the shards' owners on this host
      if (!me.owns(j)) push(sch, steps::send(hl.owner(me.host, j), steps::in(shards.offset(j)), shards.size(j)), true);
  }
  // 2. the chain of each owned shard over the hosts
  for (int j = 0; j < shards.parts; ++j) {
    if (!me.owns(j)) continue;
    const Range shard = steps::out(shards.offset(j));
    const size_t cnt = shards.size(j);
    const int next = pos < H - 1 ? hl.owner(nextHost, j) : -1;
    const int from = pos > 0 ? hl.owner(prevHost, j) : root ? -1 : k.root;
    if (from < 0) {
      if (next >= 0) push(sch, steps::send(next, steps::in(shards.offset(j)), cnt), true);
    } else if (next >= 0) {
      push(sch, steps::recvCopySend(from, next, shard, cnt), false);
    } else {
      push(sch, steps::recv(from, shard, cnt), false);
    }
  }
  endPhase(sch);
  // 3. all-gather inside each host (the root has everything already)
  allGatherShards(sch, hl, k.rank, shards, pos == 0 ? k.root : -1);
  return sch;
}

Schedule reduce(const ScheduleKey& k, const HostLayout& hl) {
  Schedule sch;
  const bool root = k.rank == k.root;
  sch.inputCount = k.count;
  sch.outputCount = root ? k.count : 0;
  if (root) {
    sch.result = steps::out(0);
    sch.resultCount = k.count;
  }
  sch.scratchCount = k.count;
  const Place me = placeOf(hl, k.rank);
  const auto& locals = hl.ranks[static_cast<size_t>(me.host)];
  const int rootHost = hl.hostOf[static_cast<size_t>(k.root)];
  const int H = hl.nhosts();
  const int pos = (me.host - rootHost - 1 + 2 * H) % H;  // 0 starts the chains, H-1 is the root's host
  const int nextHost = (me.host + 1) % H, prevHost = (me.host - 1 + H) % H;
  const ChunkSplit shards{k.count, hl.maxLocal};
  auto part = [&](int j) { return steps::scratch(shards.offset(j)); };
  // 1. reduce-scatter inside the host, into Scratch
  reduceScatterInHost(sch, hl, k.rank, shards, k.count, [](size_t off) { return steps::scratch(off); });
  // 2. the chain of each owned shard over the hosts, ending on the root's host
  for (int j = 0; j < shards.parts; ++j) {
    if (!me.owns(j)) continue;
    const size_t cnt = shards.size(j);
    const Range last = root ? steps::out(shards.offset(j)) : part(j);  // where the root's host folds the last
    if (H == 1) {
      if (root) push(sch, steps::copy(part(j), last, cnt), false);
    } else if (pos == 0) {
      push(sch, steps::send(hl.owner(nextHost, j), part(j), cnt), true);
    } else if (pos < H - 1) {
      push(sch, steps::recvReduce(hl.owner(prevHost, j), hl.owner(nextHost, j), part(j), steps::transient(), cnt),
           false);
    } else {
      push(sch, steps::recvReduce(hl.owner(prevHost, j), -1, part(j), last, cnt), false);
    }
  }
  endPhase(sch);
  // 3. the owners on the root's host send their shards to the root
  if (me.host == rootHost && locals.size() > 1) {
    for (int j = 0; j < shards.parts; ++j) {
      if (root && !me.owns(j)) {
        push(sch, steps::recv(hl.owner(me.host, j), steps::out(shards.offset(j)), shards.size(j)), true);
      } else if (!root && me.owns(j)) {
        push(sch, steps::send(k.root, part(j), shards.size(j)), true);
      }
    }
    endPhase(sch);
  }
  return sch;
}

}  // namespace

Schedule buildHierarchical(const ScheduleKey& key, const HostLayout& hosts) {
  COLLIE_USAGE_CHECK(hosts.describes(key.nranks), "hierarchical %s: the host layout describes %zu ranks, not %d",
                     collectiveName(key.coll), hosts.hostOf.size(), key.nranks);
  const HostLayout oneHost = hosts.hostOf.empty() ? HostLayout::blocks(key.nranks, key.nranks) : HostLayout{};
  const HostLayout& hl = hosts.hostOf.empty() ? oneHost : hosts;
  switch (key.coll) {
    case Collective::AllReduce:
      return allReduce(key, hl);
    case Collective::Broadcast:
      return broadcast(key, hl);
    case Collective::Reduce:
      return reduce(key, hl);
    default:
      break;
  }
  refuseUnsupported(Algorithm::Hierarchical, key.coll);
}

}  // namespace collie::algorithms
