// The LibTorch adapter of the GradientReducer (include/collie/torch_ddp.hpp). The only translation unit of
// collie that includes LibTorch headers; built into collie_torch when COLLIE_WITH_TORCH.
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <collie/torch_ddp.hpp>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>

namespace collie::ddp {

namespace {

DataType toCollie(c10::ScalarType t, const std::string& what) {
  switch (t) {
    case c10::ScalarType::Float:
      return DataType::Float32;
    case c10::ScalarType::Double:
      return DataType::Float64;
    case c10::ScalarType::Half:
      return DataType::Float16;
    case c10::ScalarType::BFloat16:
      return DataType::Bfloat16;
    case c10::ScalarType::Int:
      return DataType::Int32;
    case c10::ScalarType::Long:
      return DataType::Int64;
    case c10::ScalarType::Char:
      return DataType::Int8;
    case c10::ScalarType::Byte:
    case c10::ScalarType::Bool:
      return DataType::Uint8;
    default:
      throw Error(ErrorCode::InvalidArgument,
                  "collie DDP: " + what + " has element type " + std::string(c10::toString(t)) + ", not supported");
  }
}

Device toCollie(const c10::Device& d) {
  if (d.is_cpu()) return Device{DeviceType::Cpu, -1};
  if (d.is_cuda()) return Device{DeviceType::Cuda, d.index()};
  throw Error(ErrorCode::InvalidArgument, "collie DDP: tensors on " + d.str() + " are not supported (cpu, cuda)");
}

// Broadcasts tensors from rank 0: CPU contiguous tensors in place, others through a CPU copy.
void broadcastTensors(Communicator& comm, const std::vector<torch::Tensor>& tensors,
                      const std::vector<std::string>& names) {
  torch::NoGradGuard noGrad;
  std::vector<torch::Tensor> staged;  // host tensors that are broadcast, one per input
  std::vector<HostBuffer> bufs;
  for (size_t k = 0; k < tensors.size(); ++k) {
    const torch::Tensor& t = tensors[k];
    if (!t.defined() || t.numel() == 0) continue;
    torch::Tensor h = (t.device().is_cpu() && t.is_contiguous()) ? t : t.to(torch::kCPU).contiguous();
    staged.push_back(h);
    bufs.push_back({h.data_ptr(), static_cast<size_t>(h.numel()), toCollie(h.scalar_type(), names[k])});
  }
  broadcastCoalesced(comm, bufs, 0);
  size_t j = 0;
  for (const torch::Tensor& t : tensors) {
    if (!t.defined() || t.numel() == 0) continue;
    const torch::Tensor& h = staged[j++];
    if (!h.is_same(t)) const_cast<torch::Tensor&>(t).copy_(h);
  }
}

}  // namespace

struct DistributedDataParallel::State {
  std::shared_ptr<torch::nn::Module> module;
  Communicator* comm = nullptr;
  DdpOptions options;
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;  // kept alive, as PyTorch's reducer does
  std::vector<uintptr_t> hookKeys;
  std::unique_ptr<GradientReducer> reducer;

  std::mutex mu;                     // hooks may run on several autograd threads (one per device)
  bool callbackQueued = false;       // finalize is queued for the running backward
  std::vector<bool> staged;          // gradient went through a copy into the bucket: copy the average back
  std::vector<torch::Tensor> views;  // bucket views, for layoutVersion viewVersion
  uint64_t viewVersion = ~uint64_t{0};

  bool bucketViewParam(size_t i) const { return options.reducer.gradientAsBucketView && params[i].device().is_cpu(); }

  const torch::Tensor& view(size_t i) {
    uint64_t v = reducer->layoutVersion();
    if (v != viewVersion) {
      views.assign(params.size(), torch::Tensor());
      viewVersion = v;
    }
    if (!views[i].defined())
      views[i] = torch::from_blob(reducer->bucketView(i), params[i].sizes(),
                                  torch::TensorOptions().dtype(params[i].scalar_type()).device(torch::kCPU));
    return views[i];
  }

  // Post hook of parameter i's gradient accumulator: the gradient is accumulated.
  void onGradient(size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!reducer->requireSync()) return;  // noSync: accumulate locally
    torch::Tensor& g = params[i].mutable_grad();
    if (!callbackQueued) {
      callbackQueued = true;
      std::weak_ptr<State> weak = self;
      torch::autograd::Engine::get_default_engine().queue_callback([weak] {
        if (auto s = weak.lock()) s->finalizeBackward();
      });
    }
    if (!g.defined()) {
      // The accumulator ran without a gradient (a function gave none for this input). As PyTorch's reducer: zeros
      // in the bucket; with find-unused, not locally used (a parameter no rank used keeps its gradient).
      if (options.reducer.findUnusedParameters) {
        reducer->markUnused(i, nullptr);
      } else {
        view(i).zero_();
        staged[i] = true;
        reducer->markReady(i);
      }
      return;
    }
    TORCH_CHECK(!g.is_sparse(), "collie DDP: sparse gradients are not supported (", names[i], ")");
    const torch::Tensor& v = view(i);
    if (g.device().is_cpu() && g.is_contiguous() && g.scalar_type() == params[i].scalar_type()) {
      staged[i] = false;
      reducer->markReady(i, g.data_ptr());  // no copy when g already is the bucket view
    } else {
      v.copy_(g);  // CUDA or strided gradients: staged through the bucket
      staged[i] = true;
      reducer->markReady(i);
    }
  }

  // At the end of backward (engine callback): wait, average, write back.
  void finalizeBackward() {
    std::lock_guard<std::mutex> lock(mu);
    callbackQueued = false;
    reducer->finalize();
    const bool findUnused = options.reducer.findUnusedParameters;
    torch::NoGradGuard noGrad;
    for (size_t i = 0; i < params.size(); ++i) {
      if (findUnused && !reducer->globallyUsed(i)) continue;  // no rank used it: its gradient stays as it was
      torch::Tensor& g = params[i].mutable_grad();
      const torch::Tensor& v = view(i);
      const bool local = !findUnused || reducer->locallyUsed(i);
      if (bucketViewParam(i)) {
        if (!g.defined() || g.data_ptr() != v.data_ptr()) g = v;  // from now on the gradient is the bucket
      } else if (!local || staged[i]) {
        if (g.defined())
          g.copy_(v);
        else  // no gradient reached it on this rank
          g = v.to(params[i].device(), /*non_blocking=*/false, /*copy=*/true);
      }
    }
  }

  std::weak_ptr<State> self;
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<torch::nn::Module> module, Communicator& comm,
                                                 DdpOptions options)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.self = state_;
  s.module = std::move(module);
  s.comm = &comm;
  s.options = options;
  if (!s.module) throw Error(ErrorCode::InvalidArgument, "collie DDP: null module");

  if (options.broadcastAtConstruction) {
    std::vector<torch::Tensor> all;
    std::vector<std::string> names;
    for (const auto& item : s.module->named_parameters(true)) {
      all.push_back(item.value());
      names.push_back("parameter " + item.key());
    }
    for (const auto& item : s.module->named_buffers(true)) {
      all.push_back(item.value());
      names.push_back("buffer " + item.key());
    }
    broadcastTensors(comm, all, names);
  }

  std::vector<Parameter> reg;
  for (const auto& item : s.module->named_parameters(true)) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad()) continue;
    s.params.push_back(p);
    s.names.push_back(item.key());
    reg.push_back(Parameter{item.key(), static_cast<size_t>(p.numel()), toCollie(p.scalar_type(), item.key()),
                            toCollie(p.device()), nullptr});
  }
  ReducerOptions ro = options.reducer;
  ro.broadcastParameters = false;
  s.reducer = std::make_unique<GradientReducer>(comm, std::move(reg), ro);
  s.staged.assign(s.params.size(), false);

  std::weak_ptr<State> weak = state_;
  for (size_t i = 0; i < s.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    TORCH_CHECK(acc, "collie DDP: parameter ", s.names[i], " has no gradient accumulator");
    uintptr_t key = acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [weak, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (auto st = weak.lock()) st->onGradient(i);
          return outputs;
        }));
    s.accumulators.push_back(std::move(acc));
    s.hookKeys.push_back(key);
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  State& s = *state_;
  for (size_t i = 0; i < s.accumulators.size(); ++i) s.accumulators[i]->del_post_hook(s.hookKeys[i]);
  if (s.options.reducer.gradientAsBucketView) {  // the buckets go away with the reducer
    torch::NoGradGuard noGrad;
    for (size_t i = 0; i < s.params.size(); ++i) {
      torch::Tensor& g = s.params[i].mutable_grad();
      if (g.defined() && g.device().is_cpu() && g.data_ptr() == s.reducer->bucketView(i)) g = g.clone();
    }
  }
}

torch::nn::Module& DistributedDataParallel::module() { return *state_->module; }
const std::vector<torch::Tensor>& DistributedDataParallel::parameters() const { return state_->params; }

void DistributedDataParallel::prepareForBackward(const std::vector<torch::Tensor>& outputs) {
  State& s = *state_;
  if (!s.options.reducer.findUnusedParameters || !s.reducer->requireSync()) return;
  std::unordered_set<const torch::autograd::Node*> seen;
  std::vector<const torch::autograd::Node*> stack;
  for (const torch::Tensor& t : outputs)
    if (t.defined() && t.grad_fn()) stack.push_back(t.grad_fn().get());
  while (!stack.empty()) {
    const torch::autograd::Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    for (const auto& e : n->next_edges())
      if (e.function && !seen.count(e.function.get())) stack.push_back(e.function.get());
  }
  size_t unused = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    for (size_t i = 0; i < s.params.size(); ++i)
      if (!seen.count(s.accumulators[i].get())) {
        s.reducer->markUnused(i, nullptr);
        ++unused;
      }
  }
  // No parameter will see a gradient, so no hook will queue the end of the iteration: end it now (the other ranks
  // end theirs after backward; the collectives are the same).
  if (unused == s.params.size() && unused > 0) s.finalizeBackward();
}

GradientReducer::NoSync DistributedDataParallel::noSync() { return state_->reducer->noSync(); }
void DistributedDataParallel::registerCommHook(CommHook hook) { state_->reducer->registerCommHook(std::move(hook)); }

void DistributedDataParallel::syncBuffers() {
  std::vector<torch::Tensor> bufs;
  std::vector<std::string> names;
  for (const auto& item : state_->module->named_buffers(true)) {
    bufs.push_back(item.value());
    names.push_back("buffer " + item.key());
  }
  broadcastTensors(*state_->comm, bufs, names);
}

GradientReducer& DistributedDataParallel::reducer() { return *state_->reducer; }
ReducerStats DistributedDataParallel::stats() const { return state_->reducer->stats(); }

}  // namespace collie::ddp
