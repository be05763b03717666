// Double binary tree algorithms (NCCL's "tree"): AllReduce, Broadcast and Reduce.
//
// Two binary trees span the ranks (patterns/tree.hpp): tree 0 is NCCL's binary tree, tree 1 its mirror
// (even n) or its shift by one rank (odd n), so a rank that is a leaf in one tree is an inner node in the
// other. The buffer is cut in two halves; half h travels on tree h only. Every step is cut into slices by the
// executor and all steps start at once (overlapNext), so the slices stream through the trees: a node reduces
// slice j from its children and sends it up while slice j+1 is still arriving, and the down phase starts as
// soon as the first slice reaches the root.
//
// AllReduce, for each tree (its half [off, off+cnt)) on rank r with children c0, c1 and parent p:
//   up:   leaf:  Send(in -> p)
//         inner: RecvReduce(c0: out = in + c0) ; RecvReduce[Send](c1: out = out + c1 [-> p], after the c0 step)
//         (the slice-j dependency, sliceAfter, makes c1's slice j wait for c0's slice j, in one pipeline)
//   down: root:  Send(out -> c0), Send(out -> c1), each slice after the up phase has reduced it
//         inner: RecvCopySend(p -> out -> c0) ; Send(out -> c1) after that step's slice j
//         leaf:  Recv(p -> out)
//   A down-phase receive lands in memory the up phase sent from; it can only arrive after the parent got that
//   slice (it is the parent's reply), so it never overwrites data still on its way (schedule.hpp).
// Each rank sends cnt up and cnt per child down in the tree where it is an inner node and cnt up in the other,
// about 2 x (count/2) + count/2 in all for a single-child node, and the latency is 2 x ceil(log2 n) hops.
//
// Broadcast and Reduce use both trees too, made to start (end) at the root (patterns::rootedTree): the root
// sends (receives) half of the data down (up) each tree; Broadcast is the down phase from the root's input
// (the root copies its input to its output), Reduce the up phase into the root's output. An inner non-root node
// of Reduce with two children keeps its partial sum in Scratch (its output must stay untouched) and forwards
// the final one from a transient slot.
//
// Step order: the up steps of both trees, then the down steps of both trees. Transfers to one peer are posted
// in schedule order on both ends, so a link used by both trees carries tree 0's slices before tree 1's in the
// same phase; up before down keeps a link that is "up" in one tree and "down" in the other from waiting for a
// whole phase of the other tree.
#include "algorithms/patterns/tree.hpp"

#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/steps.hpp"

namespace collie::algorithms {
namespace {

using patterns::TreeLinks;

struct Half {
  size_t off = 0;
  size_t cnt = 0;
};

Half half(size_t count, int tree) {
  patterns::ChunkSplit split{count, 2};
  return {split.offset(tree), split.size(tree)};
}

int push(Schedule& sch, Step s) {
  s.overlapNext = true;  // every step starts at once; sliceAfter orders the slices
  sch.steps.push_back(s);
  return static_cast<int>(sch.steps.size()) - 1;
}

// The up phase of one tree: reduces this rank's input with its children's partial results into `acc` (Output at
// the root and in AllReduce, Scratch for inner nodes of Reduce) and sends the result to the parent. A node that
// only forwards (Reduce, not the root) sends its final partial from a transient slot. Returns the index of the
// step whose slice j holds the reduced slice j (or -1 when there is none, at a leaf).
int upPhase(Schedule& sch, const TreeLinks& t, Half h, Buffer acc, bool forwardFromSlot) {
  if (t.nchildren == 0) {
    if (t.parent >= 0) push(sch, steps::send(t.parent, steps::in(h.off), h.cnt));
    return -1;
  }
  int prev = -1;
  for (int i = 0; i < t.nchildren; ++i) {
    const bool last = i == t.nchildren - 1;
    const int sendTo = last ? t.parent : -1;
    Range src = i == 0 ? steps::in(h.off) : steps::at(acc, h.off);
    Range dst = (last && sendTo >= 0 && forwardFromSlot) ? steps::transient() : steps::at(acc, h.off);
    Step s = steps::recvReduce(t.children[i], sendTo, src, dst, h.cnt);
    s.sliceAfter = prev;
    prev = push(sch, s);
  }
  return prev;
}

// The down phase of one tree: the data of `src` at the root (its input for Broadcast, the reduced output for
// AllReduce, whose slice j is ready after step `ready`) flows to every rank's output.
void downPhase(Schedule& sch, const TreeLinks& t, Half h, Range rootSrc, int ready) {
  int from = ready;
  Range data = steps::out(h.off);
  if (t.parent >= 0) {
    if (t.nchildren == 0) {
      push(sch, steps::recv(t.parent, data, h.cnt));
      return;
    }
    from = push(sch, steps::recvCopySend(t.parent, t.children[0], data, h.cnt));
    for (int i = 1; i < t.nchildren; ++i) {
      Step s = steps::send(t.children[i], data, h.cnt);
      s.sliceAfter = from;
      push(sch, s);
    }
    return;
  }
  for (int i = 0; i < t.nchildren; ++i) {
    Step s = steps::send(t.children[i], rootSrc, h.cnt);
    s.sliceAfter = from;
    push(sch, s);
  }
}

Schedule allReduce(const ScheduleKey& k) {
  Schedule sch;
  sch.inputCount = sch.outputCount = k.count;
  sch.result = steps::out(0);
  sch.resultCount = k.count;
  if (k.nranks == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), k.count));
    return sch;
  }
  TreeLinks links[2] = {patterns::doubleTree(0, k.rank, k.nranks), patterns::doubleTree(1, k.rank, k.nranks)};
  int reduced[2];
  for (int t = 0; t < 2; ++t) reduced[t] = upPhase(sch, links[t], half(k.count, t), Buffer::Output, false);
  for (int t = 0; t < 2; ++t) {
    Half h = half(k.count, t);
    downPhase(sch, links[t], h, steps::out(h.off), reduced[t]);
  }
  return sch;
}

Schedule broadcast(const ScheduleKey& k) {
  Schedule sch;
  const bool root = k.rank == k.root;
  sch.inputCount = root ? k.count : 0;
  sch.outputCount = k.count;
  if (root) sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), k.count));
  for (int t = 0; t < 2 && k.nranks > 1; ++t) {
    Half h = half(k.count, t);
    downPhase(sch, patterns::rootedTree(t, k.rank, k.nranks, k.root), h, steps::in(h.off), -1);
  }
  return sch;
}

Schedule reduce(const ScheduleKey& k) {
  Schedule sch;
  const bool root = k.rank == k.root;
  sch.inputCount = k.count;
  sch.outputCount = root ? k.count : 0;
  if (root) {
    sch.result = steps::out(0);
    sch.resultCount = k.count;
  }
  if (k.nranks == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), k.count));
    return sch;
  }
  for (int t = 0; t < 2; ++t) {
    TreeLinks links = patterns::rootedTree(t, k.rank, k.nranks, k.root);
    if (!root && links.nchildren >= 2) sch.scratchCount = k.count;
    upPhase(sch, links, half(k.count, t), root ? Buffer::Output : Buffer::Scratch, !root);
  }
  return sch;
}

}  // namespace

Schedule buildTree(const ScheduleKey& key) {
  switch (key.coll) {
    case Collective::AllReduce:
      return allReduce(key);
    case Collective::Broadcast:
      return broadcast(key);
    case Collective::Reduce:
      return reduce(key);
    default:
      break;
  }
  refuseUnsupported(Algorithm::Tree, key.coll);
}

}  // namespace collie::algorithms
