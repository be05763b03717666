// PreparedCall: the fast path of a repeated blocking call (a training loop's metrics all-reduce, a benchmark's loop,
// a barrier), which is most calls of a few bytes and where the per-call work is the whole cost.
//
// A blocking call takes the general path (validate, classify memory, group and queue checks, plan, execute) the
// first time; if it ran inline on host buffers, its arguments are kept as the communicator's prepared call
// (CommImpl::armPrepared). A later call with the very same arguments (collective, buffers, count, type, op, root;
// no stream) then goes straight to the executor (CommImpl::runPrepared):
//   - no re-validation: validateOp is a pure function of those arguments and the rank, so the same arguments pass
//     again; any other argument, a bad one included, misses the key and gets the general path's checks and errors
//     before any buffer is touched;
//   - no classification of the buffers: memory that was pageable host memory cannot turn into device memory
//     without being freed first, which a caller does not do between two calls on it, and no CUDA driver can be
//     loaded, initialised and allocate there within a few calls of a few bytes: the key is used kUses times, then
//     the general path classifies again (and re-arms it);
//   - no group, queue or lookup: the inline claim (one compare-and-swap) is taken first, and the key is compared
//     under it, so the prepared call is only ever read or written by the thread that holds the claim; a process
//     with no group open anywhere answers the group check with one load (anyGroupOpen);
//   - no planning: the planner's last job is reused with only its call number advanced (Planner::repeat), so the
//     fingerprints, the flight recorder, the statistics and the trace see the call exactly as on the general path,
//     and a peer that called something else is caught the same way;
//   - no flattening: the executor keeps the last run's steps and resolved buffers (Executor::begin).
// A failed communicator, an open group, queued async work or a key that differs all take the general path, which
// reports or queues as before.
#pragma once

#include <collie/collie.hpp>
#include <cstddef>
#include <cstdint>

#include "algorithms/schedule.hpp"
#include "core/op_desc.hpp"

namespace collie::core {

/// A call's arguments as the user made them: what a repeated call must equal to take the prepared path.
struct CallKey {
  const void* send = nullptr;
  const void* recv = nullptr;
  size_t count = 0;
  algorithms::Collective coll = algorithms::Collective::AllReduce;
  DataType type = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  uint64_t factor = 0;  ///< PreMulSum's: a repeat with another factor is another call
  int factorType = -1;
  int root = 0;
  bool barrier = false;
  bool operator==(const CallKey&) const = default;
};

inline CallKey keyOf(const OpDesc& op) {
  return CallKey{op.send, op.recv, op.count, op.coll, op.type, op.op, op.factor, op.factorType, op.root, op.barrier};
}

class PreparedCall {
 public:
  /// Uses of one classification of the buffers before the general path classifies them again.
  static constexpr uint32_t kUses = 256;
  /// Calls larger than this are not prepared: their per-call work is a small part of their time.
  static constexpr size_t kMaxBytes = 64 * 1024;

  /// Whether `key` is the prepared call (and may be used once more); counts the use.
  bool take(const CallKey& key) {
    if (left_ == 0 || !(key == key_)) return false;
    --left_;
    return true;
  }
  void arm(const CallKey& key) {
    key_ = key;
    left_ = kUses;
  }
  void forget() { left_ = 0; }

 private:
  CallKey key_;
  uint32_t left_ = 0;
};

}  // namespace collie::core
