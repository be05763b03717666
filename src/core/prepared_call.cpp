// The prepared path of a repeated blocking call, and when a call becomes the prepared one (see prepared_call.hpp).
#include "base/datatypes.hpp"
#include "core/communicator.hpp"
#include "core/cuda_plugin.hpp"
#include "core/group.hpp"

namespace collie::core {

bool CommImpl::runPrepared(const CallKey& key) {
  // A failed communicator, a call inside a group and a call of a sharing family (it takes its turn) take the general
  // path, which reports, defers or orders them.
  if (failCode_.load(std::memory_order_relaxed) != ErrorCode::Success || anyGroupOpen() ||
      share_->family->shared.load(std::memory_order_relaxed))
    return false;
  AbortCheck abortCheck{*this};
  if (!queue_.beginInline()) return false;  // async work is queued: the general path queues behind it
  ProgressQueue::InlineClaim claim{queue_};
  const std::vector<Job>* jobs = prepared_.take(key) ? planner_.repeat(key) : nullptr;
  if (!jobs) return false;
  execute(inlineOps_, execConfig_, jobs);
  return true;
}

void CommImpl::armPrepared(const OpDesc& op) {
  // Host buffers while no CUDA driver is loaded (checked last: it reads the loader's list under its lock); a
  // receive from any source names its peer only once matched.
  const bool eligible = op.stream == nullptr && !op.device && op.count > 0 && op.root != kAnySource &&
                        op.count * base::dataTypeSize(op.type) <= PreparedCall::kMaxBytes && !cuda::driverLoaded();
  if (eligible) {
    prepared_.arm(keyOf(op));
  } else {
    prepared_.forget();
  }
}

}  // namespace collie::core
