// IssueOrder (issue_order.hpp).
#include "issue_order.hpp"

#include <Python.h>

#include <algorithm>
#include <exception>

namespace collie::torchbackend {

namespace {

// The Works whose future callbacks this thread is running, outermost first (callbacks nest: a callback that
// completes another Work runs that one's callbacks inside its own).
thread_local std::vector<const CollieWork*> tRunningCallbacksOf;

}  // namespace

IssueOrder::RunningCallbacks::RunningCallbacks(const CollieWork* work) { tRunningCallbacksOf.push_back(work); }

IssueOrder::RunningCallbacks::~RunningCallbacks() { tRunningCallbacksOf.pop_back(); }

bool IssueOrder::mayIssue(const Chain& chain) const {
  return open_.empty() || std::find(chain.begin(), chain.end(), open_.back()) != chain.end();
}

bool IssueOrder::issued(CollieWork& work) {
  work.orderState_.issued = true;
  work.markIssued();
  if (!work.orderState_.futureAsked) return false;
  if (work.orderState_.opens && !work.orderState_.callbacksRan) open_.push_back(&work);
  return true;
}

void IssueOrder::issue(const c10::intrusive_ptr<CollieWork>& work, std::function<void()> calls, bool now) {
  std::vector<c10::intrusive_ptr<CollieWork>> toWaiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!now && !mayIssue(tRunningCallbacksOf)) {
      queued_.push_back({work, tRunningCallbacksOf, std::move(calls)});
      return;
    }
    try {
      calls();
    } catch (...) {
      issued(*work);  // failed before anything reached a peer: the caller raises, the Work is dropped
      throw;
    }
    if (issued(*work)) toWaiter.push_back(work);
  }
  handToWaiter(toWaiter);
}

bool IssueOrder::futureAsked(CollieWork* work, bool opens) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!opens) {
    work->orderState_.futureAsked = true;
    return work->orderState_.issued;  // a queued Work goes to the FutureWaiter when issued
  }
  if (mayIssue(tRunningCallbacksOf)) return opened(*work);
  // This thread's calls are held back: the future opens at this place among them, after the calls made before.
  queued_.push_back({c10::intrusive_ptr<CollieWork>::reclaim_copy(work), tRunningCallbacksOf, nullptr});
  return false;
}

bool IssueOrder::opened(CollieWork& work) {
  work.orderState_.futureAsked = true;
  work.orderState_.opens = true;
  if (!work.orderState_.issued) return false;  // made by a thread held back still: opens when issued
  if (!work.orderState_.callbacksRan) open_.push_back(&work);
  return true;
}

void IssueOrder::callbacksRan(CollieWork* work) {
  std::vector<c10::intrusive_ptr<CollieWork>> toWaiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work->orderState_.callbacksRan = true;
    auto it = std::find(open_.begin(), open_.end(), work);
    if (it == open_.end()) return;
    open_.erase(it);
    issueQueued(toWaiter);
    opened_or_closed_.notify_all();
  }
  handToWaiter(toWaiter);
}

void IssueOrder::issueQueued(std::vector<c10::intrusive_ptr<CollieWork>>& out, bool all) {
  while (true) {
    auto next = std::find_if(queued_.begin(), queued_.end(), [&](const Queued& q) { return all || mayIssue(q.chain); });
    if (next == queued_.end()) return;
    Queued q = std::move(*next);
    queued_.erase(next);
    if (!q.calls) {  // where get_future() was asked
      if (opened(*q.work)) out.push_back(q.work);
      continue;
    }
    try {
      q.calls();
    } catch (const std::exception& e) {
      q.work->failWith(e.what());
    } catch (...) {
      q.work->failWith("unknown error while issuing");
    }
    if (issued(*q.work)) out.push_back(q.work);
  }
}

void IssueOrder::waitUntilMayIssue() {
  std::unique_lock<std::mutex> lock(mutex_);
  waitMayIssue(lock, tRunningCallbacksOf);
}

void IssueOrder::waitMayIssue(std::unique_lock<std::mutex>& lock, const Chain& chain) {
  while (!mayIssue(chain)) {
    // The callbacks to wait for may be Python's: wait without the GIL, and take it back without mutex_ held.
    lock.unlock();
    PyThreadState* released = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    lock.lock();
    opened_or_closed_.wait(lock, [&] { return mayIssue(chain); });
    lock.unlock();
    if (released) PyEval_RestoreThread(released);
    lock.lock();
  }
}

void IssueOrder::flush() {
  std::vector<c10::intrusive_ptr<CollieWork>> toWaiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    issueQueued(toWaiter, true);
  }
  handToWaiter(toWaiter);
}

void IssueOrder::handToWaiter(const std::vector<c10::intrusive_ptr<CollieWork>>& works) {
  for (const auto& w : works) waiter_->enqueue(w);
}

}  // namespace collie::torchbackend
