// Building blocks that several schedule builders share: the ring all-reduce, all-gather and reduce-scatter over any
// group of ranks, on any ranges of a buffer (ring.cpp; the flat ring is the group of all ranks, hierarchical.cpp runs
// one per shard between hosts).
#pragma once

#include <vector>

#include "algorithms/schedule.hpp"

namespace collie::algorithms {

/// A ring over `size` ranks, this rank at position `pos`; position p is rank members[p] (or p without members).
struct RingGroup {
  int size = 1;
  int pos = 0;
  const std::vector<int>* members = nullptr;
  int rankAt(int p) const { return members ? (*members)[static_cast<size_t>(p)] : p; }
};

/// Appends the ring all-reduce of `count` elements (reduce-scatter then all-gather, fused as ring.cpp explains)
/// over `g`: this rank's elements are read from `src` (its first step sends from there) and the result lands
/// in `dst`; src == dst is allowed. g.size must be at least 2.
void appendRingAllReduce(Schedule& sch, const RingGroup& g, Range src, Range dst, size_t count);

/// One block of a ring all-gather or reduce-scatter: `count` elements at `at` (count 0: the position has none).
struct RingBlock {
  Range at;
  size_t count = 0;
};

/// Appends the ring all-gather over `g` (g.size >= 2): position p's block lands at blocks[p] on every member; this
/// rank's own block is sent from `own` (the caller puts it at blocks[g.pos] itself). At step s (1..size-2) a rank
/// receives the block of position pos-s and forwards it; the last step receives the block of pos+1.
void appendRingAllGather(Schedule& sch, const RingGroup& g, const std::vector<RingBlock>& blocks, Range own);

/// Appends the ring reduce-scatter over `g` (g.size >= 2): partials[p] is this rank's contribution to position
/// p's block; the block of this rank's position, reduced over the group, lands in `dst`. The chain of block c
/// starts at position c+1 and ends at c; partial sums ride in transient slots, so partials are only read.
void appendRingReduceScatter(Schedule& sch, const RingGroup& g, const std::vector<RingBlock>& partials, Range dst);

}  // namespace collie::algorithms
