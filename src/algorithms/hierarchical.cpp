// Hierarchical (host-aware) algorithms: AllReduce, Broadcast, Reduce, AllGather and ReduceScatter that move each byte
// across the network once per host instead of once per rank, and use every rank's link to do it. Rank arithmetic in
// patterns/hosts.hpp: H hosts, host h holds L_h ranks (uneven allowed), the buffer is cut into S = max L_h shards, and
// shard j is owned on host h by its rank of local index j mod L_h (one shard per rank when the hosts are even).
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
// AllGather and ReduceScatter: the blocks belong to ranks, so shard j is the set of blocks of the ranks of local
// index j (HostLayout::blockRank: one per host that has such a rank), and its owner on host h is that rank itself
// (on a host of fewer ranks, the rank owning j mod L_h carries it with no block of its own). Shards are lists of
// pieces: runs of consecutive ranks' blocks merge into one (rank r on host r mod H makes each shard one piece).
//
// AllGather, on rank r of host h:
//   1. all-gather of each owned shard between hosts: the owners of shard j run the ring all-gather (compose.hpp)
//      over the hosts, each putting in its host's block of the shard (r's own input, or nothing), so that each
//      owner ends with the shard's block of every host, in place in its output. Each host's link carries
//      L (H-1) blocks, one ring per rank; the flat ring with interleaved hosts passes L (n-1) through it.
//   2. all-gather inside the host as above: each owner sends its shards' pieces to the other ranks of h.
//
// ReduceScatter, on rank r of host h (AllGather backwards):
//   1. reduce-scatter inside the host as for AllReduce, with shard j's pieces: the owner of shard j folds every
//      block of the shard over the ranks of h into Scratch (at most H blocks per shard it owns), so it holds the host's
//      partial sums of the blocks that leave h through its link. A host of one rank skips it (its input is its
//      host's partial); on one host the owner of shard j is rank j and folds its block straight into its output.
//   2. reduce-scatter of each owned shard between hosts: the owners of shard j run the ring reduce-scatter over
//      the hosts on those partials; the chain of host g's block ends at its owner on g, rank blockRank(g, j),
//      whose output gets it: rank r ends with block r reduced over every rank. Each host's link carries L (H-1)
//      blocks, against L (n-1) for the flat ring with interleaved hosts.
//   No shape is refused: uneven hosts only give some ranks shards without a block of their own to carry.
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

// A piece of a shard: `count` elements from element `offset` (of whichever buffer a phase reads or writes).
struct Piece {
  size_t offset = 0;
  size_t count = 0;
};
// By shard: its pieces, in the order every rank lists them.
using ShardPieces = std::vector<std::vector<Piece>>;

// AllReduce, Broadcast, Reduce: shard j is the j-th of `parts` even chunks of the buffer.
ShardPieces evenShards(size_t count, int parts) {
  const ChunkSplit split{count, parts};
  ShardPieces shards(static_cast<size_t>(parts));
  for (int j = 0; j < parts; ++j) shards[static_cast<size_t>(j)].push_back({split.offset(j), split.size(j)});
  return shards;
}

// AllGather, ReduceScatter: shard j holds the blocks of the ranks of local index j, in host order; the blocks of
// consecutive ranks merge into one piece.
ShardPieces blockShards(const HostLayout& hl, size_t block) {
  ShardPieces shards(static_cast<size_t>(hl.maxLocal));
  for (int j = 0; j < hl.maxLocal; ++j) {
    auto& pieces = shards[static_cast<size_t>(j)];
    for (int h = 0; h < hl.nhosts(); ++h) {
      const int q = hl.blockRank(h, j);
      if (q < 0) continue;
      const size_t at = static_cast<size_t>(q) * block;
      if (!pieces.empty() && pieces.back().offset + pieces.back().count == at) {
        pieces.back().count += block;
      } else {
        pieces.push_back({at, block});
      }
    }
  }
  return shards;
}

// Phase 1 of AllReduce, Reduce and ReduceScatter: reduce-scatter inside the host. Every rank sends the pieces of
// the shards it does not own (from in) to their owners; an owner folds each piece of its shards from the other
// ranks of its host into `into(offset)` (out for AllReduce, Scratch for Reduce), the first fold reading its own
// input. A host of one rank copies its input there (`count` elements: the pieces tile [0, count)).
template <typename Into>
void reduceScatterInHost(Schedule& sch, const HostLayout& hl, int rank, const ShardPieces& shards, size_t count,
                         Into into) {
  const Place me = placeOf(hl, rank);
  if (me.nlocal == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), into(0), count));
    return;
  }
  const int nshards = static_cast<int>(shards.size());
  for (int j = 0; j < nshards; ++j)
    if (!me.owns(j))
      for (const Piece& c : shards[static_cast<size_t>(j)])
        push(sch, steps::send(hl.owner(me.host, j), steps::in(c.offset), c.count), true);
  for (int j = 0; j < nshards; ++j) {
    if (!me.owns(j)) continue;
    for (const Piece& c : shards[static_cast<size_t>(j)]) {
      int prev = -1;
      for (int p : hl.ranks[static_cast<size_t>(me.host)]) {
        if (p == rank) continue;
        Range src = prev < 0 ? steps::in(c.offset) : into(c.offset);
        Step s = steps::recvReduce(p, -1, src, into(c.offset), c.count);
        s.sliceAfter = prev;
        prev = push(sch, s, true);
      }
      endPhase(sch);  // the next piece's folds (or phase 2) wait for this piece's last fold, hence all of them
    }
  }
}

// The last phase of AllReduce, Broadcast and AllGather: every owner sends its shards' pieces (from out) to the
// other ranks of its host, which receive the pieces they do not own. `skip` (a rank of this host, or -1) receives
// nothing.
void allGatherInHost(Schedule& sch, const HostLayout& hl, int rank, const ShardPieces& shards, int skip) {
  const Place me = placeOf(hl, rank);
  const auto& locals = hl.ranks[static_cast<size_t>(me.host)];
  if (locals.size() < 2) return;
  const int nshards = static_cast<int>(shards.size());
  for (int j = 0; j < nshards; ++j) {
    if (!me.owns(j)) continue;
    for (const Piece& c : shards[static_cast<size_t>(j)])
      for (int p : locals)
        if (p != rank && p != skip) push(sch, steps::send(p, steps::out(c.offset), c.count), true);
  }
  if (rank != skip) {
    for (int j = 0; j < nshards; ++j)
      if (!me.owns(j))
        for (const Piece& c : shards[static_cast<size_t>(j)])
          push(sch, steps::recv(hl.owner(me.host, j), steps::out(c.offset), c.count), true);
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
  const ShardPieces even = evenShards(k.count, hl.maxLocal);
  reduceScatterInHost(sch, hl, k.rank, even, k.count, [](size_t off) { return steps::out(off); });
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
  allGatherInHost(sch, hl, k.rank, even, -1);
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
  allGatherInHost(sch, hl, k.rank, evenShards(k.count, hl.maxLocal), pos == 0 ? k.root : -1);
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
  reduceScatterInHost(sch, hl, k.rank, evenShards(k.count, hl.maxLocal), k.count,
                      [](size_t off) { return steps::scratch(off); });
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

Schedule allGather(const ScheduleKey& k, const HostLayout& hl) {
  Schedule sch;
  const size_t block = k.count;
  sch.inputCount = block;
  sch.outputCount = block * static_cast<size_t>(k.nranks);
  const Place me = placeOf(hl, k.rank);
  const int H = hl.nhosts();
  const ShardPieces shards = blockShards(hl, block);
  sch.steps.push_back(steps::copy(steps::in(0), steps::out(static_cast<size_t>(k.rank) * block), block));
  // 1. all-gather of each owned shard between hosts, each host putting in its block of the shard
  if (H > 1) {
    for (int j = 0; j < hl.maxLocal; ++j) {
      if (!me.owns(j)) continue;
      const std::vector<int> group = ownersOf(hl, j);
      std::vector<RingBlock> blocks;
      for (int g = 0; g < H; ++g) {
        const int q = hl.blockRank(g, j);
        blocks.push_back({steps::out(q < 0 ? 0 : static_cast<size_t>(q) * block), q < 0 ? 0 : block});
      }
      appendRingAllGather(sch, RingGroup{H, me.host, &group}, blocks, steps::in(0));
      endPhase(sch);
    }
  }
  // 2. all-gather inside the host
  allGatherInHost(sch, hl, k.rank, shards, -1);
  return sch;
}

Schedule reduceScatter(const ScheduleKey& k, const HostLayout& hl) {
  Schedule sch;
  const size_t block = k.count;
  sch.inputCount = block * static_cast<size_t>(k.nranks);
  sch.outputCount = sch.resultCount = block;
  sch.result = steps::out(0);
  if (k.nranks == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), block));
    return sch;
  }
  const Place me = placeOf(hl, k.rank);
  const int H = hl.nhosts();
  const bool folds = me.nlocal > 1;  // else this rank's input is its host's partial
  // Scratch holds the blocks of this rank's shards only, in shard order: slot[q] is rank q's block's place there.
  const ShardPieces shards = blockShards(hl, block);
  std::vector<size_t> slot(static_cast<size_t>(k.nranks), 0);
  size_t slots = 0;
  for (int j = 0; j < hl.maxLocal; ++j)
    if (me.owns(j))
      for (int g = 0; g < H; ++g)
        if (const int q = hl.blockRank(g, j); q >= 0) slot[static_cast<size_t>(q)] = slots++;
  auto partial = [&](int q) { return steps::scratch(slot[static_cast<size_t>(q)] * block); };
  // 1. reduce-scatter inside the host: into Scratch, or on one host (where shard j is block j, owned by rank j)
  // straight into the output. Pieces start at a block (offset q x block) and their blocks have consecutive slots.
  if (folds) {
    if (H > 1) sch.scratchCount = slots * block;
    reduceScatterInHost(sch, hl, k.rank, shards, sch.inputCount, [&](size_t off) {
      return H == 1 || block == 0 ? steps::out(0) : partial(static_cast<int>(off / block));
    });
  }
  // 2. reduce-scatter of each owned shard between hosts: block blockRank(g, j) ends on its own rank
  if (H > 1) {
    for (int j = 0; j < hl.maxLocal; ++j) {
      if (!me.owns(j)) continue;
      const std::vector<int> group = ownersOf(hl, j);
      std::vector<RingBlock> partials;
      for (int g = 0; g < H; ++g) {
        const int q = hl.blockRank(g, j);
        if (q < 0) {
          partials.push_back({steps::in(0), 0});
        } else {
          partials.push_back({folds ? partial(q) : steps::in(static_cast<size_t>(q) * block), block});
        }
      }
      appendRingReduceScatter(sch, RingGroup{H, me.host, &group}, partials, steps::out(0));
      endPhase(sch);
    }
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
    case Collective::AllGather:
      return allGather(key, hl);
    case Collective::ReduceScatter:
      return reduceScatter(key, hl);
    default:
      break;
  }
  refuseUnsupported(Algorithm::Hierarchical, key.coll);
}

}  // namespace collie::algorithms
