// The schedule IR. An algorithm is a pure function (collective, rank, nranks, count, dtype, root) -> Schedule:
// an ordered list of Steps, each moving a range of elements between this rank's buffers and one or two
// peers. The executor (src/core/executor.*) runs the steps over Connections, splitting every step into
// slices so that receive, reduce and forward of consecutive slices overlap; the simulator
// (src/algorithms/simulator.*) runs the same schedules for all ranks in one process.
//
// Buffers are named, not pointed to: Input (the user's send buffer), Output (the user's receive buffer),
// Scratch (a per-call area of Schedule::scratchCount elements that the executor provides, for partial results
// that must outlive a slice and may not go to Output) and Transient (a slice-sized scratch slot that the
// executor takes from its pool for each slice and returns once the slice has been sent). Offsets and counts
// are in elements.
//
// Execution rules the builders rely on:
//  - Step k+1 starts when every receive of step k has completed (its sends may still be in flight), or
//    at once if step k has overlapNext set. So step k+1 must not write memory step k still sends, unless
//    what it receives there can only have been produced after the peer got that send (the reply to it: the
//    broadcast-down of a tree, the all-gather half of halving-doubling, a folded rank's result).
//  - Within a step, slice j of the send part is posted as soon as slice j of the receive part is done.
//  - A step with sliceAfter = i (an earlier step of the same schedule, with the same count) processes its
//    slice j (reduce, copy, forward; for a Send: posts it) only once step i has finished its slice j (received
//    and reduced it). Steps that all start at once (overlapNext) are pipelined slice by slice this way: a
//    tree node reduces slice j from its first child, then from its second, then sends it up.
//  - Transfers to (from) one peer are posted in schedule order: a step posts to a peer only after every
//    earlier step that sends to (receives from) that peer has posted all of its slices. Both ends of a link
//    therefore match transfers one to one as long as they list them in the same order.
//  - A receive whose destination overlaps the step's local source lands in a Transient slot first.
//  - Steps with count 0 move nothing (build() drops them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace collie::algorithms {

enum class Buffer : uint8_t { Input = 0, Output = 1, Transient = 2, Scratch = 3 };

struct Range {
  Buffer buffer = Buffer::Input;
  size_t offset = 0;  ///< elements; ignored for Transient
};

enum class StepKind : uint8_t {
  Send,            ///< send src[0:count) to sendPeer
  Recv,            ///< receive count elements from recvPeer into dst
  RecvReduce,      ///< receive from recvPeer; dst = src op received
  RecvReduceSend,  ///< as RecvReduce, then send dst to sendPeer
  RecvCopySend,    ///< receive into dst, then send dst to sendPeer
  Copy,            ///< dst = src (skipped when they are the same memory)
};

struct Step {
  StepKind kind = StepKind::Send;
  int sendPeer = -1;
  int recvPeer = -1;
  Range src;
  Range dst;
  size_t count = 0;
  bool overlapNext = false;  ///< let the next step start before this step's receives complete
  /// RecvReduce(Send): dst = received op src instead of src op received, so that two ranks folding each other's
  /// value compute the same operation (x op y and y op x may differ in a NaN's bits)
  bool receivedFirst = false;
  int sliceAfter = -1;  ///< index of an earlier step whose slice j must be finished before this one's

  /// Whether the step reads src (every kind but the plain receives).
  bool readsSrc() const { return kind != StepKind::Recv && kind != StepKind::RecvCopySend; }
};

enum class Collective : uint8_t { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AllToAll, Send, Recv };
/// The last Collective. Exhaustive without a default: a new enumerator makes -Wswitch (an error under the dev
/// preset) point here, to make it the last one.
constexpr Collective lastCollective(Collective c = Collective::Recv) {
  switch (c) {
    case Collective::AllReduce:
    case Collective::Broadcast:
    case Collective::Reduce:
    case Collective::AllGather:
    case Collective::ReduceScatter:
    case Collective::AllToAll:
    case Collective::Send:
    case Collective::Recv:
      break;
  }
  return Collective::Recv;
}
/// How many there are (tables indexed by Collective, core/call_stats.hpp).
inline constexpr int kNumCollectives = static_cast<int>(lastCollective()) + 1;
const char* collectiveName(Collective coll);

struct Schedule {
  std::vector<Step> steps;
  /// Where the final result lies on this rank (ReduceOp::Avg divides it by nranks at the end); count 0: none.
  Range result;
  size_t resultCount = 0;
  /// Elements of Input and Output the schedule touches (for checks and the simulator).
  size_t inputCount = 0;
  size_t outputCount = 0;
  /// Elements of Scratch the executor must provide for this call (0: none).
  size_t scratchCount = 0;
  /// No two steps read the same element of Input (set by build()): the executor may then scale an Avg's or a
  /// PreMulSum's input as each step reads it rather than all of it first (a second scaling of a slice could rewrite
  /// bytes a transport is still sending).
  bool inputReadOnce = false;
};

/// What the builders need to know; element counts as in the C API (per-rank for AllGather/ReduceScatter).
struct ScheduleKey {
  Collective coll = Collective::AllReduce;
  int rank = 0;
  int nranks = 1;
  size_t count = 0;
  int root = 0;          ///< root of Broadcast/Reduce, peer of Send/Recv
  size_t elemBytes = 4;  ///< bytes per element (halving-doubling's AllReduce takes another form for small messages)
  bool operator==(const ScheduleKey&) const = default;
};

/// Human-readable listing of a schedule (collie-sim --trace, test failures).
std::string describe(const Schedule& schedule);

}  // namespace collie::algorithms
