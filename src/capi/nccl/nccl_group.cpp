// libnccl.so.2's groups (nccl_abi.hpp declares these): this thread's nesting depth and failure, and the inits and
// splits deferred to the outermost ncclGroupEnd, which starts them (an init as collie's non-blocking init, a split on a
// thread of its own, after the split of its family issued before it: SplitOrder) and waits for them; the families
// whose splits a group's data calls must follow.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "nccl_abi.hpp"

namespace collie_nccl {
namespace {

thread_local int tlsGroupDepth = 0;
thread_local std::vector<ncclComm*> tlsGroupDeferred;  // inits and splits to start at the outermost end
thread_local bool tlsGroupFailed = false;              // a call inside the open group failed (failGroupOn)
thread_local std::vector<std::shared_ptr<SplitOrder>> tlsGroupCallFamilies;  // noteGroupCall

}  // namespace

// ---- Groups ---------------------------------------------------------------------------------------------------
int& groupDepth() { return tlsGroupDepth; }

ncclResult_t failGroupOn(ncclComm* comm, ncclResult_t r) {
  if (r != ncclSuccess && r != ncclInProgress && tlsGroupDepth > 0) {
    tlsGroupFailed = true;
    collieGroupFail(static_cast<collieResult_t>(r), lastError(comm));
  }
  return r;
}

bool takeGroupFailure() { return std::exchange(tlsGroupFailed, false); }

void deferToGroupEnd(ncclComm* comm, const char* fn, bool isInit, std::function<collieResult_t(collieComm_t*)> create,
                     std::shared_ptr<SplitOrder> order) {
  tlsGroupDeferred.push_back(comm);
  comm->pending = std::move(create);
  comm->pendingIsInit = isInit;
  comm->pendingOrder = order ? std::move(order) : std::make_shared<SplitOrder>();
  comm->pendingFn = fn;
}

namespace {

// Keeps a creation's failure as comm's result and last message.
void recordCreationFailure(ncclComm* comm, ncclResult_t r, const std::string& why) {
  std::lock_guard<std::mutex> lock(comm->mu);
  comm->deferredResult = r;
  comm->deferredError = why;
  std::snprintf(comm->lastError, sizeof(comm->lastError), "%s: %s", comm->pendingFn, why.c_str());
}

// A split: on a thread of its own, which waits until `before` (the split of its family issued before it, if any) has
// ended, stores the result, sets deferredDone and then `done`. Where no thread can start, the split fails, and `done`
// is set once `before` is ready, so that the family's next split still waits for the one before.
void launchSplit(ncclComm* comm, std::function<collieResult_t(collieComm_t*)> create, std::shared_future<void> before,
                 std::promise<void> done) {
  comm->deferredDone = false;
  auto order =
      std::make_shared<std::pair<std::shared_future<void>, std::promise<void>>>(std::move(before), std::move(done));
  try {
    std::thread t([comm, create = std::move(create), order] {
      if (order->first.valid()) order->first.wait();
      collieComm_t c = nullptr;
      collieResult_t r = create(&c);
      {
        std::lock_guard<std::mutex> lock(comm->mu);
        comm->c = c;
      }
      if (r != collieSuccess) recordCreationFailure(comm, fromCollieCode(r), collieWhy(r));
      comm->deferredDone = true;
      order->second.set_value();
    });
    std::lock_guard<std::mutex> lock(comm->mu);  // waitDeferred may look from another thread (ncclCommAbort)
    comm->deferred = std::move(t);
  } catch (const std::system_error& e) {
    recordCreationFailure(comm, ncclSystemError, std::string("cannot start a thread: ") + e.what());
    comm->deferredDone = true;
    if (order->first.valid()) order->first.wait();
    order->second.set_value();
  }
}

// An init: collie's non-blocking init, which ncclCommAbort stops; a failure at once is kept as its result.
void launchInit(ncclComm* comm, const std::function<collieResult_t(collieComm_t*)>& init) {
  collieComm_t c = nullptr;
  collieResult_t r = init(&c);
  if (r != collieSuccess && r != collieInProgress) return recordCreationFailure(comm, fromCollieCode(r), collieWhy(r));
  {
    std::lock_guard<std::mutex> lock(comm->mu);  // stillCreating may look from another thread
    comm->c = c;
  }
  comm->initInGroup = true;
}

// Waits for comm's init in a group; a failed one is destroyed and its failure kept as a deferred creation's.
void waitInitInGroup(ncclComm* comm) {
  int n = 0;
  collieResult_t r = collieCommCount(comm->c, &n);  // waits for the init, and fails as it did
  if (r != collieSuccess) {
    const std::string why = collieWhy(r);
    collieCommDestroy(comm->c);
    {
      std::lock_guard<std::mutex> lock(comm->mu);
      comm->c = nullptr;
    }
    recordCreationFailure(comm, fromCollieCode(r), why);
  }
  comm->initInGroup = false;
}

}  // namespace

// Splits of one family run one after another, in the order issued (the same on every rank; SplitOrder says why).
// A split issued after an earlier one of its family started waits for it at the call (resolveLive); those of one
// group chain here. Splits of other families (other ranks' communicators driven by this thread among them), and
// inits, run at once.
void launchDeferred() {
  for (ncclComm* comm : tlsGroupDeferred) {
    std::function<collieResult_t(collieComm_t*)> create = std::move(comm->pending);
    comm->pending = nullptr;
    if (comm->pendingIsInit) {
      launchInit(comm, create);
    } else {
      std::promise<void> done;
      std::shared_future<void> before = comm->pendingOrder->enqueue(done.get_future().share());
      launchSplit(comm, std::move(create), std::move(before), std::move(done));
    }
  }
}

void waitSplits(ncclComm* comm) { comm->splitOrder->wait(); }

void noteGroupCall(ncclComm* comm) {
  if (tlsGroupDepth == 0 || !comm) return;
  for (const auto& o : tlsGroupCallFamilies)
    if (o == comm->splitOrder) return;
  tlsGroupCallFamilies.push_back(comm->splitOrder);
}

void waitSplitsOfGroupCalls() {
  std::vector<std::shared_ptr<SplitOrder>> families;
  families.swap(tlsGroupCallFamilies);
  for (const auto& order : families) order->wait();
}

collieResult_t splitInOrder(SplitOrder& order, const std::function<collieResult_t()>& split) {
  std::promise<void> done;  // set when this split ends (or broken, should split() throw)
  std::shared_future<void> before = order.enqueue(done.get_future().share());
  if (before.valid()) before.wait();
  const collieResult_t r = split();
  done.set_value();
  return r;
}

void abandonDeferred(ncclResult_t result, const std::string& why) {
  tlsGroupCallFamilies.clear();  // none of the group's calls is issued
  std::vector<ncclComm*> deferred;
  deferred.swap(tlsGroupDeferred);
  for (ncclComm* comm : deferred) {
    comm->pending = nullptr;
    if (comm->discardAtGroupEnd) {
      freeComm(comm);  // NCCL_SPLIT_NOCOLOR: the caller holds no handle
      continue;
    }
    recordCreationFailure(comm, result, "not created, since its group failed: " + why);
  }
}

ncclResult_t finishDeferred(const char* fn, bool* inProgress) {
  *inProgress = false;
  std::vector<ncclComm*> deferred;
  deferred.swap(tlsGroupDeferred);
  ncclResult_t result = ncclSuccess;
  for (ncclComm* comm : deferred) {
    if (!comm->blocking && !comm->discardAtGroupEnd) {
      *inProgress = *inProgress || stillCreating(comm);
      continue;  // non-blocking: polled with ncclCommGetAsyncError
    }
    if (comm->initInGroup) waitInitInGroup(comm);
    const DeferredOutcome done = finishedDeferred(comm);
    if (comm->discardAtGroupEnd) {
      // NCCL_SPLIT_NOCOLOR: the split gave this rank no communicator; the caller holds no handle.
      if (done.c) collieCommDestroy(done.c);
      freeComm(comm);
    }
    if (done.result != ncclSuccess && result == ncclSuccess)
      result = fail(nullptr, done.result, "%s: %s", fn, done.error.c_str());
  }
  return result;
}

void forgetDeferred(ncclComm* comm) {
  tlsGroupDeferred.erase(std::remove(tlsGroupDeferred.begin(), tlsGroupDeferred.end(), comm), tlsGroupDeferred.end());
}

}  // namespace collie_nccl
