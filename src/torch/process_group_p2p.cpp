// ProcessGroupCollie: the calls that exchange data between pairs of ranks (process_group_collie.hpp):
// all-to-all with even splits on collie's AllToAll, uneven splits and lists as one collie group of sends and
// receives (collie::groupStart/groupEndAsync, so that every pair exchanges at once, never in a cycle that waits,
// and the call returns before they are done), gather
// and scatter as sends to / receives at the root, send and recv (from any source: collie's recvAnyAsync, whose
// Work names the sender for sourceRank()), and batch_isend_irecv's coalescing as a collie group.
#include <c10/util/Exception.h>

#include <cstring>

#include "process_group_collie.hpp"
#include "tensor_staging.hpp"

namespace collie::torchbackend {

namespace {

// Byte offsets and lengths of the pieces of `t` split along dim 0 by `splits` (empty: equal pieces).
void splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int size, const char* what,
                std::vector<size_t>& offsets, std::vector<size_t>& lengths) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const size_t rowBytes = rows == 0 ? 0 : byteSize(t) / static_cast<size_t>(rows);
  offsets.assign(size, 0);
  lengths.assign(size, 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % size == 0, "collie alltoall_base: ", what, " dim 0 (", rows,
                ") is not divisible by the group size (", size, ")");
    for (int p = 0; p < size; ++p) lengths[p] = rowBytes * static_cast<size_t>(rows / size);
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == size, "collie alltoall_base: ", splits.size(), " ", what,
                " split sizes for a group of ", size);
    int64_t sum = 0;
    for (int p = 0; p < size; ++p) {
      TORCH_CHECK(splits[p] >= 0, "collie alltoall_base: negative ", what, " split size ", splits[p]);
      lengths[p] = rowBytes * static_cast<size_t>(splits[p]);
      sum += splits[p];
    }
    TORCH_CHECK(sum == rows, "collie alltoall_base: ", what, " split sizes add up to ", sum, ", dim 0 is ", rows);
  }
  size_t at = 0;
  for (int p = 0; p < size; ++p) {
    offsets[p] = at;
    at += lengths[p];
  }
}

}  // namespace

void ProcessGroupCollie::checkSelfExchange(const std::vector<size_t>& sendBytes,
                                           const std::vector<size_t>& recvBytes) const {
  TORCH_CHECK(sendBytes[rank_] == recvBytes[rank_], "collie alltoall: this rank sends itself ", sendBytes[rank_],
              " bytes but expects ", recvBytes[rank_]);
}

void ProcessGroupCollie::exchange(CollieWork& work, const char* send, const std::vector<size_t>& sendOff,
                                  const std::vector<size_t>& sendBytes, char* recv, const std::vector<size_t>& recvOff,
                                  const std::vector<size_t>& recvBytes) {
  if (sendBytes[rank_] > 0) std::memcpy(recv + recvOff[rank_], send + sendOff[rank_], sendBytes[rank_]);
  groupStart();
  try {
    for (int k = 1; k < size_; ++k) {  // each rank starts with its next neighbour: pairs spread over the ring
      const int to = (rank_ + k) % size_;
      const int from = (rank_ - k + size_) % size_;
      if (sendBytes[to] > 0) work.add(comm_->sendAsync(send + sendOff[to], sendBytes[to], DataType::Uint8, to));
      if (recvBytes[from] > 0) work.add(comm_->recvAsync(recv + recvOff[from], recvBytes[from], DataType::Uint8, from));
    }
  } catch (const std::exception& e) {
    // Nothing of the group is issued (a collie call that threw failed it already): peers see no partial exchange.
    groupFail(ErrorCode::InternalError, e.what());
    try {
      groupEnd();
    } catch (const Error&) {  // the refusal, which says no more than e
    }
    work.failWith(e.what(), true);
    return;
  }
  try {
    groupEndAsync();  // the Works added above complete with the group, as an async_op=True caller expects
  } catch (const Error& e) {
    work.failWith(e.what(), true);
  }
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                              std::vector<int64_t>& outputSplits,
                                                              std::vector<int64_t>& inputSplits,
                                                              const c10d::AllToAllOptions& opts) {
  Staged in = stageBytes(input, "alltoall_base: input");
  Staged out = stageBytes(output, "alltoall_base: output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "collie alltoall_base: output dtype ",
              c10::toString(output.scalar_type()), " differs from input dtype ", c10::toString(input.scalar_type()));
  auto work = makeWork(c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output});
  if (outputSplits.empty() && inputSplits.empty()) {
    TORCH_CHECK(in.count == out.count, "collie alltoall_base: input has ", input.numel(), " elements, output ",
                output.numel(), " (even splits need equal sizes)");
    TORCH_CHECK(in.count % size_ == 0, "collie alltoall_base: ", input.numel(), " elements do not split evenly over ",
                size_, " ranks");
    work->then([in, out] { out.copyBack(); });
    return issue(work, "alltoall_base", [this, w = work.get(), in, out] {
      w->add(comm_->allToAllAsync(in.ptr(), out.ptr(), in.count / size_, DataType::Uint8));
    });
  }
  std::vector<size_t> sendOff, sendLen, recvOff, recvLen;
  splitBytes(in.contig, inputSplits, size_, "input", sendOff, sendLen);
  splitBytes(out.contig, outputSplits, size_, "output", recvOff, recvLen);
  checkSelfExchange(sendLen, recvLen);
  work->then([in, out] { out.copyBack(); });
  return issue(work, "alltoall_base", [=, this, w = work.get()] {
    exchange(*w, static_cast<const char*>(in.ptr()), sendOff, sendLen, static_cast<char*>(out.ptr()), recvOff, recvLen);
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::alltoall(std::vector<at::Tensor>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "collie alltoall: ", inputs.size(), " inputs and ", outputs.size(), " outputs for a group of ", size_);
  std::vector<size_t> sendOff(size_), sendLen(size_), recvOff(size_), recvLen(size_);
  size_t sendTotal = 0, recvTotal = 0;
  for (int p = 0; p < size_; ++p) {
    checkCpuDense(inputs[p], "alltoall: input " + std::to_string(p));
    checkCpuDense(outputs[p], "alltoall: output " + std::to_string(p));
    TORCH_CHECK(
        inputs[p].scalar_type() == inputs[0].scalar_type() && outputs[p].scalar_type() == inputs[0].scalar_type(),
        "collie alltoall: every input and output must have dtype ", c10::toString(inputs[0].scalar_type()));
    sendOff[p] = sendTotal;
    sendLen[p] = byteSize(inputs[p]);
    sendTotal += sendLen[p];
    recvOff[p] = recvTotal;
    recvLen[p] = byteSize(outputs[p]);
    recvTotal += recvLen[p];
  }
  at::Tensor send = at::empty({static_cast<int64_t>(sendTotal)}, at::kByte);
  at::Tensor recv = at::empty({static_cast<int64_t>(recvTotal)}, at::kByte);
  for (int p = 0; p < size_; ++p) copyToBytes(inputs[p], send.data_ptr<uint8_t>() + sendOff[p]);
  checkSelfExchange(sendLen, recvLen);
  auto work = makeWork(c10d::OpType::ALLTOALL, "alltoall", outputs);
  std::vector<at::Tensor> outs = outputs;
  work->then([send, recv, recvOff, outs]() mutable {
    for (size_t p = 0; p < outs.size(); ++p) copyFromBytes(recv.data_ptr<uint8_t>() + recvOff[p], outs[p]);
  });
  return issue(work, "alltoall", [=, this, w = work.get()] {
    exchange(*w, static_cast<const char*>(send.data_ptr()), sendOff, sendLen, static_cast<char*>(recv.data_ptr()),
             recvOff, recvLen);
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                       std::vector<at::Tensor>& inputs,
                                                       const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "collie gather: takes exactly one input tensor, got ", inputs.size());
  checkRank(opts.rootRank, "gather: root");
  const int root = static_cast<int>(opts.rootRank);
  Staged in = stageBytes(inputs[0], "gather: input");
  if (rank_ != root) {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()), "collie gather: only the root (rank ",
                root, ") takes output tensors");
    auto work = makeWork(c10d::OpType::GATHER, "gather", {});
    work->then([in] {});
    return issue(work, "gather", [this, w = work.get(), in, root] {
      w->add(comm_->sendAsync(in.ptr(), in.count, DataType::Uint8, root));
    });
  }
  TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
              "collie gather: the root needs one list of ", size_, " output tensors");
  checkSameLayout(outputs[0], inputs[0], "gather: output");
  auto work = makeWork(c10d::OpType::GATHER, "gather", outputs[0]);
  outputs[0][root].copy_(inputs[0]);
  std::vector<Staged> outs(size_);  // outs[root] is not used
  for (int p = 0; p < size_; ++p)
    if (p != root) outs[p] = stageBytes(outputs[0][p], "gather: output");
  work->then([outs, root] {
    for (size_t p = 0; p < outs.size(); ++p)
      if (static_cast<int>(p) != root) outs[p].copyBack();
  });
  return issue(work, "gather", [this, w = work.get(), outs, root] {
    for (int p = 0; p < size_; ++p)
      if (p != root) w->add(comm_->recvAsync(outs[p].ptr(), outs[p].count, DataType::Uint8, p));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::scatter(std::vector<at::Tensor>& outputs,
                                                        std::vector<std::vector<at::Tensor>>& inputs,
                                                        const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "collie scatter: takes exactly one output tensor, got ", outputs.size());
  checkRank(opts.rootRank, "scatter: root");
  const int root = static_cast<int>(opts.rootRank);
  Staged out = stageBytes(outputs[0], "scatter: output");
  auto work = makeWork(c10d::OpType::SCATTER, "scatter", outputs);
  if (rank_ != root) {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()), "collie scatter: only the root (rank ",
                root, ") takes input tensors");
    work->then([out] { out.copyBack(); });
    return issue(work, "scatter", [this, w = work.get(), out, root] {
      w->add(comm_->recvAsync(out.ptr(), out.count, DataType::Uint8, root));
    });
  }
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "collie scatter: the root needs one list of ", size_, " input tensors");
  checkSameLayout(inputs[0], outputs[0], "scatter: input");
  std::vector<Staged> ins(size_);  // ins[root] is not used
  for (int p = 0; p < size_; ++p)
    if (p != root) ins[p] = stageBytes(inputs[0][p], "scatter: input");
  outputs[0].copy_(inputs[0][root]);
  work->then([ins] {});
  return issue(work, "scatter", [this, w = work.get(), ins, root] {
    for (int p = 0; p < size_; ++p)
      if (p != root) w->add(comm_->sendAsync(ins[p].ptr(), ins[p].count, DataType::Uint8, p));
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "collie send: takes exactly one tensor, got ", tensors.size());
  checkRank(dstRank, "send: destination");
  Staged s = stageBytes(tensors[0], "send: tensor");
  auto work = makeWork(c10d::OpType::SEND, "send", {});
  work->then([s] {});
  return issue(work, "send", [this, w = work.get(), s, dstRank] {
    w->add(comm_->sendAsync(s.ptr(), s.count, DataType::Uint8, dstRank));  // in a block: done with its group
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "collie recv: takes exactly one tensor, got ", tensors.size());
  checkRank(srcRank, "recv: source");
  Staged s = stageBytes(tensors[0], "recv: tensor");
  auto work = makeWork(c10d::OpType::RECV, "recv", tensors);
  work->then([s] { s.copyBack(); });
  return issue(work, "recv", [this, w = work.get(), s, srcRank] {
    w->add(comm_->recvAsync(s.ptr(), s.count, DataType::Uint8, srcRank));  // in a block: done with its group
  });
}

ProcessGroupCollie::WorkPtr ProcessGroupCollie::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  TORCH_CHECK(tensors.size() == 1, "collie recv: takes exactly one tensor, got ", tensors.size());
  TORCH_CHECK(!inCoalescingBlock(),
              "collie recv: a receive from any source cannot be part of batch_isend_irecv (name src)");
  Staged s = stageBytes(tensors[0], "recv: tensor");
  auto work = makeWork(c10d::OpType::RECVANYSOURCE, "recv", tensors);
  work->then([s] { s.copyBack(); });
  return issue(work, "recv", [this, w = work.get(), s] {
    collie::Work h = comm_->recvAnyAsync(s.ptr(), s.count, DataType::Uint8);
    w->add(h);
    w->setSourceOf(h);
  });
}

void ProcessGroupCollie::startCoalescing() {
  TORCH_CHECK(coalescingThread_.load() != std::this_thread::get_id(),
              "collie: startCoalescing inside a coalescing block");
  // The block's calls form one collie group, made on this thread as they come and reaching collie at its end; the
  // block holds its place in the order of calls meanwhile (calls placed after it wait; another thread's block too).
  auto block = makeWork(c10d::OpType::UNKNOWN, "coalesced", {});
  order_->openBlock(block);
  TORCH_CHECK(!coalescing_, "collie: startCoalescing while another thread's block is open");
  block_ = std::move(block);
  groupStart();
  coalescing_ = true;
  coalescingDepth_ = IssueOrder::callbacksDepth();
  coalescingThread_ = std::this_thread::get_id();
}

#if COLLIE_C10D_END_COALESCING_RETURNS_WORK
ProcessGroupCollie::WorkPtr ProcessGroupCollie::endCoalescing() {
#else
void ProcessGroupCollie::endCoalescing(std::vector<WorkPtr>& reqs) {
#endif
  TORCH_CHECK(coalescing_, "collie: endCoalescing without startCoalescing");
  coalescing_ = false;
  coalescingThread_ = std::thread::id();
  std::vector<c10::intrusive_ptr<CollieWork>> works;
  works.swap(coalesced_);
  // The block's group goes to collie under IssueOrder, as any call (no other thread's call reaches collie while it
  // is made), then the block's place closes. Every call that reached collie before it is done once the group is
  // (collie keeps call order), collectives issued inside the block included (torch 2.x's coalescing manager issues
  // its allreduce_coalesced there, then waits on the Work returned here only): their outputs are written now, not
  // at the group's next call. Calls made since, or held back still, are not.
  c10::intrusive_ptr<CollieWork> all = std::move(block_);
  std::string error;
  bool groupFailed = false;
  order_->issue(
      all,
      [&] {
        try {
          groupEndAsync();
        } catch (const Error& e) {
          error = e.what();
          groupFailed = e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout ||
                        e.code() == ErrorCode::SystemError;
        } catch (const std::exception& e) {
          error = e.what();
        }
      },
      true);
  order_->closeBlock(all.get());
  if (groupFailed) error = reporter_->explain(error);
  for (auto& w : works) {
    w->setInOpenBlock(false);
    if (!error.empty()) w->failWith(error);
    try {
      w->wait();  // the block's sends and receives, done with its group
    } catch (const std::exception& e) {
      if (error.empty()) error = e.what();
    }
  }
  for (const auto& w : inFlightNow())
    if (w->issueSeq() != 0 && w->issueSeq() < all->issueSeq()) w->complete();
  if (!error.empty()) all->failWith(error);
  all->complete();
#if COLLIE_C10D_END_COALESCING_RETURNS_WORK
  return all;
#endif
}

}  // namespace collie::torchbackend
