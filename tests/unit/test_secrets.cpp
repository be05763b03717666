// The secrets of communicators made from others (split, shrink: core::deriveSecret). A hello goes to the desk whose
// secret it shows, so two live communicators on one listener must never have the same one: a child's child included,
// which an XOR of the parent's secret with a salt of (epoch, color) alone gave its grandparent's secret whenever both
// splits had the same epoch and color.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <vector>

#include "core/setup.hpp"

namespace collie::core {
namespace {

using Secret = std::array<uint8_t, 16>;

Secret someSecret() {
  Secret s{};
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<uint8_t>(0x3d * i + 7);
  return s;
}

TEST(Secrets, AGrandchildNeverGetsItsGrandparentsSecret) {
  const Secret root = someSecret();
  for (int epoch = 0; epoch < 4; ++epoch) {
    for (int color = -1; color < 4; ++color) {
      const Secret child = splitSecret(root, epoch, color);
      EXPECT_NE(child, root);
      EXPECT_NE(splitSecret(child, epoch, color), root) << "epoch " << epoch << " color " << color;
    }
  }
  EXPECT_NE(deriveSecret(deriveSecret(root, 77), 77), root);
}

TEST(Secrets, EverySplitOfATreeOfSplitsHasItsOwn) {
  // Three levels of splits, 3 epochs x 3 colors each: 9 + 81 + 729 communicators and the root, all different.
  std::set<Secret> seen{someSecret()};
  std::vector<Secret> level{someSecret()};
  size_t made = 1;
  for (int depth = 0; depth < 3; ++depth) {
    std::vector<Secret> next;
    for (const Secret& parent : level)
      for (int epoch = 0; epoch < 3; ++epoch)
        for (int color = 0; color < 3; ++color) next.push_back(splitSecret(parent, epoch, color));
    for (const Secret& s : next) seen.insert(s);
    made += next.size();
    level = next;
  }
  EXPECT_EQ(seen.size(), made);
}

TEST(Secrets, TheSameInputsGiveTheSameSecretOnEveryRank) {
  EXPECT_EQ(splitSecret(someSecret(), 2, 5), splitSecret(someSecret(), 2, 5));
  EXPECT_NE(splitSecret(someSecret(), 2, 5), splitSecret(someSecret(), 5, 2));
  EXPECT_NE(deriveSecret(someSecret(), 1), deriveSecret(someSecret(), 2));
}

}  // namespace
}  // namespace collie::core
