// ProcessGroupCollie: rendezvous, the reductions, broadcast, the all-gathers, the barrier and the Works kept in
// flight (process_group_collie.hpp). The data-exchange calls (all-to-all, gather, scatter, send/recv) are in
// process_group_p2p.cpp.
#include "process_group_collie.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

#include "tensor_staging.hpp"

namespace collie::torchbackend {

namespace {

constexpr const char* kUniqueIdKey = "collie/unique_id";

void checkSingle(const std::vector<at::Tensor>& tensors, const char* what) {
  TORCH_CHECK(tensors.size() == 1, "collie ", what, ": takes exactly one tensor per call, got ", tensors.size());
}

}  // namespace

ProcessGroupCollie::ProcessGroupCollie(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                       std::chrono::milliseconds timeout)
    : COLLIE_C10D_BASE(rank, size),
      waiter_(std::make_shared<FutureWaiter>()),
      order_(std::make_shared<IssueOrder>(waiter_)),
      timeout_(timeout) {
  TORCH_CHECK(store, "collie: no c10d Store to rendezvous through");
  UniqueId id;
  issueCollie("init", reporter_.get(), [&] {
    if (rank == 0) {
      id = UniqueId::create();
      const std::string text = id.toString();
      store->set(kUniqueIdKey, std::vector<uint8_t>(text.begin(), text.end()));
    } else {
      const std::vector<uint8_t> text = store->get(kUniqueIdKey);  // blocks until rank 0 set it
      id = UniqueId::fromString(std::string(text.begin(), text.end()));
    }
    collie::Options options;
    options.timeout = timeout;
    options.name = "torch";
    options.connect = collie::ConnectMode::Eager;  // as gloo: a peer that cannot be reached fails init_process_group
    comm_ = Communicator::create(size, id, rank, options);
  });
  reporter_ = std::make_shared<FailureReporter>(store, rank, size, std::min(timeout, std::chrono::milliseconds(5000)));
}

ProcessGroupCollie::~ProcessGroupCollie() {
  // What is still held back goes now, in its order, and calls the callbacks still to run make go at once: nothing
  // can wait on a call that is never made. Then the FutureWaiter runs those callbacks.
  order_->close();
  waiter_->stop();
  std::vector<c10::intrusive_ptr<CollieWork>> inFlight;
  {
    std::lock_guard<std::mutex> lock(inFlightMutex_);
    inFlight.swap(inFlight_);
  }
  // Destroying the communicator waits for every call issued (each ends by the group's timeout at the latest), so
  // the Works' buffers stay alive until collie is done with them; then their outputs are written.
  comm_.reset();
  for (const auto& w : inFlight) w->complete();
}

c10::intrusive_ptr<CollieWork> ProcessGroupCollie::makeWork(c10d::OpType type, const char* name,
                                                            std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<CollieWork>(rank_, type, name, std::move(outputs), waiter_, order_, reporter_);
}

std::vector<c10::intrusive_ptr<CollieWork>> ProcessGroupCollie::inFlightNow() {
  std::lock_guard<std::mutex> lock(inFlightMutex_);
  return inFlight_;
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::issue(const c10::intrusive_ptr<CollieWork>& work, const char* name,
                                                      std::function<void()> calls) {
  TORCH_CHECK(!inCallbacksInsideBlock(), "collie ", name,
              ": made from future callbacks run inside a coalescing block (batch_isend_irecv) on its thread: it "
              "would join the block's collie group on this rank only");
  // Kept before it can be issued, so that a barrier issued next on another thread finds it.
  const bool grouped = inCoalescingBlock();
  if (grouped) {
    coalesced_.push_back(work);  // completed at endCoalescing
    work->setInOpenBlock(true);
  } else {
    kept(work);
  }
  try {
    order_->issue(
        work,
        [calls = std::move(calls)] {
          try {
            calls();
          } catch (const Error& e) {
            throw IssueFailed(e.what(), e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout ||
                                            e.code() == ErrorCode::SystemError);
          }
        },
        grouped);
  } catch (const IssueFailed& e) {
    TORCH_CHECK(false, "collie ", name, ": ", e.groupFailed ? reporter_->explain(e.what()) : e.what());
  }
  return work;
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::kept(c10::intrusive_ptr<CollieWork> work) {
  const std::vector<c10::intrusive_ptr<CollieWork>> kept = inFlightNow();
  // Polled outside the lock: completing a Work runs its post-processing (and, for a barrier, completes earlier
  // Works, whose future callbacks may issue calls on this group).
  for (const auto& w : kept) w->poll();
  std::lock_guard<std::mutex> lock(inFlightMutex_);
  inFlight_.erase(std::remove_if(inFlight_.begin(), inFlight_.end(), [](const auto& w) { return w->done(); }),
                  inFlight_.end());
  inFlight_.push_back(work);
  return work;
}

void ProcessGroupCollie::checkRank(int64_t rank, const char* what) const {
  TORCH_CHECK(rank >= 0 && rank < size_, "collie: ", what, " ", rank, " is not a rank of this group (size ", size_,
              ")");
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::broadcast(std::vector<at::Tensor>& tensors,
                                                          const c10d::BroadcastOptions& opts) {
  checkSingle(tensors, "broadcast");
  checkRank(opts.rootRank, "broadcast: root");
  auto work = makeWork(c10d::OpType::BROADCAST, "broadcast", tensors);
  Staged s = stageBytes(tensors[0], "broadcast: tensor");
  if (!s.contig.is_same(s.original)) work->then([s] { s.copyBack(); });
  const int root = static_cast<int>(opts.rootRank);
  return issue(work, "broadcast", [this, w = work.get(), s, root] {
    w->add(comm_->broadcastAsync(s.ptr(), s.ptr(), s.count, s.type, root));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::allreduce(std::vector<at::Tensor>& tensors,
                                                          const c10d::AllreduceOptions& opts) {
  checkSingle(tensors, "allreduce");
  checkCpuDense(tensors[0], "allreduce: tensor");
  const ReduceOp op = reductionFor(opts.reduceOp, tensors[0].scalar_type(), "allreduce");
  auto work = makeWork(c10d::OpType::ALLREDUCE, "allreduce", tensors);
  Staged s = stageTyped(tensors[0], "allreduce: tensor");
  const Reduction red = reductionWithFactor(opts.reduceOp, op, s);
  if (!s.contig.is_same(s.original)) work->then([s] { s.copyBack(); });
  return issue(work, "allreduce", [this, w = work.get(), s, red] {
    w->add(comm_->allReduceAsync(s.ptr(), s.ptr(), s.count, s.type, red));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                    const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "collie allreduce_coalesced: no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    checkCpuDense(tensors[i], "allreduce_coalesced: tensor " + std::to_string(i));
    TORCH_CHECK(tensors[i].scalar_type() == tensors[0].scalar_type(), "collie allreduce_coalesced: tensor ", i,
                " has dtype ", c10::toString(tensors[i].scalar_type()), ", tensor 0 has ",
                c10::toString(tensors[0].scalar_type()), " (all must have the same)");
  }
  const ReduceOp op = reductionFor(opts.reduceOp, tensors[0].scalar_type(), "allreduce_coalesced");
  auto work = makeWork(c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors);
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : tensors) flat.push_back(t.reshape({-1}));
  Staged s = stageTyped(at::cat(flat), "allreduce_coalesced: tensors");
  const Reduction red = reductionWithFactor(opts.reduceOp, op, s);
  work->then([s, tensors] {
    int64_t offset = 0;
    for (const at::Tensor& t : tensors) {
      const_cast<at::Tensor&>(t).copy_(s.contig.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  });
  return issue(work, "allreduce_coalesced", [this, w = work.get(), s, red] {
    w->add(comm_->allReduceAsync(s.ptr(), s.ptr(), s.count, s.type, red));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::reduce(std::vector<at::Tensor>& tensors,
                                                       const c10d::ReduceOptions& opts) {
  checkSingle(tensors, "reduce");
  checkRank(opts.rootRank, "reduce: root");
  checkCpuDense(tensors[0], "reduce: tensor");
  const ReduceOp op = reductionFor(opts.reduceOp, tensors[0].scalar_type(), "reduce");
  auto work = makeWork(c10d::OpType::REDUCE, "reduce", tensors);
  Staged s = stageTyped(tensors[0], "reduce: tensor");
  const Reduction red = reductionWithFactor(opts.reduceOp, op, s);
  const int root = static_cast<int>(opts.rootRank);
  if (rank_ == root && !s.contig.is_same(s.original)) work->then([s] { s.copyBack(); });
  return issue(work, "reduce", [this, w = work.get(), s, red, root] {
    w->add(comm_->reduceAsync(s.ptr(), s.ptr(), s.count, s.type, red, root));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllgatherOptions& opts) {
  checkSingle(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "collie allgather: takes one output list, got ", outputs.size());
  TORCH_CHECK(static_cast<int>(outputs[0].size()) == size_, "collie allgather: the output list has ", outputs[0].size(),
              " tensors, the group has ", size_, " ranks");
  Staged in = stageBytes(inputs[0], "allgather: input");
  checkSameLayout(outputs[0], inputs[0], "allgather: output");
  auto work = makeWork(c10d::OpType::ALLGATHER, "allgather", outputs[0]);
  at::Tensor flat = at::empty({static_cast<int64_t>(in.count) * size_}, at::kByte);
  std::vector<at::Tensor> outs = outputs[0];
  const size_t n = in.count;
  work->then([flat, outs, n, in]() mutable {
    for (size_t r = 0; r < outs.size(); ++r) copyFromBytes(flat.data_ptr<uint8_t>() + r * n, outs[r]);
  });
  return issue(work, "allgather", [this, w = work.get(), in, flat] {
    w->add(comm_->allGatherAsync(in.ptr(), flat.data_ptr(), in.count, DataType::Uint8));
  });
}

// One all-gather of `input` into `output` (the group size times as many elements): checked and staged, for
// _allgather_base and allgather_into_tensor_coalesced. `what` names the call and, coalesced, the pair.
ProcessGroupCollie::StagedPair ProcessGroupCollie::stageAllgather(at::Tensor& output, at::Tensor& input,
                                                                  const std::string& what) const {
  Staged in = stageBytes(input, what + ": input");
  Staged out = stageBytes(output, what + ": output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "collie ", what, ": output dtype ",
              c10::toString(output.scalar_type()), " differs from input dtype ", c10::toString(input.scalar_type()));
  TORCH_CHECK(output.numel() == input.numel() * size_, "collie ", what, ": output has ", output.numel(),
              " elements, expected input elements (", input.numel(), ") times the group size (", size_, ")");
  return {in, out, collie::ReduceOp::Sum};
}

std::function<void()> ProcessGroupCollie::allgatherCalls(CollieWork& work, const StagedPair& p) {
  work.then([p] { p.out.copyBack(); });
  return [this, w = &work, p] { w->add(comm_->allGatherAsync(p.in.ptr(), p.out.ptr(), p.in.count, DataType::Uint8)); };
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                const c10d::AllgatherOptions& opts) {
  const StagedPair p = stageAllgather(output, input, "_allgather_base");
  auto work = makeWork(c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output});
  return issue(work, "_allgather_base", allgatherCalls(*work, p));
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                                    std::vector<at::Tensor>& inputs,
                                                                    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_, "collie allgather_coalesced: ", outputLists.size(),
              " output lists, the group has ", size_, " ranks");
  size_t total = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuDense(inputs[i], "allgather_coalesced: input " + std::to_string(i));
    total += byteSize(inputs[i]);
  }
  std::vector<at::Tensor> flatOutputs;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK(outputLists[r].size() == inputs.size(), "collie allgather_coalesced: output list ", r, " has ",
                outputLists[r].size(), " tensors, there are ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); ++i) {
      checkSameLayout({outputLists[r][i]}, inputs[i], "allgather_coalesced: output list " + std::to_string(r));
      flatOutputs.push_back(outputLists[r][i]);
    }
  }
  at::Tensor send = at::empty({static_cast<int64_t>(total)}, at::kByte);
  size_t offset = 0;
  for (const at::Tensor& t : inputs) {
    copyToBytes(t, send.data_ptr<uint8_t>() + offset);
    offset += byteSize(t);
  }
  at::Tensor recv = at::empty({static_cast<int64_t>(total) * size_}, at::kByte);
  auto work = makeWork(c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", flatOutputs);
  work->then([send, recv, flatOutputs]() mutable {
    size_t at = 0;
    for (at::Tensor& t : flatOutputs) {
      copyFromBytes(recv.data_ptr<uint8_t>() + at, t);
      at += byteSize(t);
    }
  });
  return issue(work, "allgather_coalesced", [this, w = work.get(), send, recv, total] {
    w->add(comm_->allGatherAsync(send.data_ptr(), recv.data_ptr(), total, DataType::Uint8));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                               std::vector<std::vector<at::Tensor>>& inputs,
                                                               const c10d::ReduceScatterOptions& opts) {
  checkSingle(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1, "collie reduce_scatter: takes one input list, got ", inputs.size());
  TORCH_CHECK(static_cast<int>(inputs[0].size()) == size_, "collie reduce_scatter: the input list has ",
              inputs[0].size(), " tensors, the group has ", size_, " ranks");
  checkCpuDense(outputs[0], "reduce_scatter: output");
  checkSameLayout(inputs[0], outputs[0], "reduce_scatter: input");
  const ReduceOp op = reductionFor(opts.reduceOp, outputs[0].scalar_type(), "reduce_scatter");
  std::vector<at::Tensor> flat;
  for (const at::Tensor& t : inputs[0]) flat.push_back(t.reshape({-1}));
  Staged in = stageTyped(at::cat(flat), "reduce_scatter: input");
  Staged out = stageTyped(outputs[0], "reduce_scatter: output");
  const Reduction red = reductionWithFactor(opts.reduceOp, op, in);
  auto work = makeWork(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs);
  work->then([in, out] { out.copyBack(); });
  return issue(work, "reduce_scatter", [this, w = work.get(), in, out, red] {
    w->add(comm_->reduceScatterAsync(in.ptr(), out.ptr(), out.count, out.type, red));
  });
}

// One reduce-scatter of `input` (the group size times as many elements) into `output`: checked and staged, for
// _reduce_scatter_base and reduce_scatter_tensor_coalesced.
ProcessGroupCollie::StagedPair ProcessGroupCollie::stageReduceScatter(at::Tensor& output, at::Tensor& input,
                                                                      const c10d::ReduceOp& reduceOp,
                                                                      const std::string& what) const {
  checkCpuDense(input, what + ": input");
  checkCpuDense(output, what + ": output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "collie ", what, ": output dtype ",
              c10::toString(output.scalar_type()), " differs from input dtype ", c10::toString(input.scalar_type()));
  TORCH_CHECK(input.numel() == output.numel() * size_, "collie ", what, ": input has ", input.numel(),
              " elements, expected output elements (", output.numel(), ") times the group size (", size_, ")");
  const ReduceOp op = reductionFor(reduceOp, output.scalar_type(), what);
  Staged in = stageTyped(input, what + ": input");
  const Reduction red = reductionWithFactor(reduceOp, op, in);
  return {std::move(in), stageTyped(output, what + ": output"), red};
}

std::function<void()> ProcessGroupCollie::reduceScatterCalls(CollieWork& work, const StagedPair& p) {
  work.then([p] { p.out.copyBack(); });
  return [this, w = &work, p] {
    w->add(comm_->reduceScatterAsync(p.in.ptr(), p.out.ptr(), p.out.count, p.out.type, p.op));
  };
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                     const c10d::ReduceScatterOptions& opts) {
  const StagedPair p = stageReduceScatter(output, input, opts.reduceOp, "_reduce_scatter_base");
  auto work = makeWork(c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output});
  return issue(work, "_reduce_scatter_base", reduceScatterCalls(*work, p));
}

#if TORCH_VERSION_MAJOR >= 2
// torch 2.x's coalescing manager: one Work for several all-gathers (or reduce-scatters), every pair checked and
// staged before any is issued.
ProcessGroupCollie::WorkPtr ProcessGroupCollie::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                std::vector<at::Tensor>& inputs,
                                                                                const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "collie allgather_into_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  std::vector<StagedPair> pairs;
  for (size_t i = 0; i < inputs.size(); ++i)
    pairs.push_back(stageAllgather(outputs[i], inputs[i], "allgather_into_tensor_coalesced #" + std::to_string(i)));
  auto work = makeWork(c10d::OpType::COALESCED, "allgather_into_tensor_coalesced", outputs);
  std::vector<std::function<void()>> calls;
  for (const StagedPair& p : pairs) calls.push_back(allgatherCalls(*work, p));
  return issue(work, "allgather_into_tensor_coalesced", [calls] {
    for (const auto& c : calls) c();
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(), "collie reduce_scatter_tensor_coalesced: ", outputs.size(),
              " outputs for ", inputs.size(), " inputs");
  std::vector<StagedPair> pairs;
  for (size_t i = 0; i < inputs.size(); ++i)
    pairs.push_back(stageReduceScatter(outputs[i], inputs[i], opts.reduceOp,
                                       "reduce_scatter_tensor_coalesced #" + std::to_string(i)));
  auto work = makeWork(c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced", outputs);
  std::vector<std::function<void()>> calls;
  for (const StagedPair& p : pairs) calls.push_back(reduceScatterCalls(*work, p));
  return issue(work, "reduce_scatter_tensor_coalesced", [calls] {
    for (const auto& c : calls) c();
  });
}
#endif

ProcessGroupCollie::WorkPtr ProcessGroupCollie::barrier(const c10d::BarrierOptions& opts) {
  auto work = makeWork(c10d::OpType::BARRIER, "barrier", {});
  at::Tensor token = at::zeros({1}, at::kByte);  // a 1-byte all-reduce: done once every rank has called barrier
  // collie runs a communicator's calls in order: the ones that reached it before the barrier are done too, and
  // their post-processing runs now (outputs written), whether or not their handles were kept. Those are known when
  // the barrier itself reaches collie (IssueOrder may hold it, or hold others back past it).
  auto earlier = std::make_shared<std::vector<c10::intrusive_ptr<CollieWork>>>();
  work->then([token, earlier, barrier = work.get()] {
    for (const auto& w : *earlier)
      if (w->issueSeq() != 0 && w->issueSeq() < barrier->issueSeq()) w->complete();
  });
  return issue(work, "barrier", [this, w = work.get(), token, earlier] {
    *earlier = inFlightNow();
    w->add(comm_->allReduceAsync(token.data_ptr(), token.data_ptr(), 1, DataType::Uint8, ReduceOp::Max));
  });
}

}  // namespace collie::torchbackend
