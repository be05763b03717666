// Rank arithmetic of the double binary tree and of recursive halving-doubling (src/algorithms/patterns/), for
// every rank count up to 1100 and a sample up to 4096: links agree on both ends, every tree spans all ranks
// from one root within the promised depth, the two trees complement each other, and the participants of
// halving-doubling cover every rank once.
#include <gtest/gtest.h>

#include <vector>

#include "algorithms/patterns/halving_doubling.hpp"
#include "algorithms/patterns/tree.hpp"

namespace collie::algorithms::patterns {
namespace {

std::vector<int> rankCounts() {
  std::vector<int> ns;
  for (int n = 1; n <= 1100; ++n) ns.push_back(n);
  for (int n : {1536, 2047, 2048, 2049, 3000, 4095, 4096}) ns.push_back(n);
  return ns;
}

// Checks that links(r) for r in [0, n) form one tree rooted at `root`, at most maxDepth deep and with at most
// maxChildren children per node. Returns the empty string or the first problem.
template <typename Links>
std::string checkTree(int n, int root, int maxDepth, int maxChildren, Links&& links) {
  std::vector<TreeLinks> t(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) t[static_cast<size_t>(r)] = links(r);
  for (int r = 0; r < n; ++r) {
    const TreeLinks& l = t[static_cast<size_t>(r)];
    if ((l.parent < 0) != (r == root)) return "rank " + std::to_string(r) + ": root mismatch";
    if (l.parent >= n) return "rank " + std::to_string(r) + ": parent out of range";
    if (l.parent >= 0 && !t[static_cast<size_t>(l.parent)].hasChild(r))
      return "rank " + std::to_string(r) + ": its parent " + std::to_string(l.parent) + " does not list it";
    if (l.nchildren > maxChildren) return "rank " + std::to_string(r) + ": too many children";
    for (int i = 0; i < l.nchildren; ++i) {
      int c = l.children[i];
      if (c < 0 || c >= n || t[static_cast<size_t>(c)].parent != r)
        return "rank " + std::to_string(r) + ": child " + std::to_string(c) + " does not name it as parent";
    }
    int depth = 0;
    for (int x = r; x != root; x = t[static_cast<size_t>(x)].parent) {
      if (++depth > maxDepth) return "rank " + std::to_string(r) + ": deeper than " + std::to_string(maxDepth);
    }
  }
  return {};
}

TEST(TreePatterns, BinaryTreeMatchesNcclForTwelveRanks) {
  // The example drawn in tree.hpp (NCCL's ncclGetBtree).
  EXPECT_EQ(binaryTree(0, 12).nchildren, 1);
  EXPECT_EQ(binaryTree(0, 12).children[0], 8);
  EXPECT_EQ(binaryTree(8, 12).children[0], 4);
  EXPECT_EQ(binaryTree(8, 12).children[1], 10);
  EXPECT_EQ(binaryTree(10, 12).parent, 8);
  EXPECT_EQ(binaryTree(10, 12).children[0], 9);
  EXPECT_EQ(binaryTree(10, 12).children[1], 11);
  EXPECT_EQ(binaryTree(11, 12).parent, 10);
  EXPECT_EQ(binaryTree(6, 12).parent, 4);
  // Tree 1 mirrors tree 0 for even n, shifts it by one for odd n.
  EXPECT_EQ(doubleTree(1, 11, 12).nchildren, 1);
  EXPECT_EQ(doubleTree(1, 11, 12).children[0], 3);
  EXPECT_EQ(doubleTree(1, 1, 13).children[0], 9);
}

TEST(TreePatterns, DoubleTreesSpanEveryRankWithinDepth) {
  for (int n : rankCounts()) {
    const int depth = treeDepth(n);
    for (int tree = 0; tree < 2; ++tree) {
      std::string err = checkTree(n, doubleTreeRoot(tree, n), depth, 2, [&](int r) { return doubleTree(tree, r, n); });
      ASSERT_TRUE(err.empty()) << "n=" << n << " tree " << tree << ": " << err;
    }
  }
}

TEST(TreePatterns, AtMostOneRankIsInnerInBothTrees) {
  for (int n : rankCounts()) {
    int both = 0;
    for (int r = 0; r < n; ++r) both += doubleTree(0, r, n).nchildren > 0 && doubleTree(1, r, n).nchildren > 0;
    EXPECT_LE(both, 1) << "n=" << n;
    if (n % 2 == 0) {
      EXPECT_EQ(both, 0) << "n=" << n;
    }
  }
}

TEST(TreePatterns, RootedTreesStartAtEveryRoot) {
  for (int n : rankCounts()) {
    const int depth = treeDepth(n);
    std::vector<int> roots = {0, n - 1, n / 2};
    if (n <= 40) {
      roots.clear();
      for (int r = 0; r < n; ++r) roots.push_back(r);
    }
    for (int root : roots) {
      for (int tree = 0; tree < 2; ++tree) {
        std::string err = checkTree(n, root, depth + 1, 3, [&](int r) { return rootedTree(tree, r, n, root); });
        ASSERT_TRUE(err.empty()) << "n=" << n << " root " << root << " tree " << tree << ": " << err;
      }
      // The root sends at most 1.5 times the buffer: one child in tree 0, up to two in tree 1 (one for even n).
      EXPECT_EQ(rootedTree(0, root, n, root).nchildren, n > 1 ? 1 : 0);
      EXPECT_LE(rootedTree(1, root, n, root).nchildren, n % 2 == 0 ? 1 : 3);
    }
  }
}

TEST(HalvingDoublingPatterns, ParticipantsCoverEveryRankOnce) {
  for (int n : rankCounts()) {
    HalvingDoubling hd(n);
    ASSERT_EQ(hd.pof2 + hd.extra, n);
    ASSERT_LT(hd.extra, hd.pof2);
    ASSERT_EQ(hd.pof2 & (hd.pof2 - 1), 0);
    std::vector<int> covered(static_cast<size_t>(n), 0);
    for (int v = 0; v < hd.pof2; ++v) {
      const int r = hd.rankOf(v);
      ASSERT_EQ(hd.participant(r), v) << "n=" << n;
      ASSERT_FALSE(hd.isExtra(r));
      ASSERT_EQ(hd.firstRank(v), hd.absorbs(r) ? r - 1 : r);
      for (int x = hd.firstRank(v); x < hd.firstRank(v + 1); ++x) ++covered[static_cast<size_t>(x)];
    }
    ASSERT_EQ(hd.firstRank(hd.pof2), n);
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(covered[static_cast<size_t>(r)], 1) << "n=" << n << " rank " << r;
      if (hd.isExtra(r)) {
        ASSERT_TRUE(hd.absorbs(r + 1));
      }
    }
  }
}

}  // namespace
}  // namespace collie::algorithms::patterns
