// ddp.hpp: data-parallel gradient synchronisation, framework-agnostic.
//
// A GradientReducer averages the gradients of a model's parameters over every rank of a Communicator, in
// buckets, while the backward pass is still running:
//   - the framework registers its parameters (name, element count, type, device) once, in model order;
//   - buckets are filled in reverse registration order (backward produces the last layers' gradients first),
//     each up to a cap (25 MiB by default; the first bucket 1 MiB, so that communication starts early);
//   - from the framework's per-parameter "gradient ready" hook, markReady(i) copies the gradient into its
//     bucket (or finds it already there: gradient-as-bucket-view); a bucket whose last gradient arrived
//     launches its asynchronous AllReduce at once. Buckets are launched strictly in bucket order, so that every
//     rank issues the same collectives in the same order even when gradients become ready in another order;
//   - finalize(), after backward, waits for every bucket, leaves the average over ranks in the bucket and
//     writes it back to the gradients;
//   - after the first iteration the buckets are rebuilt once from the order in which gradients actually became
//     ready (rank 0's order, broadcast, so that every rank builds the same buckets).
// It works on host memory (pointer + type + count) and needs no ML framework; the LibTorch adapter
// (collie/torch_ddp.hpp) drives it from autograd hooks.
#pragma once

#include <collie/collie.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace collie::ddp {

/// Where the framework keeps a parameter. Buckets are always host memory; gradients on a device are staged
/// through them by the adapter. Parameters on different devices never share a bucket.
enum class DeviceType : int { Cpu = 0, Cuda = 1 };
struct Device {
  DeviceType type = DeviceType::Cpu;
  int index = -1;
  friend bool operator==(const Device&, const Device&) = default;
};

/// One parameter, as the framework registers it.
struct Parameter {
  std::string name;  ///< used in error messages ("fc2.weight")
  size_t count = 0;  ///< elements
  DataType type = DataType::Float32;
  Device device;
  /// The parameter's values in host memory, broadcast from rank 0 when the reducer is constructed (so every
  /// rank starts from the same model); null when the framework broadcasts them itself.
  void* data = nullptr;
};

/// GradientReducer options; the defaults are PyTorch DDP's.
struct ReducerOptions {
  size_t bucketCapBytes = size_t{25} << 20;      ///< a bucket is closed once it holds at least this many bytes
  size_t firstBucketCapBytes = size_t{1} << 20;  ///< the same for the first bucket
  /// The framework keeps each gradient as a view of bucketView(i) (no copy in markReady, none in finalize; the
  /// bucket memory is the gradient, so it persists across iterations and accumulates in place).
  bool gradientAsBucketView = false;
  /// Parameters that get no gradient in an iteration take part with zeros (markUnused, or found by finalize);
  /// parameters unused on every rank keep their gradient untouched. Without it, such parameters are an error.
  bool findUnusedParameters = false;
  /// Rebuild the buckets once, after the first iteration, from the order in which gradients became ready.
  bool rebuildBuckets = true;
  /// Broadcast Parameter::data from rank 0 at construction.
  bool broadcastParameters = true;
};

/// One bucket as a communication hook sees it: a contiguous host buffer holding the gradients of some
/// parameters, all of one type.
class COLLIE_EXPORT GradBucket {
 public:
  size_t index() const { return index_; }
  bool isLast() const { return isLast_; }  ///< the last bucket launched in an iteration
  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t count() const { return count_; }
  DataType type() const { return type_; }
  size_t bytes() const;
  /// Indices (in registration order) of the parameters in this bucket, in bucket order.
  const std::vector<size_t>& parameters() const { return params_; }
  /// Offset (in elements) of each of parameters() in data().
  const std::vector<size_t>& offsets() const { return offsets_; }
  /// Memory a hook may keep with the bucket between launch and completion (a compressed copy, ...).
  std::vector<std::byte>& scratch() { return scratch_; }

 private:
  friend class GradientReducer;
  size_t index_ = 0;
  bool isLast_ = false;
  void* data_ = nullptr;
  size_t count_ = 0;
  DataType type_ = DataType::Float32;
  std::vector<size_t> params_;
  std::vector<size_t> offsets_;
  std::vector<std::byte> scratch_;
};

/// What a communication hook returns for one bucket: the pending communication, and what to do once it is
/// done. `then` runs in finalize() after work.wait(), and must leave the average over ranks in bucket.data().
struct PendingReduction {
  Work work;                   ///< may be empty (nothing to wait for)
  std::function<void()> then;  ///< may be empty
};

/// A communication hook (PyTorch's register_comm_hook): starts the reduction of one bucket and returns at once.
/// It is called on every rank for every bucket in the same order, on the thread that marked the bucket's last
/// gradient ready (an autograd thread under LibTorch), so it must only issue collectives on comm.
using CommHook = std::function<PendingReduction(Communicator& comm, GradBucket& bucket)>;

/// The hooks that come with collie.
namespace hooks {
/// AllReduce with ReduceOp::Avg, in place: the built-in mean as a hook (to wrap or compose).
COLLIE_EXPORT CommHook allReduceMean();
/// float32 buckets travel as fp16: divided by the world size, rounded to fp16, summed in fp16, widened back.
/// Other types use allReduceMean. Halves the bytes; the result is within fp16 rounding of the exact mean.
COLLIE_EXPORT CommHook fp16Compress();
/// The same with bfloat16 (more range, 8 bits of mantissa).
COLLIE_EXPORT CommHook bf16Compress();
}  // namespace hooks

/// Timing of the last synchronised iteration, to see how much communication hid behind backward.
struct ReducerStats {
  uint64_t iterations = 0;           ///< synchronised iterations finalized
  size_t buckets = 0;                ///< buckets of the current layout
  size_t launchedEarly = 0;          ///< buckets launched before finalize() in the last iteration
  double finalizeSeconds = 0;        ///< wall time of the last finalize()
  double waitSeconds = 0;            ///< part of it spent waiting for communication
  double writeBackSeconds = 0;       ///< part of it spent copying averages back to the gradients
  double copyInSeconds = 0;          ///< markReady's copies into the buckets in the last iteration (during backward)
  double firstLaunchToFinalize = 0;  ///< from the first bucket launch to the start of finalize()
};

/// Averages gradients over the ranks of a communicator, bucketed and overlapped with backward (file comment).
/// One iteration: markReady / markUnused for parameters as their gradients become ready (from any thread),
/// then finalize() on one thread. The communicator must not be used by anything else during an iteration.
class COLLIE_EXPORT GradientReducer {
 public:
  /// Collective: every rank constructs its reducer with the same parameter list (counts and types are checked
  /// across ranks), and rank 0's parameter values are broadcast (ReducerOptions::broadcastParameters).
  GradientReducer(Communicator& comm, std::vector<Parameter> params, ReducerOptions options = {});
  ~GradientReducer();  ///< waits for communication still in flight
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  /// Replaces the built-in mean with a communication hook. Only between iterations. The built-in mean divides
  /// float32/float64 gradients by the world size while copying them into the bucket (one pass, as PyTorch's
  /// reducer) and sums the buckets; a hook sees the gradients as they are and must average them itself.
  void registerCommHook(CommHook hook);

  /// The gradient of parameter i is ready at grad (host memory, parameter(i).count elements): it is copied into
  /// its bucket (in place when grad == bucketView(i); the built-in mean divides float gradients by the world size
  /// on the way), and finalize() writes the average back to grad. The first call of an iteration starts it.
  /// Marking a parameter twice in one iteration is an error.
  void markReady(size_t i, void* grad);
  /// The gradient is already in bucketView(i) (gradient-as-bucket-view, or staged there by the adapter).
  void markReady(size_t i) { markReady(i, bucketView(i)); }
  /// findUnusedParameters: parameter i gets no gradient on this rank in this iteration; zeros take its place.
  /// grad (may be null) receives the average when another rank did use it.
  void markUnused(size_t i, void* grad = nullptr);
  /// Where parameter i's gradient lives in its bucket (changes only when the buckets are rebuilt).
  void* bucketView(size_t i);

  /// Ends the iteration: launches what is left, waits for every bucket, writes the averages back, and after
  /// the first iteration rebuilds the buckets. Without findUnusedParameters, parameters that got no gradient
  /// make it throw InvalidUsage naming them (after waiting for what was launched). No-op outside an iteration
  /// when no_sync is active.
  void finalize();

  /// True between the first markReady/markUnused of an iteration and finalize().
  bool inIteration() const;

  /// While false, markReady/markUnused/finalize do nothing: gradients accumulate in the framework (no_sync).
  void setRequireSync(bool requireSync);
  bool requireSync() const;

  /// RAII form of setRequireSync(false) (PyTorch's `with ddp.no_sync():`).
  class [[nodiscard]] NoSync {
   public:
    explicit NoSync(GradientReducer& r) : r_(&r), prev_(r.requireSync()) { r.setRequireSync(false); }
    NoSync(NoSync&& o) noexcept : r_(o.r_), prev_(o.prev_) { o.r_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;
    NoSync& operator=(NoSync&&) = delete;
    ~NoSync() {
      if (r_) r_->setRequireSync(prev_);
    }

   private:
    GradientReducer* r_;
    bool prev_;
  };
  NoSync noSync() { return NoSync(*this); }

  /// After finalize() with findUnusedParameters: whether parameter i had a gradient on this rank / on any rank.
  bool locallyUsed(size_t i) const;
  bool globallyUsed(size_t i) const;

  size_t numParameters() const;
  const Parameter& parameter(size_t i) const;
  Communicator& communicator();
  const ReducerOptions& options() const;
  /// The parameter indices of each bucket, in launch order.
  std::vector<std::vector<size_t>> bucketAssignment() const;
  /// Incremented whenever bucketView() pointers change (the rebuild); adapters re-point their gradient views.
  uint64_t layoutVersion() const;
  bool bucketsRebuilt() const;
  ReducerStats stats() const;

  /// Splits parameters into buckets: walks `order` (parameter indices), keeping one open bucket per (type,
  /// device); a bucket is closed once it holds at least its cap (firstCap for the first bucket of each (type,
  /// device), cap afterwards). Buckets come out ordered by the position in `order` of their first parameter.
  static std::vector<std::vector<size_t>> computeBuckets(const std::vector<Parameter>& params,
                                                         std::span<const size_t> order, size_t firstCapBytes,
                                                         size_t capBytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A host buffer for broadcastCoalesced.
struct HostBuffer {
  void* data = nullptr;
  size_t count = 0;
  DataType type = DataType::Float32;
};

/// Broadcasts many small buffers from root, packed by type into a few large messages (model parameters and
/// buffers at startup). Collective: every rank passes the same counts and types.
COLLIE_EXPORT void broadcastCoalesced(Communicator& comm, std::span<const HostBuffer> buffers, int root = 0,
                                      size_t chunkBytes = size_t{64} << 20);

}  // namespace collie::ddp
