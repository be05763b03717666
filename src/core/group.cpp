// Groups (collieGroupStart/End): calls made on this thread between the outermost start and end are recorded,
// then issued together at the end — one batch per communicator, all batches in flight at once so that
// several communicators driven by one thread (collieCommInitAll) progress together — and groupEnd returns
// when all are done; groupEndAsync returns at once, each call's Work reporting it. Inside a batch, consecutive
// Send/Recv calls run concurrently. A call refused inside the group (bad argument, failed communicator) refuses the
// whole group at its end, as in NCCL: issuing the rest would leave the peers of the refused call waiting for it. The
// communicator's part (recordInGroup, submitBatch, dropUnissued) is at the end of this file.
#include "core/group.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/errors.hpp"
#include "core/communicator.hpp"
#include "core/cuda_plugin.hpp"
#include "core/device_stager.hpp"
#include "core/validate.hpp"

namespace collie::core {
namespace {

struct GroupState {
  GroupState();
  ~GroupState();
  int depth = 0;
  std::vector<std::pair<CommImpl*, OpDesc>> ops;
  ErrorCode refusedCode = ErrorCode::Success;  // groupRefuse: the first refused call's error
  std::string refusedWhy;
};

std::atomic<int> openGroups{0};  // threads between their outermost groupStart and groupEnd

// Whether this thread's GroupState exists: a plain thread_local, still readable at exit after the state is destroyed
// (a communicator with static storage is destroyed after the thread's thread_local objects).
thread_local bool groupStateAlive = false;

GroupState& group() {
  thread_local GroupState state;
  return state;
}

GroupState::GroupState() { groupStateAlive = true; }

GroupState::~GroupState() {  // a thread that ends inside a group: the group is gone, and so is its open count
  groupStateAlive = false;
  if (depth > 0) openGroups.fetch_sub(1, std::memory_order_relaxed);
}

// The code of a collie::Error; InternalError for anything else thrown (out of memory, a system error).
ErrorCode codeOf(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error ? error->code() : ErrorCode::InternalError;
}

}  // namespace

bool inGroup() { return group().depth > 0; }

bool anyGroupOpen() { return openGroups.load(std::memory_order_relaxed) != 0; }

void groupStart() {
  if (group().depth++ == 0) openGroups.fetch_add(1, std::memory_order_relaxed);
}

void groupAdd(CommImpl* comm, OpDesc op) { group().ops.emplace_back(comm, std::move(op)); }

void groupForget(CommImpl* comm) {
  if (!anyGroupOpen() || !groupStateAlive) return;  // no group open, or this thread's state is gone (at exit)
  GroupState& g = group();
  const auto of = [comm](const std::pair<CommImpl*, OpDesc>& entry) { return entry.first == comm; };
  if (std::none_of(g.ops.begin(), g.ops.end(), of)) return;
  const std::string why = base::format("%s rank %d was destroyed while calls of it were in this thread's open group",
                                       comm->name().c_str(), comm->rank());
  for (auto& entry : g.ops)
    if (of(entry)) CommImpl::dropUnissued(entry.second, ErrorCode::InvalidUsage, why);
  g.ops.erase(std::remove_if(g.ops.begin(), g.ops.end(), of), g.ops.end());
  groupRefuse(ErrorCode::InvalidUsage, why);
}

void groupRefuse(ErrorCode code, const std::string& why) {
  GroupState& g = group();
  if (g.depth == 0 || g.refusedCode != ErrorCode::Success) return;
  g.refusedCode = code == ErrorCode::Success ? ErrorCode::InternalError : code;
  g.refusedWhy = why;
}

namespace {

// Throws InvalidUsage when the group cannot be issued: calls of two communicators that share their connections
// (link_share.hpp: they run one call at a time, so two in one group would wait on each other until the timeout), or,
// ended without a wait, a blocking call (no Work would report it).
void checkIssuable(const std::vector<std::pair<CommImpl*, OpDesc>>& ops, const std::vector<CommImpl*>& order,
                   bool wait) {
  for (const auto& [comm, op] : ops)
    COLLIE_USAGE_CHECK(wait || op.work,
                       "groupEndAsync: the group holds a blocking %s on %s rank %d, whose result no "
                       "Work would report: make it with the call's Async form, or end the group with groupEnd",
                       algorithms::collectiveName(op.coll), comm->name().c_str(), comm->rank());
  for (size_t i = 0; i < order.size(); ++i)
    for (size_t j = i + 1; j < order.size(); ++j)
      COLLIE_USAGE_CHECK(order[i]->sharingFamily() == nullptr || order[i]->sharingFamily() != order[j]->sharingFamily(),
                         "a group holds calls of %s and %s, which share their connections (split with "
                         "shareConnections): they run one call at a time, so call them in separate groups",
                         order[i]->name().c_str(), order[j]->name().c_str());
}

// groupEnd (wait) and groupEndAsync (each call's Work reports it).
void endGroup(bool wait) {
  GroupState& g = group();
  COLLIE_USAGE_CHECK(g.depth > 0, "%s without a matching groupStart", wait ? "groupEnd" : "groupEndAsync");
  if (--g.depth > 0) return;
  openGroups.fetch_sub(1, std::memory_order_relaxed);
  std::vector<std::pair<CommImpl*, OpDesc>> ops;
  ops.swap(g.ops);
  const ErrorCode refusedCode = std::exchange(g.refusedCode, ErrorCode::Success);
  const std::string refusedWhy = std::exchange(g.refusedWhy, std::string());
  std::vector<CommImpl*> order;  // communicators in order of first appearance: one batch each
  for (const auto& entry : ops)
    if (std::find(order.begin(), order.end(), entry.first) == order.end()) order.push_back(entry.first);
  try {
    // The refusal: a call refused inside the group, groupFail, or a communicator destroyed with calls in it.
    COLLIE_ENFORCE(refusedCode == ErrorCode::Success, refusedCode, "%s: %s the group failed: %s",
                   wait ? "groupEnd" : "groupEndAsync",
                   ops.empty() ? "no call was issued, since"
                               : base::format("none of the group's %zu calls was issued, since", ops.size()).c_str(),
                   refusedWhy.c_str());
    checkIssuable(ops, order, wait);
  } catch (const Error& e) {  // nothing issued, no host buffer touched; the async calls' Works say why
    for (auto& entry : ops) CommImpl::dropUnissued(entry.second, e.code(), e.what());
    throw;
  }
  std::map<CommImpl*, std::vector<OpDesc>> batches;
  for (auto& [comm, op] : ops) batches[comm].push_back(std::move(op));
  std::vector<std::shared_ptr<WorkState>> works;
  // The callers' streams wait for the group's device calls once every batch is staged (CommImpl::joinCallerStreams).
  const auto joinCallers = [&](size_t issued) {
    std::exception_ptr first;
    for (size_t k = 0; k < issued; ++k) {
      try {
        order[k]->joinCallerStreams();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  };
  for (size_t i = 0; i < order.size(); ++i) {
    try {
      works.push_back(order[i]->submitBatch(std::move(batches[order[i]])));  // drops its own calls if it throws
    } catch (const std::exception& e) {
      for (size_t j = i + 1; j < order.size(); ++j)
        for (OpDesc& op : batches[order[j]]) CommImpl::dropUnissued(op, codeOf(e), e.what());
      try {
        joinCallers(i);
      } catch (const Error&) {  // recorded on its communicator; the first failure is the one thrown
      }
      if (wait)  // groupEnd returns only once no call of its group runs
        for (auto& w : works) w->wait();
      throw;
    }
  }
  joinCallers(order.size());
  if (!wait) return;
  const WorkState* firstFailure = nullptr;
  for (auto& w : works) {
    w->wait();
    if (!firstFailure && w->code != ErrorCode::Success) firstFailure = w.get();
  }
  if (firstFailure) throw Error(firstFailure->code, firstFailure->message);
}

}  // namespace

// ---- The communicator's part: recording a call, issuing a batch, dropping what is not issued ----------------------

// A call on device buffers is staged (its copies enqueued on the streams) only when the group is issued, as NCCL
// enqueues a group's work at ncclGroupEnd: a refused group then leaves the device buffers and streams untouched.
void CommImpl::recordInGroup(OpDesc op) {
  try {
    validate(op);
    classifyMemory(op, rank_, boundDevice_);
    if (op.device) pinDevice(op);
    groupAdd(this, std::move(op));
  } catch (const std::exception& e) {
    groupRefuse(codeOf(e), e.what());  // the group's other calls will not be issued either
    throw;
  }
}

// The GPU a device call is staged on is fixed when the call is made (the current device where its buffers do not name
// one: pinned memory with a stream), and checked then against this communicator's stager and the group's earlier
// device calls on it, so that a call for another GPU is refused before any of the group is issued.
void CommImpl::pinDevice(OpDesc& op) {
  if (op.deviceOrdinal < 0) {
    const CollieCudaPlugin& plugin = cuda::requirePlugin("a call on device buffers");
    cuda::check(plugin.getDevice(&op.deviceOrdinal), "cudaGetDevice");
  }
  int expected = stagerDevice_.load();
  if (expected < 0) {  // no stager yet: the group's earlier device call of this communicator fixed the GPU
    const auto& ops = group().ops;
    const auto earlier =
        std::find_if(ops.begin(), ops.end(), [this](const auto& e) { return e.first == this && e.second.device; });
    if (earlier != ops.end()) expected = earlier->second.deviceOrdinal;
  }
  COLLIE_USAGE_CHECK(expected < 0 || expected == op.deviceOrdinal,
                     "%s on rank %d: the buffers are on GPU %d, but this communicator uses GPU %d",
                     algorithms::collectiveName(op.coll), rank_, op.deviceOrdinal, expected);
}

std::shared_ptr<WorkState> CommImpl::submitBatch(std::vector<OpDesc> ops) {
  auto work = std::make_shared<WorkState>();
  // The turn first, then staging: a staged call waits on the stream until it runs. Both under deviceMu_, so that
  // the stager's calls and the queue's run in one order.
  std::unique_lock<std::mutex> deviceLock(deviceMu_, std::defer_lock);
  std::shared_ptr<void> turn;
  try {
    const bool device = std::any_of(ops.begin(), ops.end(), [](const OpDesc& op) { return op.device; });
    if (device) deviceLock.lock();
    turn = takeTurn();
    if (device) stageDeviceBatch(ops);
  } catch (const std::exception& e) {
    for (OpDesc& op : ops) dropUnissued(op, codeOf(e), e.what());
    throw;
  }
  queue_.enqueue(std::move(ops), work, std::move(turn));
  return work;
}

void CommImpl::dropUnissued(OpDesc& op, ErrorCode code, const std::string& message) {
  if (op.staged) DeviceStager::release(*op.staged);  // the stream it waits on goes on
  if (op.work) op.work->complete(code, message);
}

void groupEnd() { endGroup(true); }

void groupEndAsync() { endGroup(false); }

}  // namespace collie::core
