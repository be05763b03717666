// The schedule simulator: every rank of a collective in one process and one thread. Each rank's schedule is
// built by the real builder and run by the real core::Executor (step-wise: begin/step/done, round-robin over
// the ranks that can move), over in-memory links (sim/memory_connection.hpp). It checks that
//   - every send meets a receive of the same size (a mismatch names both ranks and the transfer),
//   - nothing hangs: when no rank can move and nothing is in flight, it reports which ranks wait on whom,
//   - every transfer was matched and delivered when all ranks are done,
//   - every rank ends with exactly the right bytes (integer data, results computed independently here), and
//     that send buffers, non-root outputs and the bytes after each buffer are untouched,
// and it estimates the time of the collective with the fabric's alpha-beta-gamma model: a message occupies the
// sender's outbound and the receiver's inbound port for overhead + bytes*beta and arrives alpha later;
// reductions cost gamma per byte on the receiving rank's CPU (see memory_connection.hpp). The estimate is the
// clock when the last rank finishes: pipelining, port contention and the executor's own rules (slices in
// flight, per-peer order) all show in it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "algorithms/algorithms.hpp"
#include "base/datatypes.hpp"
#include "sim/memory_connection.hpp"

namespace collie::sim {

using algorithms::Algorithm;
using algorithms::Buffer;
using algorithms::Collective;
using algorithms::Schedule;
using algorithms::Step;
using algorithms::StepKind;

struct SimOptions {
  Collective coll = Collective::AllReduce;
  Algorithm algo = Algorithm::Ring;
  int nranks = 1;
  size_t count = 0;  ///< elements, as in the C API (per rank for AllGather, ReduceScatter, AllToAll)
  int root = 0;      ///< Broadcast / Reduce
  DataType type = DataType::Int32;
  ReduceOp op = ReduceOp::Sum;
  bool inPlace = false;
  size_t sliceBytes = 512 * 1024;
  int slicesInFlight = 4;
  MemoryCost cost;  ///< all zero: no time model (the estimate is 0)
  /// Which host each rank runs on (empty: one host): the Hierarchical schedules follow it, and messages between
  /// hosts cost `interHost` and share their hosts' network ports (MemoryFabric::setHosts).
  algorithms::patterns::HostLayout hosts;
  MemoryCost interHost;
  /// true: per-rank buffers with integer data, checked at the end (integer types only). false: timing only,
  /// every rank on the same two buffers, no bytes copied between ranks (any size, any type).
  bool checkData = true;
  /// Tests: called with each rank's schedule after it was built, to break it on purpose.
  std::function<void(int rank, algorithms::Schedule& schedule)> mutate;
};

struct SimResult {
  bool ok = false;
  std::string error;            ///< why not, when !ok
  double seconds = 0;           ///< estimated completion time
  size_t maxSteps = 0;          ///< most schedule steps of one rank
  uint64_t maxBytesSent = 0;    ///< most bytes sent by one rank
  uint64_t totalBytesSent = 0;  ///< all ranks
  uint64_t maxMessages = 0;     ///< most messages (slices) sent by one rank
  int busiestRank = 0;          ///< the rank that sent maxBytesSent
};

/// Runs one collective on options.nranks simulated ranks. Throws InvalidArgument for options that make no
/// sense (unsupported pair of collective and algorithm, bad root, non-integer type with checkData).
SimResult simulate(const SimOptions& options);

}  // namespace collie::sim
