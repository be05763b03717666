// IssueOrder (issue_order.hpp).
#include "issue_order.hpp"

#include <Python.h>

#include <algorithm>
#include <exception>

namespace collie::torchbackend {

namespace {

// The Works whose future callbacks this thread is running, outermost first (callbacks nest: a callback that
// completes another Work runs that one's callbacks inside its own). Each is alive while it is here.
thread_local std::vector<CollieWork*> tRunningCallbacksOf;

bool isPrefix(const IssueOrder::Key& prefix, const IssueOrder::Key& key) {
  return prefix.size() <= key.size() && std::equal(prefix.begin(), prefix.end(), key.begin());
}

}  // namespace

IssueOrder::RunningCallbacks::RunningCallbacks(CollieWork* work) { tRunningCallbacksOf.push_back(work); }

IssueOrder::RunningCallbacks::~RunningCallbacks() { tRunningCallbacksOf.pop_back(); }

size_t IssueOrder::callbacksDepth() { return tRunningCallbacksOf.size(); }

IssueOrder::Key IssueOrder::nextPlace() {
  for (auto it = tRunningCallbacksOf.rbegin(); it != tRunningCallbacksOf.rend(); ++it) {
    if ((*it)->issueOrder_.get() != this) continue;  // another group's callbacks: its places are not this group's
    auto& state = (*it)->orderState_;
    if (state.opened && !state.callbacksRan) {
      Key key = state.place;
      key.push_back(state.nextChild++);
      return key;
    }
  }
  return Key{nextProgramPlace_++};
}

bool IssueOrder::mayGo(const Key& key) const {
  return (queued_.empty() || key < queued_.begin()->first) && !blockedByOpen(key);
}

bool IssueOrder::blockedByOpen(const Key& key) const {
  // An open future placed before `key` may still make calls placed between the two, unless `key` is its own.
  for (const auto& w : open_) {
    const Key& place = w->orderState_.place;
    if (place < key && !isPrefix(place, key)) return true;
  }
  return false;
}

bool IssueOrder::run(CollieWork& work, const std::function<void()>& calls, bool propagate) {
  // Called inside a handler: fails the Work (kept by the group: it completes with the error, nothing copied back),
  // then raises again when the caller is to see it, or returns whether its future goes to the FutureWaiter.
  const auto fail = [&](const std::string& message, bool groupFailed) {
    work.failWith(message, groupFailed);
    const bool toWaiter = issued(work);
    if (propagate) throw;
    return toWaiter;
  };
  try {
    calls();
  } catch (const IssueFailed& e) {
    return fail(e.what(), e.groupFailed);
  } catch (const c10::Error& e) {
    return fail(e.what_without_backtrace(), false);
  } catch (const std::exception& e) {
    return fail(e.what(), false);
  }
  return issued(work);
}

bool IssueOrder::issued(CollieWork& work) {
  auto& state = work.orderState_;
  work.markIssued(++issuedCount_);
  if (!state.futureAsked) return false;
  if (state.opened && !state.callbacksRan) open_.push_back(c10::intrusive_ptr<CollieWork>::reclaim_copy(&work));
  return true;
}

bool IssueOrder::opened(CollieWork& work, Key key) {
  work.holdFuture(false);
  auto& state = work.orderState_;
  state.futureAsked = true;
  state.opened = true;
  state.place = std::move(key);
  if (work.issueSeq() == 0) return false;  // its calls are queued still: it opens when they are made
  if (!state.callbacksRan) open_.push_back(c10::intrusive_ptr<CollieWork>::reclaim_copy(&work));
  return true;
}

void IssueOrder::issue(const c10::intrusive_ptr<CollieWork>& work, std::function<void()> calls, bool now) {
  bool toWaiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!now && !closing_) {
      Key key = nextPlace();
      if (!mayGo(key)) {
        queued_.emplace(std::move(key), Queued{work, std::move(calls)});
        return;
      }
    }
    toWaiter = run(*work, calls, true);
  }
  if (toWaiter) handToWaiter({work});
}

bool IssueOrder::futureAsked(CollieWork* work, bool opens) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!opens || closing_) {
    work->orderState_.futureAsked = true;
    return work->issueSeq() != 0;  // a queued Work goes to the FutureWaiter when issued
  }
  Key key = nextPlace();
  if (mayGo(key)) return opened(*work, std::move(key));
  work->holdFuture(true);  // completing the Work meanwhile (a wait()) must not run the callbacks before their place
  queued_.emplace(std::move(key), Queued{c10::intrusive_ptr<CollieWork>::reclaim_copy(work), nullptr});
  return false;
}

void IssueOrder::callbacksRan(CollieWork* work) {
  std::vector<c10::intrusive_ptr<CollieWork>> toWaiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    work->orderState_.callbacksRan = true;
    auto it = std::find_if(open_.begin(), open_.end(), [&](const auto& w) { return w.get() == work; });
    if (it == open_.end()) return;
    open_.erase(it);
    issueQueued(toWaiter);
    changed_.notify_all();
  }
  handToWaiter(toWaiter);
}

void IssueOrder::issueQueued(std::vector<c10::intrusive_ptr<CollieWork>>& out) {
  while (!queued_.empty()) {
    auto head = queued_.begin();
    if (!closing_ && blockedByOpen(head->first)) return;  // every later place is blocked too
    Key key = head->first;
    Queued q = std::move(head->second);
    queued_.erase(head);
    const bool toWaiter = q.calls ? run(*q.work, q.calls, false) : opened(*q.work, std::move(key));
    if (toWaiter) out.push_back(q.work);
  }
}

bool IssueOrder::heldBehindThisThread(const CollieWork* work) {
  if (tRunningCallbacksOf.empty() || work->issueSeq() != 0) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (work->issueSeq() != 0) return false;
  auto queued = std::find_if(queued_.begin(), queued_.end(),
                             [&](const auto& q) { return q.second.work.get() == work && q.second.calls; });
  if (queued == queued_.end()) return false;
  for (const CollieWork* w : tRunningCallbacksOf) {
    const auto& state = w->orderState_;
    if (w->issueOrder_.get() == this && state.opened && !state.callbacksRan && state.place < queued->first &&
        !isPrefix(state.place, queued->first))
      return true;
  }
  return false;
}

void IssueOrder::openBlock(const c10::intrusive_ptr<CollieWork>& block) {
  std::unique_lock<std::mutex> lock(mutex_);
  Key key = nextPlace();
  while (!closing_ && !mayGo(key)) {
    // The callbacks to wait for may be Python's: wait without the GIL, and take it back without mutex_ held.
    lock.unlock();
    PyThreadState* released = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
    lock.lock();
    changed_.wait(lock, [&] { return closing_ || mayGo(key); });
    lock.unlock();
    if (released) PyEval_RestoreThread(released);
    lock.lock();
  }
  block->orderState_.opened = true;
  block->orderState_.place = std::move(key);
  open_.push_back(block);
}

void IssueOrder::close() {
  std::vector<c10::intrusive_ptr<CollieWork>> toWaiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    issueQueued(toWaiter);
    changed_.notify_all();
  }
  handToWaiter(toWaiter);
}

void IssueOrder::handToWaiter(const std::vector<c10::intrusive_ptr<CollieWork>>& works) {
  for (const auto& w : works) waiter_->enqueue(w);
}

}  // namespace collie::torchbackend
