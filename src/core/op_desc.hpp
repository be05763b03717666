// OpDesc: one call as the user made it, the unit every part of a communicator passes along: validated
// (validate.hpp), classified by memory kind, staged for device buffers (device_stager.hpp), queued
// (progress_queue.hpp), planned into jobs (planner.hpp) and run by the executor.
#pragma once

#include <collie/collie.hpp>
#include <cstddef>
#include <memory>

#include "algorithms/schedule.hpp"

namespace collie::core {

struct StagedOp;
using WorkState = Work::State;

/// The peer of a Recv from any source (collie::kAnySource; any_source.hpp).
constexpr int kAnySource = collie::kAnySource;

/// One call as the user made it.
struct OpDesc {
  algorithms::Collective coll = algorithms::Collective::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  ///< as in the C API (per rank for AllGather/ReduceScatter/AllToAll)
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  /// PreMulSum: this rank's factor, one element of `type` in the first bytes (Reduction::factorBits), and the
  /// type it was made for (-1: none; validateOp refuses a PreMulSum without one of `type`).
  uint64_t factor = 0;
  int factorType = -1;
  int root = 0;                     ///< root, or peer for Send/Recv (kAnySource: a Recv from any source)
  bool barrier = false;             ///< the AllReduce that implements barrier() (its fingerprint says so)
  int* source = nullptr;            ///< a Recv from any source: where the rank it matched is written
  std::shared_ptr<WorkState> work;  ///< set for async calls and calls deferred by a group
  /// The caller's cudaStream_t, set by the API entry point (the C API); NULL: the legacy default stream.
  void* stream = nullptr;
  /// Set by the API entry point for a C API call: on device buffers, enqueue on `stream` and return at once.
  bool streamOrdered = false;
  // Device buffers (device_stager.hpp). Set by the communicator, not by callers.
  bool device = false;               ///< the buffers are device memory (classifyMemory)
  int deviceOrdinal = -1;            ///< their GPU (-1: pinned host memory passed with a stream)
  std::shared_ptr<StagedOp> staged;  ///< the pinned copies and events, once staged
};

/// The OpDesc of one call (the stream and device fields keep their defaults).
inline OpDesc makeOp(algorithms::Collective coll, const void* send, void* recv, size_t count, DataType type,
                     const Reduction& op, int root) {
  OpDesc d;
  d.coll = coll;
  d.send = send;
  d.recv = recv;
  d.count = count;
  d.type = type;
  d.op = op.op();
  d.factor = op.factorBits();
  d.factorType = op.factorType();
  d.root = root;
  return d;
}

}  // namespace collie::core
