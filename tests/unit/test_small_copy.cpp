// base::moveBytes (src/base/small_copy.hpp) against memmove: every size up to past its fixed-size cases, every
// offset of the source and the destination within a buffer, overlapping forwards and backwards, byte for byte.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/small_copy.hpp"

namespace collie::test {
namespace {

std::vector<unsigned char> pattern(size_t n) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 7 + 1);
  return v;
}

TEST(SmallCopy, MovesLikeMemmoveWhetherOrNotTheRangesOverlap) {
  constexpr size_t kBuffer = 96;
  for (size_t n = 0; n <= 40; ++n) {
    for (size_t from = 0; from + n <= kBuffer; from += 3) {
      for (size_t to = 0; to + n <= kBuffer; to += 5) {
        std::vector<unsigned char> expected = pattern(kBuffer), got = pattern(kBuffer);
        std::memmove(expected.data() + to, expected.data() + from, n);
        base::moveBytes(got.data() + to, got.data() + from, n);
        ASSERT_EQ(got, expected) << n << " bytes from offset " << from << " to offset " << to;
      }
    }
  }
}

}  // namespace
}  // namespace collie::test
