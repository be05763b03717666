// ProcessGroupCollie: collie as a torch.distributed (c10d) backend. init_process_group("collie") builds one per
// process group through the creator registered by the Python package collie.torch (module.cpp). The constructor
// meets the other ranks through the c10d Store PyTorch passes in (rank 0 makes a collie::UniqueId and sets it,
// the others get it, so env://, file:// and tcp:// all work) and creates a collie::Communicator whose timeout is
// the group's timeout. Collectives run on collie's async calls; each returns a CollieWork (collie_work.hpp), which
// the group keeps until it is complete, as gloo does, so that a dropped handle neither frees buffers collie still
// uses nor leaves outputs unwritten: each new call completes those whose handles are done, a barrier (an async
// 1-byte all-reduce) completes every Work issued before it, and the destructor keeps them until the collie
// communicator is gone. CPU tensors only. Against torch 1.x the class is a c10d::ProcessGroup; against torch 2.x a
// c10d::Backend.
#pragma once

#include <torch/version.h>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#define COLLIE_C10D_BASE ::c10d::Backend
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#define COLLIE_C10D_BASE ::c10d::ProcessGroup
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define COLLIE_C10D_END_COALESCING_RETURNS_WORK 1
#else
#define COLLIE_C10D_END_COALESCING_RETURNS_WORK 0
#endif

#include <atomic>
#include <chrono>
#include <collie/collie.hpp>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

#include "collie_work.hpp"
#include "issue_order.hpp"
#include "tensor_staging.hpp"

namespace collie::torchbackend {

class ProcessGroupCollie : public COLLIE_C10D_BASE {
 public:
  using WorkPtr = c10::intrusive_ptr<c10d::Work>;

  /// Rendezvous through `store`, then joins the collie communicator (blocks until every rank has).
  ProcessGroupCollie(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                     std::chrono::milliseconds timeout);
  ~ProcessGroupCollie() override;

  const std::string getBackendName() const override { return "collie"; }

  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override;
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override;
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override;
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override;
  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override;
  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override;
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
#if TORCH_VERSION_MAJOR >= 2
  // What torch 2.x's coalescing manager calls for all_gather_into_tensor and reduce_scatter_tensor in its block.
  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override;
  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override;
#endif
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                        std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override;
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override;
  WorkPtr send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  WorkPtr recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  WorkPtr barrier(const c10d::BarrierOptions& opts) override;

  // batch_isend_irecv: the sends and receives between start and end form one collie group.
  void startCoalescing() override;
#if COLLIE_C10D_END_COALESCING_RETURNS_WORK
  WorkPtr endCoalescing() override;
#else
  void endCoalescing(std::vector<WorkPtr>& reqs) override;
#endif

  /// The collie communicator (for tests and tools).
  Communicator& communicator() { return *comm_; }

 private:
  c10::intrusive_ptr<CollieWork> makeWork(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs);
  /// One all-gather or reduce-scatter, checked and staged (op: the reduce-scatter's).
  struct StagedPair {
    Staged in, out;
    collie::Reduction op = collie::ReduceOp::Sum;
  };
  StagedPair stageAllgather(at::Tensor& output, at::Tensor& input, const std::string& what) const;
  StagedPair stageReduceScatter(at::Tensor& output, at::Tensor& input, const c10d::ReduceOp& reduceOp,
                                const std::string& what) const;
  /// Adds a staged pair's copy back to `work`; returns its collie call (for issue()).
  std::function<void()> allgatherCalls(CollieWork& work, const StagedPair& p);
  std::function<void()> reduceScatterCalls(CollieWork& work, const StagedPair& p);
  /// Keeps `work` (or adds it to the coalescing block's) and makes `calls` (the collie calls that add their handles
  /// to it, capturing what they use by value) in the order IssueOrder keeps: now, where a collie error raises a
  /// RuntimeError naming the call, or later, where it fails the Work. Register the Work's post-processing (then())
  /// before. Returns the Work.
  WorkPtr issue(const c10::intrusive_ptr<CollieWork>& work, const char* name, std::function<void()> calls);
  /// Keeps a Work until it is complete (its buffers are collie's until then), first dropping those that are
  /// (completing those whose handles are done). Returns it.
  WorkPtr kept(c10::intrusive_ptr<CollieWork> work);
  /// A copy of the Works kept in flight (completing one may issue calls on this group: never under the lock).
  std::vector<c10::intrusive_ptr<CollieWork>> inFlightNow();
  /// Sends and receives `sendBytes[p]`/`recvBytes[p]` bytes to/from every peer p as one collie group (self: memcpy).
  void exchange(CollieWork& work, const char* send, const std::vector<size_t>& sendOff,
                const std::vector<size_t>& sendBytes, char* recv, const std::vector<size_t>& recvOff,
                const std::vector<size_t>& recvBytes);
  void checkRank(int64_t rank, const char* what) const;
  /// Whether a call made now on this thread joins the open coalescing block (not from callbacks run inside it).
  bool inCoalescingBlock() const {
    return coalescingThread_.load() == std::this_thread::get_id() && IssueOrder::callbacksDepth() == coalescingDepth_;
  }
  /// Whether this thread runs callbacks inside its own open coalescing block (its calls would join the block).
  bool inCallbacksInsideBlock() const {
    return coalescingThread_.load() == std::this_thread::get_id() && IssueOrder::callbacksDepth() > coalescingDepth_;
  }
  /// What a rank sends itself in an all-to-all must be what it receives from itself.
  void checkSelfExchange(const std::vector<size_t>& sendBytes, const std::vector<size_t>& recvBytes) const;

  std::unique_ptr<Communicator> comm_;
  std::shared_ptr<FutureWaiter> waiter_;
  std::shared_ptr<IssueOrder> order_;
  std::shared_ptr<FailureReporter> reporter_;
  std::chrono::milliseconds timeout_;
  bool coalescing_ = false;                          // the coalescing thread's
  std::atomic<std::thread::id> coalescingThread_{};  // inside startCoalescing/endCoalescing; none outside
  size_t coalescingDepth_ = 0;  // the callbacks that thread ran when the block started (a block begun in callbacks)
  std::vector<c10::intrusive_ptr<CollieWork>> coalesced_;  // Works that thread issued since startCoalescing
  c10::intrusive_ptr<CollieWork> block_;                   // the open block's place (IssueOrder::openBlock)
  std::mutex inFlightMutex_;
  std::vector<c10::intrusive_ptr<CollieWork>> inFlight_;  // made, not known to be complete (handles may be gone)
};

/// Runs `fn` (which issues collie calls), turning a collie::Error into a RuntimeError naming the call (and the
/// lost ranks, when the group failed).
template <typename Fn>
void issueCollie(const char* name, FailureReporter* reporter, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    const bool groupFailed =
        e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout || e.code() == ErrorCode::SystemError;
    TORCH_CHECK(false, "collie ", name, ": ", groupFailed && reporter ? reporter->explain(e.what()) : e.what());
  }
}

}  // namespace collie::torchbackend
