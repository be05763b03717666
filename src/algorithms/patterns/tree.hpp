// Binary-tree rank arithmetic for the double binary tree (NCCL's layout); pure functions, no I/O.
//
// binaryTree: the tree over ranks 0..n-1 that NCCL builds. A rank's lowest set bit b decides its level: its
// parent is (rank ^ b) | (b << 1) (or rank ^ b when that is out of range), its children rank - b/2 and
// rank + b/2 (the second one shrunk, b/4, b/8, ..., until it is in range). Rank 0 is the root with one child,
// the largest power of two below n. Odd ranks are leaves, so about half of the ranks are leaves.
//
//   n = 12:   0 -- 8           root 0 has one child, 8
//                 /  |
//                4   10        4: children 2, 6; 10: children 9, 11
//               / |  | |
//              2  6  9 11      2: children 1, 3; 6: children 5, 7
//
// doubleTree: tree 0 is binaryTree; tree 1 is its mirror (rank -> n-1-rank) for even n and its shift by one
// (rank -> rank+1 mod n) for odd n. The leaves of tree 0 (odd ranks) are then inner nodes of tree 1 and
// the other way round, so each rank forwards data in at most one of the trees: with half of the data on
// each tree, every rank sends and receives about the whole buffer once in each direction.
//
// rootedTree: for Broadcast and Reduce both trees must start (end) at the root. Over virtual ranks
// (rank - root) mod n, tree 0 already has its root at 0; tree 1 is cut above virtual 0 and its old root hung
// below virtual 0, which then has up to three children (only one for even n, where it is a leaf of tree 1).
// Depth grows by at most one level.
#pragma once

namespace collie::algorithms::patterns {

struct TreeLinks {
  int parent = -1;  ///< -1 at the root
  int nchildren = 0;
  int children[3] = {-1, -1, -1};

  void addChild(int c) { children[nchildren++] = c; }
  bool hasChild(int c) const {
    for (int i = 0; i < nchildren; ++i)
      if (children[i] == c) return true;
    return false;
  }
};

/// NCCL's binary tree over ranks 0..n-1, rooted at 0.
inline TreeLinks binaryTree(int rank, int n) {
  TreeLinks t;
  if (n <= 1) return t;
  int bit = 1;
  while (bit < n && !(bit & rank)) bit <<= 1;
  if (rank == 0) {
    t.addChild(bit >> 1);  // bit is the smallest power of two >= n here
    return t;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= n) up = rank ^ bit;
  t.parent = up;
  int low = bit >> 1;
  if (low == 0) return t;  // odd ranks are leaves
  t.addChild(rank - low);
  int down1 = rank + low;
  while (down1 >= n) {
    low >>= 1;
    down1 = low == 0 ? -1 : rank + low;
  }
  if (down1 >= 0) t.addChild(down1);
  return t;
}

/// Tree `tree` (0 or 1) of the double binary tree over ranks 0..n-1.
inline TreeLinks doubleTree(int tree, int rank, int n) {
  if (tree == 0 || n <= 1) return binaryTree(rank, n);
  // Map to the rank of binaryTree, build, map back.
  const bool mirror = n % 2 == 0;
  auto toBase = [&](int r) { return mirror ? n - 1 - r : (r - 1 + n) % n; };
  auto fromBase = [&](int r) { return r < 0 ? -1 : mirror ? n - 1 - r : (r + 1) % n; };
  TreeLinks base = binaryTree(toBase(rank), n);
  TreeLinks t;
  t.parent = fromBase(base.parent);
  for (int i = 0; i < base.nchildren; ++i) t.addChild(fromBase(base.children[i]));
  return t;
}

/// The root of tree `tree` of doubleTree(., ., n): 0 for tree 0; n-1 (mirror) or 1 (shift) for tree 1.
inline int doubleTreeRoot(int tree, int n) {
  if (tree == 0 || n <= 1) return 0;
  return n % 2 == 0 ? n - 1 : 1;
}

/// Tree `tree` of the double binary tree over virtual ranks (rank - root) mod n, made to start at `root`.
/// Tree 0 already does. Tree 1 is cut above the root (its parent there drops it) and its old root is hung
/// below the root, so the root feeds its own subtree and the old root feeds the rest.
inline TreeLinks rootedTree(int tree, int rank, int n, int root) {
  auto toReal = [&](int v) { return v < 0 ? -1 : (v + root) % n; };
  const int v = (rank - root + n) % n;
  TreeLinks links = doubleTree(tree, v, n);
  if (tree != 0 && n > 1) {
    const int oldRoot = doubleTreeRoot(1, n);
    const int cut = doubleTree(1, 0, n).parent;  // the parent of the root in tree 1
    TreeLinks out;
    out.parent = v == 0 ? -1 : v == oldRoot ? 0 : links.parent;
    for (int i = 0; i < links.nchildren; ++i)
      if (!(v == cut && links.children[i] == 0)) out.addChild(links.children[i]);
    if (v == 0) out.addChild(oldRoot);
    links = out;
  }
  links.parent = toReal(links.parent);
  for (int i = 0; i < links.nchildren; ++i) links.children[i] = toReal(links.children[i]);
  return links;
}

/// ceil(log2(n)): the depth of binaryTree and of both trees of doubleTree (rank 1 is always that deep);
/// rootedTree's tree 1 can be one level deeper.
inline int treeDepth(int n) {
  int depth = 0;
  while ((1 << depth) < n) ++depth;
  return depth;
}

}  // namespace collie::algorithms::patterns
