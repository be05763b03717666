// The state behind collie::ddp::GradientReducer (include/collie/ddp.hpp).
//
// Layout: every bucket is one contiguous, zero-initialised host allocation of a single type; parameter i lives
// at bucket bucketOf[i], element offsetOf[i]. The layout changes once at most (the rebuild after the first
// iteration), which increments layoutVersion.
//
// One iteration: ready[i] goes None -> Used (markReady) or Unused (markUnused / found by finalize with
// findUnusedParameters); each bucket counts the parameters it still waits for; buckets launch strictly in
// index order (nextLaunch), so the collectives are issued in the same order on every rank. finalize() waits
// for every bucket in order and runs its hook's `then`.
#pragma once

#include <chrono>
#include <collie/ddp.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace collie::core {
class CallTrace;
}

namespace collie::ddp {

struct GradientReducer::Impl {
  enum class Ready : uint8_t { None = 0, Used = 1, Unused = 2 };

  struct Bucket {
    GradBucket face;  // what hooks see; face.data_ points into mem
    std::unique_ptr<std::byte[]> mem;
    Device device;
    size_t pending = 0;  // parameters not yet ready in this iteration
    bool launched = false;
    PendingReduction reduction;
    uint64_t readySince = 0, launchedAt = 0;  // ticks, kept only while tracing (COLLIE_TRACE)
  };

  Impl(Communicator& c, std::vector<Parameter> p, ReducerOptions o);

  /// Builds buckets for `assignment`, copying each parameter's current slot from the old layout if any.
  void layout(const std::vector<std::vector<size_t>>& assignment);
  void beginIteration();
  /// Parameter i is ready or unused: its bucket waits for one parameter less.
  void countDown(size_t i);
  void launchReady();  // launches buckets nextLaunch.. whose gradients are all ready
  /// Waits for everything launched (errors ignored) and ends the iteration; for error paths and destruction.
  void abandon() noexcept;
  void rebuild();
  void writeBackOne(size_t i);  // the average of parameter i to its gradient (finalize)
  void* slot(size_t i) const;
  size_t elemSize(size_t i) const;

  Communicator& comm;
  // The communicator's timeline (COLLIE_TRACE; core/call_trace.hpp), or null: each bucket's "ready" span (its
  // first gradient in until its launch) and "reduce" span (launch until its average was taken) go there.
  core::CallTrace* trace;
  std::vector<Parameter> params;
  ReducerOptions opts;
  CommHook hook;  // a user's hook; empty: the built-in mean (below)
  // The built-in mean divides float32/float64 gradients by the world size while copying them into the bucket
  // (one pass, as PyTorch's reducer does) and sums them; other types use ReduceOp::Avg.
  bool prescaled(const Bucket& b) const {
    return !hook && (b.face.type_ == DataType::Float32 || b.face.type_ == DataType::Float64);
  }
  /// Copies count elements of parameter i's type from src to dst (may be equal), divided by the world size
  /// when its bucket is prescaled.
  void copyIn(size_t i, void* dst, const void* src);

  std::vector<std::unique_ptr<Bucket>> buckets;
  std::vector<size_t> bucketOf, offsetOf;  // per parameter
  uint64_t layoutVersion = 0;
  bool rebuilt = false;

  mutable std::mutex mu;
  bool requireSync = true;
  bool active = false;
  std::vector<Ready> ready;                   // per parameter, this iteration
  std::vector<void*> writeBack;               // per parameter: where finalize() writes the average (may be null)
  std::vector<std::vector<std::byte>> saved;  // gradient-as-bucket-view: slots of locally unused parameters
  std::vector<int32_t> used;                  // per parameter after finalize(): used on some rank
  size_t nextLaunch = 0;
  std::vector<size_t> readyOrder;  // the first iteration's, for the rebuild
  std::chrono::steady_clock::time_point firstLaunch;
  bool anyLaunched = false;
  double copyInTime = 0;  // seconds of markReady copies in this iteration
  ReducerStats stats;
};

}  // namespace collie::ddp
