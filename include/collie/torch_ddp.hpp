// torch_ddp.hpp: DistributedDataParallel for LibTorch C++ programs (library collie_torch).
//
// PyTorch's C++ frontend has no DDP; this is one, on collie's GradientReducer (collie/ddp.hpp):
//
//   auto comm = collie::Communicator::createFromEnv();         // under collierun, torchrun, mpirun, srun
//   Net net;                                                    // any torch::nn::Module
//   collie::ddp::DistributedDataParallel ddp(net.ptr(), *comm);  // rank 0's parameters and buffers broadcast
//   torch::optim::Adam opt(net->parameters());                 // any optimizer
//   for (...) {
//     opt.zero_grad();
//     auto loss = torch::nll_loss(net->forward(x), y);         // each rank: its own shard of the batch
//     loss.backward();                                         // gradients are averaged over ranks when it returns
//     opt.step();
//   }
//
// How: a post hook on each parameter's gradient accumulator (as PyTorch's own reducer does) hands the
// accumulated gradient to the reducer, whose full buckets start their AllReduce while backward goes on; a
// callback queued on the autograd engine runs finalize() at the end of backward, so the averaged gradients are
// in param.grad() when backward() returns. Errors of the reduction (an unused parameter, a failed peer) are
// thrown from backward().
//
// Gradient accumulation: backward passes inside `auto guard = ddp.noSync();` only accumulate locally; the next
// backward outside it averages the accumulated gradients. CUDA parameters work too: their gradients are staged
// through the host buckets (copies), and gradientAsBucketView applies to CPU parameters only.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <collie/collie.hpp>
#include <collie/ddp.hpp>
#include <cstddef>
#include <memory>
#include <vector>

namespace collie::ddp {

/// DistributedDataParallel options.
struct DdpOptions {
  /// Bucket caps, gradientAsBucketView, findUnusedParameters, rebuildBuckets (broadcastParameters is ignored:
  /// the parameters and buffers are broadcast by the adapter when broadcastAtConstruction is set).
  ReducerOptions reducer;
  /// Broadcast every parameter and buffer from rank 0 at construction, so all ranks start from one model.
  bool broadcastAtConstruction = true;
};

/// Data-parallel training of one torch::nn::Module over the ranks of a communicator (file comment).
class DistributedDataParallel {
 public:
  /// Collective. Registers the module's parameters that require a gradient (in named_parameters() order) and
  /// hooks their gradient accumulators. The module and the communicator must outlive this object.
  DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Communicator& comm, DdpOptions options = {});
  /// Removes the hooks; with gradientAsBucketView, gradients that were bucket views become copies.
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  torch::nn::Module& module();
  /// The registered parameters, in registration order (index i is the reducer's parameter i).
  const std::vector<torch::Tensor>& parameters() const;

  /// With findUnusedParameters: call after forward with the outputs backward will start from; parameters
  /// that the outputs do not depend on are marked unused at once, so their buckets need not wait for
  /// finalize(). Optional: finalize() finds them otherwise. Does nothing under noSync().
  void prepareForBackward(const std::vector<torch::Tensor>& outputs);

  /// Gradient accumulation: while the guard lives, backward does not communicate.
  GradientReducer::NoSync noSync();
  /// Replaces the communication hook (hooks::fp16Compress(), hooks::bf16Compress(), or a user hook).
  void registerCommHook(CommHook hook);
  /// Broadcasts the module's buffers (BatchNorm statistics, ...) from rank 0. Collective.
  void syncBuffers();

  GradientReducer& reducer();
  ReducerStats stats() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace collie::ddp
