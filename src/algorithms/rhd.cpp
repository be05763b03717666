// Recursive halving-doubling (Rabenseifner): AllReduce, ReduceScatter (recursive halving) and AllGather
// (recursive doubling), for any number of ranks. Rank arithmetic in patterns/halving_doubling.hpp.
//
// AllReduce, p = 2^k participants, the buffer cut into p pieces (ChunkSplit):
//   reduce-scatter, rounds d = p/2, p/4, ..., 1: participant v and its partner v ^ d share a range of pieces
//   [lo, hi); v sends the half it gives away and reduces the half it keeps with what the partner sends:
//     Send(give -> partner) ; RecvReduce(partner: out[keep] = cur[keep] + received)
//   after k rounds v holds piece v fully reduced. cur is the input in the first round, the output after it.
//   all-gather, rounds d = 1, 2, ..., p/2: v sends everything it holds and receives the partner's equal share:
//     Send(out[mine] -> partner) ; Recv(partner -> out[theirs])
//   2k rounds, each rank sends 2(p-1)/p of the buffer. A round's Send and the next round's writes never touch
//   the same range, except that an all-gather receive lands where a reduce-scatter send came from, which is the
//   partner's reply to that send (schedule.hpp).
// Small AllReduce (patterns::allReduceByRecursiveDoubling: up to 2 KiB), recursive doubling instead:
//   v copies its input to Scratch block 0 (an in-place call may then overwrite Output while it is sent), then in
//   rounds i = 0, 1, ..., k-1 (d = 2^i) sends block i whole to its partner v ^ d and reduces the partner's into
//   block i+1, the last round into Output. k rounds of one message each way, against 2k (with the halves of one
//   or two elements that a few bytes leave, some of them empty) for the form above: 4 ranks over loopback TCP,
//   8 B-2 KiB, 22-30 us against 26-58 (perf/RESULTS.md). v and its partner reduce the same two operands in the same
//   order (the lower participant's first: Step::receivedFirst on the higher one, since x op y and y op x may differ
//   in a NaN's bits), so every rank ends with the same bits. No block is written while it may still be sent: block i+1
//   and Output are written only after block i was posted, and never sent from again before that.
// Non-powers of two (n = p + e): each extra rank (even, below 2e) first sends its whole input to its odd
// neighbour, which reduces it into its own (RecvReduce into the output) and then takes part; at the end the
// neighbour sends the whole result back. Two more steps on the critical path and one more buffer per pair.
//
// ReduceScatter (input: n blocks of `count`, rank r ends with block r): recursive halving over the blocks,
// participant v owning blocks [firstRank(v), firstRank(v+1)) -- one block, or two for a rank that absorbs an
// extra one. Partial sums live in Scratch (the input must stay untouched, the output holds one block): the
// first round's half, or all n blocks on a rank that first absorbs an extra rank's input. The last round
// reduces straight into the output; an absorbing rank reduces two blocks into Scratch, copies its own and
// sends the extra rank its block.
//
// AllGather (output: n blocks): each rank copies its block into place; an extra rank sends its block to its
// neighbour; recursive doubling over the participants' block ranges; the neighbour sends everything back.
#include <algorithm>

#include "algorithms/algorithms.hpp"
#include "algorithms/patterns/halving_doubling.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/steps.hpp"

namespace collie::algorithms {
namespace {

using patterns::HalvingDoubling;

Step overlapped(Step s) {
  s.overlapNext = true;
  return s;
}

// The small form (see the top): an absorbing rank's block 0 is its input folded with the extra rank's.
Schedule recursiveDoublingAllReduce(const ScheduleKey& k, const HalvingDoubling& hd, Schedule sch) {
  const int r = k.rank;
  int rounds = 0;
  while ((1 << rounds) < hd.pof2) ++rounds;
  sch.scratchCount = static_cast<size_t>(rounds) * k.count;
  auto block = [&](int i) { return steps::scratch(static_cast<size_t>(i) * k.count); };
  if (hd.absorbs(r))
    sch.steps.push_back(steps::recvReduce(r - 1, -1, steps::in(0), block(0), k.count));
  else
    sch.steps.push_back(steps::copy(steps::in(0), block(0), k.count));
  const int v = hd.participant(r);
  for (int i = 0; i < rounds; ++i) {
    const int partner = hd.rankOf(v ^ (1 << i));
    sch.steps.push_back(overlapped(steps::send(partner, block(i), k.count)));
    Step fold = steps::recvReduce(partner, -1, block(i), i + 1 == rounds ? steps::out(0) : block(i + 1), k.count);
    fold.receivedFirst = (v & (1 << i)) != 0;  // both compute lower's op higher's: the same bits (see the top)
    sch.steps.push_back(fold);
  }
  if (hd.absorbs(r)) sch.steps.push_back(steps::send(r - 1, steps::out(0), k.count));
  return sch;
}

Schedule allReduce(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank;
  sch.inputCount = sch.outputCount = k.count;
  sch.result = steps::out(0);
  sch.resultCount = k.count;
  if (n == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), k.count));
    return sch;
  }
  HalvingDoubling hd(n);
  if (hd.isExtra(r)) {
    sch.steps.push_back(steps::send(r + 1, steps::in(0), k.count));
    sch.steps.push_back(steps::recv(r + 1, steps::out(0), k.count));
    return sch;
  }
  if (patterns::allReduceByRecursiveDoubling(k.count * k.elemBytes)) return recursiveDoublingAllReduce(k, hd, sch);
  Buffer cur = Buffer::Input;
  if (hd.absorbs(r)) {
    sch.steps.push_back(steps::recvReduce(r - 1, -1, steps::in(0), steps::out(0), k.count));
    cur = Buffer::Output;
  }
  patterns::ChunkSplit split{k.count, hd.pof2};
  auto off = [&](int v) { return split.offset(v); };
  const int v = hd.participant(r);
  int lo = 0, hi = hd.pof2;
  for (int d = hd.pof2 / 2; d >= 1; d /= 2) {
    const int partner = hd.rankOf(v ^ d), mid = lo + d;
    const bool lower = (v & d) == 0;
    const int keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
    const int giveLo = lower ? mid : lo, giveHi = lower ? hi : mid;
    sch.steps.push_back(overlapped(steps::send(partner, steps::at(cur, off(giveLo)), off(giveHi) - off(giveLo))));
    sch.steps.push_back(steps::recvReduce(partner, -1, steps::at(cur, off(keepLo)), steps::out(off(keepLo)),
                                          off(keepHi) - off(keepLo)));
    cur = Buffer::Output;
    lo = keepLo;
    hi = keepHi;
  }
  for (int d = 1; d < hd.pof2; d *= 2) {
    const int partner = hd.rankOf(v ^ d);
    const int theirLo = (v ^ d) & ~(d - 1), theirHi = theirLo + d;
    sch.steps.push_back(overlapped(steps::send(partner, steps::out(off(lo)), off(hi) - off(lo))));
    sch.steps.push_back(steps::recv(partner, steps::out(off(theirLo)), off(theirHi) - off(theirLo)));
    lo = std::min(lo, theirLo);
    hi = std::max(hi, theirHi);
  }
  if (hd.absorbs(r)) sch.steps.push_back(steps::send(r - 1, steps::out(0), k.count));
  return sch;
}

Schedule reduceScatter(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank;
  const size_t block = k.count;
  sch.inputCount = block * static_cast<size_t>(n);
  sch.outputCount = block;
  sch.result = steps::out(0);
  sch.resultCount = block;
  if (n == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), block));
    return sch;
  }
  HalvingDoubling hd(n);
  if (hd.isExtra(r)) {
    sch.steps.push_back(steps::send(r + 1, steps::in(0), sch.inputCount));
    sch.steps.push_back(steps::recv(r + 1, steps::out(0), block));
    return sch;
  }
  auto off = [&](int v) { return static_cast<size_t>(hd.firstRank(v)) * block; };
  const int v = hd.participant(r);
  // Partial sums go to Scratch at element offset (input offset - base).
  Buffer cur = Buffer::Input;
  size_t base = 0;
  if (hd.absorbs(r)) {
    sch.scratchCount = sch.inputCount;
    sch.steps.push_back(steps::recvReduce(r - 1, -1, steps::in(0), steps::scratch(0), sch.inputCount));
    cur = Buffer::Scratch;
  }
  int lo = 0, hi = hd.pof2;
  for (int d = hd.pof2 / 2; d >= 1; d /= 2) {
    const int partner = hd.rankOf(v ^ d), mid = lo + d;
    const bool lower = (v & d) == 0;
    const int keepLo = lower ? lo : mid, keepHi = lower ? mid : hi;
    const int giveLo = lower ? mid : lo, giveHi = lower ? hi : mid;
    const size_t curBase = cur == Buffer::Scratch ? base : 0;
    if (d == hd.pof2 / 2 && cur == Buffer::Input && d > 1) {  // the first round's kept half goes to Scratch
      base = off(keepLo);
      sch.scratchCount = off(keepHi) - off(keepLo);
    }
    Range dst = steps::scratch(off(keepLo) - base);
    if (d == 1 && !hd.absorbs(r)) dst = steps::out(0);  // the last round leaves exactly block r
    sch.steps.push_back(
        overlapped(steps::send(partner, steps::at(cur, off(giveLo) - curBase), off(giveHi) - off(giveLo))));
    sch.steps.push_back(
        steps::recvReduce(partner, -1, steps::at(cur, off(keepLo) - curBase), dst, off(keepHi) - off(keepLo)));
    cur = Buffer::Scratch;
    lo = keepLo;
    hi = keepHi;
  }
  if (hd.absorbs(r)) {  // Scratch holds blocks r-1 and r at base + (r-1)*block
    const size_t mine = static_cast<size_t>(r) * block - base, theirs = static_cast<size_t>(r - 1) * block - base;
    sch.steps.push_back(overlapped(steps::send(r - 1, steps::scratch(theirs), block)));
    sch.steps.push_back(steps::copy(steps::scratch(mine), steps::out(0), block));
  }
  return sch;
}

Schedule allGather(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank;
  const size_t block = k.count;
  sch.inputCount = block;
  sch.outputCount = block * static_cast<size_t>(n);
  if (n == 1) {
    sch.steps.push_back(steps::copy(steps::in(0), steps::out(0), block));
    return sch;
  }
  HalvingDoubling hd(n);
  if (hd.isExtra(r)) {
    sch.steps.push_back(steps::send(r + 1, steps::in(0), block));
    sch.steps.push_back(steps::recv(r + 1, steps::out(0), sch.outputCount));
    return sch;
  }
  auto off = [&](int v) { return static_cast<size_t>(hd.firstRank(v)) * block; };
  const int v = hd.participant(r);
  sch.steps.push_back(steps::copy(steps::in(0), steps::out(static_cast<size_t>(r) * block), block));
  if (hd.absorbs(r)) sch.steps.push_back(steps::recv(r - 1, steps::out(static_cast<size_t>(r - 1) * block), block));
  int lo = v, hi = v + 1;
  for (int d = 1; d < hd.pof2; d *= 2) {
    const int partner = hd.rankOf(v ^ d);
    const int theirLo = (v ^ d) & ~(d - 1), theirHi = theirLo + d;
    sch.steps.push_back(overlapped(steps::send(partner, steps::out(off(lo)), off(hi) - off(lo))));
    sch.steps.push_back(steps::recv(partner, steps::out(off(theirLo)), off(theirHi) - off(theirLo)));
    lo = std::min(lo, theirLo);
    hi = std::max(hi, theirHi);
  }
  if (hd.absorbs(r)) sch.steps.push_back(steps::send(r - 1, steps::out(0), sch.outputCount));
  return sch;
}

}  // namespace

Schedule buildHalvingDoubling(const ScheduleKey& key) {
  switch (key.coll) {
    case Collective::AllReduce:
      return allReduce(key);
    case Collective::ReduceScatter:
      return reduceScatter(key);
    case Collective::AllGather:
      return allGather(key);
    default:
      break;
  }
  refuseUnsupported(Algorithm::HalvingDoubling, key.coll);
}

}  // namespace collie::algorithms
