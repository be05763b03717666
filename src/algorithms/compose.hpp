// Building blocks that several schedule builders share: the fused ring all-reduce over any group of ranks, on
// any range of a buffer (ring.cpp; the flat ring is the group of all ranks, hierarchical.cpp runs one per shard
// between hosts).
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

}  // namespace collie::algorithms
