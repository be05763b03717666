// Ring algorithms for AllReduce, ReduceScatter, AllGather, Broadcast and Reduce.
//
// AllReduce (n ranks, buffer cut into n chunks; rank r sends to r+1 and receives from r-1):
//   reduce-scatter: at step s (0..n-2) rank r sends chunk r-s and receives chunk r-s-1, which it adds to its
//   own input; after n-1 steps rank r holds the fully reduced chunk r+1.
//   all-gather: at step s (0..n-2) rank r sends chunk r+1-s (first its own reduced chunk, then what it just
//   received) and receives chunk r-s; after n-1 steps every rank holds every reduced chunk.
//   Fused into steps, rank r runs:
//     Send(input[r]) | RecvReduceSend(chunk r-s) for s = 1..n-1 | RecvCopySend(chunk r+1-s) for s = 1..n-2
//     | Recv(chunk r+2)
//   so each received slice is reduced and forwarded at once; the executor pipelines slices so the ring
//   streams. Each rank sends 2(n-1)/n of the buffer in 2(n-1) steps.
//
// ReduceScatter is the first half shifted by one chunk so that rank r ends with chunk r (partial sums ride in
// transient slots, the input is never written); AllGather is the second half starting from each rank's own
// block. Broadcast is a chain from the root (root -> root+1 -> ... -> root-1), Reduce a chain that ends at
// the root (root+1 -> ... -> root), both pipelined in slices.
#include "algorithms/patterns/ring.hpp"

#include <vector>

#include "algorithms/algorithms.hpp"
#include "algorithms/compose.hpp"
#include "algorithms/steps.hpp"

namespace collie::algorithms {
namespace {

using patterns::ChunkSplit;
using patterns::ringAdd;

using steps::in;
using steps::out;
using steps::transient;

// A step that lets the next one start before it has finished.
Step overlapping(Step s) {
  s.overlapNext = true;
  return s;
}

Schedule allReduce(const ScheduleKey& k) {
  Schedule sch;
  sch.inputCount = sch.outputCount = k.count;
  sch.result = out(0);
  sch.resultCount = k.count;
  if (k.nranks == 1) {
    sch.steps.push_back(steps::copy(in(0), out(0), k.count));
    return sch;
  }
  appendRingAllReduce(sch, RingGroup{k.nranks, k.rank}, in(0), out(0), k.count);
  return sch;
}

// Input: n blocks of k.count; rank r ends with block r reduced in Output[0, count).
Schedule reduceScatter(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks;
  const size_t block = k.count;
  sch.inputCount = block * static_cast<size_t>(n);
  sch.outputCount = block;
  sch.result = out(0);
  sch.resultCount = block;
  if (n == 1) {
    sch.steps.push_back(steps::copy(in(0), out(0), block));
    return sch;
  }
  std::vector<RingBlock> partials;
  for (int p = 0; p < n; ++p) partials.push_back({in(static_cast<size_t>(p) * block), block});
  appendRingReduceScatter(sch, RingGroup{n, k.rank}, partials, out(0));
  return sch;
}

// Output: n blocks of k.count; block r comes from rank r's input.
Schedule allGather(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks;
  const size_t block = k.count;
  sch.inputCount = block;
  sch.outputCount = block * static_cast<size_t>(n);
  sch.steps.push_back(steps::copy(in(0), out(static_cast<size_t>(k.rank) * block), block));
  if (n == 1) return sch;
  std::vector<RingBlock> blocks;
  for (int p = 0; p < n; ++p) blocks.push_back({out(static_cast<size_t>(p) * block), block});
  appendRingAllGather(sch, RingGroup{n, k.rank}, blocks, in(0));
  return sch;
}

Schedule broadcast(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank, next = ringAdd(r, 1, n), prev = ringAdd(r, -1, n);
  const int pos = ringAdd(r, -k.root, n);  // 0 at the root, n-1 at the end of the chain
  sch.inputCount = pos == 0 ? k.count : 0;
  sch.outputCount = k.count;
  if (pos == 0) {
    sch.steps.push_back(steps::copy(in(0), out(0), k.count));
    if (n > 1) sch.steps.push_back(steps::send(next, in(0), k.count));
  } else if (pos < n - 1) {
    sch.steps.push_back(steps::recvCopySend(prev, next, out(0), k.count));
  } else {
    sch.steps.push_back(steps::recv(prev, out(0), k.count));
  }
  return sch;
}

Schedule reduce(const ScheduleKey& k) {
  Schedule sch;
  const int n = k.nranks, r = k.rank, next = ringAdd(r, 1, n), prev = ringAdd(r, -1, n);
  const int pos = ringAdd(r, -k.root - 1, n);  // 0 starts the chain, n-1 is the root
  sch.inputCount = k.count;
  sch.outputCount = r == k.root ? k.count : 0;
  if (r == k.root) {
    sch.result = out(0);
    sch.resultCount = k.count;
  }
  if (n == 1) {
    sch.steps.push_back(steps::copy(in(0), out(0), k.count));
  } else if (pos == 0) {
    sch.steps.push_back(steps::send(next, in(0), k.count));
  } else if (pos < n - 1) {
    sch.steps.push_back(steps::recvReduce(prev, next, in(0), transient(), k.count));
  } else {
    sch.steps.push_back(steps::recvReduce(prev, -1, in(0), out(0), k.count));
  }
  return sch;
}

}  // namespace

void appendRingAllReduce(Schedule& sch, const RingGroup& g, Range src, Range dst, size_t count) {
  const int n = g.size, p = g.pos;
  const int next = g.rankAt(ringAdd(p, 1, n)), prev = g.rankAt(ringAdd(p, -1, n));
  ChunkSplit chunks{count, n};
  auto chunk = [&](int delta) { return ringAdd(p, delta, n); };
  auto from = [&](Range base, int c) { return steps::at(base.buffer, base.offset + chunks.offset(c)); };
  // Empty chunks (count < n) make no steps at all: at thousands of ranks most of them are empty.
  sch.steps.push_back(overlapping(steps::send(next, from(src, p), chunks.size(p))));
  for (int s = 1; s <= n - 1; ++s) {
    int c = chunk(-s);
    if (chunks.size(c) == 0) continue;
    sch.steps.push_back(steps::recvReduce(prev, next, from(src, c), from(dst, c), chunks.size(c)));
  }
  for (int s = 1; s <= n - 2; ++s) {
    int c = chunk(1 - s);
    if (chunks.size(c) == 0) continue;
    sch.steps.push_back(steps::recvCopySend(prev, next, from(dst, c), chunks.size(c)));
  }
  int last = chunk(2);
  sch.steps.push_back(steps::recv(prev, from(dst, last), chunks.size(last)));
}

void appendRingAllGather(Schedule& sch, const RingGroup& g, const std::vector<RingBlock>& blocks, Range own) {
  const int n = g.size, p = g.pos;
  const int next = g.rankAt(ringAdd(p, 1, n)), prev = g.rankAt(ringAdd(p, -1, n));
  auto block = [&](int delta) { return blocks[static_cast<size_t>(ringAdd(p, delta, n))]; };
  sch.steps.push_back(overlapping(steps::send(next, own, block(0).count)));
  for (int s = 1; s <= n - 2; ++s) sch.steps.push_back(steps::recvCopySend(prev, next, block(-s).at, block(-s).count));
  sch.steps.push_back(steps::recv(prev, block(1).at, block(1).count));
}

void appendRingReduceScatter(Schedule& sch, const RingGroup& g, const std::vector<RingBlock>& partials, Range dst) {
  const int n = g.size, p = g.pos;
  const int next = g.rankAt(ringAdd(p, 1, n)), prev = g.rankAt(ringAdd(p, -1, n));
  auto part = [&](int delta) { return partials[static_cast<size_t>(ringAdd(p, delta, n))]; };
  sch.steps.push_back(overlapping(steps::send(next, part(-1).at, part(-1).count)));
  for (int s = 0; s <= n - 3; ++s)
    sch.steps.push_back(steps::recvReduce(prev, next, part(-2 - s).at, transient(), part(-2 - s).count));
  sch.steps.push_back(steps::recvReduce(prev, -1, part(0).at, dst, part(0).count));
}

Schedule buildRing(const ScheduleKey& key) {
  switch (key.coll) {
    case Collective::AllReduce:
      return allReduce(key);
    case Collective::ReduceScatter:
      return reduceScatter(key);
    case Collective::AllGather:
      return allGather(key);
    case Collective::Broadcast:
      return broadcast(key);
    case Collective::Reduce:
      return reduce(key);
    default:
      break;
  }
  refuseUnsupported(Algorithm::Ring, key.coll);
}

}  // namespace collie::algorithms
