// Recursive halving-doubling rank arithmetic, with folding of non-power-of-two rank counts; pure functions.
//
// n ranks = p + e with p the largest power of two <= n and e < p extra ranks. The first 2e ranks pair up:
// the even rank of each pair (2i) is "extra": it folds its data into the odd rank (2i+1) before the exchange
// rounds and gets the result back after them; the odd one takes part for both. So p ranks take part, with
// participant indices v = 0..p-1: v = i for the odd rank 2i+1 of a pair (i < e), v = r - e for r >= 2e.
//
// Participant v exchanges with v ^ d in the round of distance d. Recursive halving (reduce-scatter) goes
// d = p/2, p/4, ..., 1: the participants of [lo, hi) split it in halves, the one whose bit d is clear keeps
// the lower half, so after the last round v holds piece v. Recursive doubling (all-gather) goes d = 1, 2, ...,
// p/2 and unites the halves again.
//
// A small AllReduce (allReduceByRecursiveDoubling) skips the halving: in each round d = 1, 2, ..., p/2 participant v
// sends its whole partial sum to v ^ d and adds the partner's, so log2 p rounds of one message each instead of
// 2 log2 p (MPICH's rule for messages of up to 2 KiB).
#pragma once

#include <cstddef>

namespace collie::algorithms::patterns {

/// Largest AllReduce (bytes) that halving-doubling runs as recursive doubling (rhd.cpp; the tuner prices it so).
inline constexpr size_t kRecursiveDoublingMaxBytes = 2048;
inline bool allReduceByRecursiveDoubling(size_t bytes) { return bytes <= kRecursiveDoublingMaxBytes; }

inline int largestPowerOfTwoAtMost(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

struct HalvingDoubling {
  int nranks = 1;
  int pof2 = 1;   ///< participants
  int extra = 0;  ///< extra ranks (each folds into its odd neighbour)

  explicit HalvingDoubling(int n) : nranks(n), pof2(largestPowerOfTwoAtMost(n)), extra(n - pof2) {}

  /// True for an even rank below 2*extra: it folds into rank + 1 and takes no part in the rounds.
  bool isExtra(int rank) const { return rank < 2 * extra && rank % 2 == 0; }
  /// True for an odd rank below 2*extra: it takes part for itself and for rank - 1.
  bool absorbs(int rank) const { return rank < 2 * extra && rank % 2 == 1; }
  /// The participant index of a rank; -1 for an extra rank.
  int participant(int rank) const {
    if (isExtra(rank)) return -1;
    return rank < 2 * extra ? rank / 2 : rank - extra;
  }
  /// The rank of participant v.
  int rankOf(int v) const { return v < extra ? 2 * v + 1 : v + extra; }
  /// The first of the user ranks that participant v stands for (v = pof2 gives nranks): its own rank, or
  /// rank - 1 when it absorbs an extra rank. Participant v stands for ranks [firstRank(v), firstRank(v+1)).
  int firstRank(int v) const { return v < extra ? 2 * v : v + extra; }
};

}  // namespace collie::algorithms::patterns
