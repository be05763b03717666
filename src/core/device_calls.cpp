// A communicator's calls on device buffers (device_stager.hpp explains the staging): the stager, made on the first
// such call; a call staged alone (runDevice, and runAsync's device calls) or a group's batch staged in two passes;
// the callers' streams joined once a group is staged; on the progress thread, a batch's wait for its inputs (runBatch)
// and the release of its copy-backs (finishDevice).
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/errors.hpp"
#include "base/log.hpp"
#include "core/communicator.hpp"
#include "core/cuda_plugin.hpp"
#include "core/device_stager.hpp"

namespace collie::core {

// Under deviceMu_: the stager, made on first use on the call's GPU; a call on another GPU is refused.
DeviceStager& CommImpl::stagerFor(const OpDesc& op) {
  const CollieCudaPlugin& plugin = cuda::requirePlugin("a call on device buffers");
  if (!stager_) {
    stager_ = std::make_unique<DeviceStager>(plugin, op.deviceOrdinal >= 0 ? op.deviceOrdinal : boundDevice_);
    stagerDevice_ = stager_->device();
  } else if (op.deviceOrdinal >= 0 && op.deviceOrdinal != stager_->device()) {
    COLLIE_FAIL(ErrorCode::InvalidUsage, "%s on rank %d: the buffers are on GPU %d, but this communicator uses GPU %d",
                algorithms::collectiveName(op.coll), rank_, op.deviceOrdinal, stager_->device());
  }
  return *stager_;
}

// Under deviceMu_, after the call's turn (nothing staged waits on a turn that may not come): enqueues its copies.
void CommImpl::stageDevice(OpDesc& op) {
  DeviceStager& stager = stagerFor(op);
  try {
    op.staged = stager.stage(op, rank_, nranks_, op.stream, op.streamOrdered);
  } catch (const Error& e) {
    // This rank's part of the collective will not run: the communicator cannot be used any more.
    if (base::isFatal(e.code())) recordFailure(e.code(), e.what());
    throw;
  }
}

// stageDevice for the device calls of a batch that runs as one (a group's): every input first, then every output
// (DeviceStager::stageInput explains why); the callers' streams wait at the group's end (joinCallerStreams). On a
// failure the caller drops the batch, which releases what was staged.
void CommImpl::stageDeviceBatch(std::vector<OpDesc>& ops) {
  try {
    for (OpDesc& op : ops)
      if (op.device) op.staged = stagerFor(op).stageInput(op, rank_, nranks_, op.stream, op.streamOrdered);
    for (OpDesc& op : ops)
      if (op.staged) stager_->stageOutput(*op.staged);
  } catch (const Error& e) {
    if (base::isFatal(e.code())) recordFailure(e.code(), e.what());
    throw;
  }
  for (OpDesc& op : ops)
    if (op.staged) callerJoins_.push_back(op.staged);
}

void CommImpl::joinCallerStreams() {
  std::lock_guard<std::mutex> lock(deviceMu_);
  std::vector<std::shared_ptr<StagedOp>> joins;
  joins.swap(callerJoins_);
  std::optional<Error> first;
  for (const auto& staged : joins) {
    try {
      stager_->joinCaller(*staged);
    } catch (const Error& e) {
      if (!first) first = e;
    }
  }
  if (first) {
    recordFailure(first->code(), first->what());
    throw *first;
  }
}

// Calls on device buffers never run on the calling thread: they wait for the caller's stream.
void CommImpl::runDevice(OpDesc op) {
  const bool streamOrdered = op.streamOrdered;
  auto work = std::make_shared<WorkState>();
  {
    std::lock_guard<std::mutex> lock(deviceMu_);
    std::shared_ptr<void> turn = takeTurn();
    stageDevice(op);
    queue_.enqueue({std::move(op)}, work, std::move(turn));
  }
  if (streamOrdered) return;  // a C API call: it completes in stream order; failures come out asynchronously
  work->wait();
  if (work->code != ErrorCode::Success) throw Error(work->code, work->message);
}

void CommImpl::runBatch(std::vector<OpDesc>& ops) {
  if (failCode_.load() != ErrorCode::Success) throw Error(failCode_.load(), failureMessage());
  for (const OpDesc& op : ops) {
    if (!op.staged) continue;
    try {
      stager_->waitStaged(*op.staged, abort_);
    } catch (const Error& e) {
      // Peers waiting on this rank fail now rather than at their timeout; a sharing family's connections are closed
      // only by the call that holds its gate (otherwise that call's own failure will close them).
      std::unique_lock<FamilyGate> gate(share_->family->use, std::defer_lock);
      if (!share_->family->shared.load(std::memory_order_acquire) || gate.try_lock_for(timeout_)) {
        fail(e.code(), e.what());
      } else {
        recordFailure(e.code(), e.what());
        share_->family->recordFailure(e.code(), e.what());
      }
      throw;
    }
  }
  execute(ops, progressConfig_);
}

// On the progress thread, after runBatch succeeded or failed: lets every staged copy-back run, records a failure
// of a stream-ordered call on the communicator (its caller has returned already), and, for calls whose
// completion is their result in device memory, waits for the copy-back.
void CommImpl::finishDevice(std::vector<OpDesc>& ops, ErrorCode& code, std::string& message) {
  bool ordered = false;
  for (OpDesc& op : ops) {
    if (!op.staged) continue;
    DeviceStager::release(*op.staged);
    ordered = ordered || op.streamOrdered;
  }
  if (code != ErrorCode::Success && ordered && recordFailure(code, message))
    COLLIE_WARN(base::kLogColl, "%s rank %d: a call on device buffers failed: %s", name_.c_str(), rank_,
                message.c_str());
  if (code != ErrorCode::Success) return;
  for (OpDesc& op : ops) {
    if (!op.staged || !op.staged->waitCopyBack) continue;
    try {
      stager_->waitDone(*op.staged);
    } catch (const Error& e) {
      code = e.code();
      message = e.what();
      recordFailure(code, message);
      return;
    }
  }
}

}  // namespace collie::core
