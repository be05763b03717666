// Ring rank arithmetic and the even split of a buffer into chunks; pure functions, no I/O.
#pragma once

#include <cstddef>

namespace collie::algorithms::patterns {

inline int ringNext(int rank, int nranks) { return (rank + 1) % nranks; }
inline int ringPrev(int rank, int nranks) { return (rank + nranks - 1) % nranks; }
/// (rank + delta) mod nranks for any delta, also negative.
inline int ringAdd(int rank, int delta, int nranks) { return ((rank + delta) % nranks + nranks) % nranks; }

/// Splits `count` elements into `parts` contiguous chunks whose sizes differ by at most one.
struct ChunkSplit {
  size_t count;
  int parts;
  size_t offset(int chunk) const {
    size_t base = count / static_cast<size_t>(parts), extra = count % static_cast<size_t>(parts);
    auto c = static_cast<size_t>(chunk);
    return c * base + (c < extra ? c : extra);
  }
  size_t size(int chunk) const { return offset(chunk + 1) - offset(chunk); }
};

}  // namespace collie::algorithms::patterns
