// IssueOrder: the order in which a process group's calls reach collie, the same on every rank when future
// callbacks issue calls.
//
// NCCL completes a future as soon as the call is queued on its stream, so a callback runs when it is attached, on
// the thread attaching it: the calls a callback issues come right after the call whose future it hangs on, before
// anything the program issues next. collie computes on the CPU, so a future completes when its data is there and its
// callbacks run on the FutureWaiter's threads, at a time that differs from rank to rank. Issued as they came, a
// callback's calls (PowerSGD's hook issues two all-reduces from its callbacks) would meet the program's next calls
// in another order on another rank: a mismatch, or, for calls of one shape, sums of the wrong tensors.
//
// So every call and every future asked for gets a place (a Key) in that order, a tree walked depth first: the
// program's calls are 0, 1, 2, ...; a future asked for at place p opens there, and the calls its callbacks make are
// p.0, p.1, ... (and p.1.0, ... for a future one of them asks for), all before p+1. A call reaches collie at once
// when nothing queued comes before it and no open future (callbacks not run yet) could still make a call before it;
// otherwise it is queued (its Work returned) and issued, in place order, by the thread that runs the callbacks
// ahead of it. The place of callbacks is where get_future() was asked, not where then() attaches them: the same in
// the usual get_future().then(cb). A call made between the two may come before or after the callbacks' calls,
// depending on whether the future completed before then() (its callbacks then run at once, on the attaching
// thread, as for a Work complete when get_future() is asked); no order can be kept there without seeing then(),
// and a callback that waits on such a call's Work (held until the callback ends) is refused (heldBehindThisThread)
// rather than wait forever; on its future, which is c10's, it waits forever. A coalescing block holds its place from
// startCoalescing to its end (openBlock), where its calls reach collie as one group. Places are per group:
// calls on this group from another group's callbacks are ordered as they come.
//
// Only a future asked for from Python (the GIL held) opens: Python's callbacks are the ones that make calls
// (PowerSGD's, a user's hook). DDP's C++ reducer asks for every bucket's future without the GIL and attaches no
// callback that makes calls; opening those would make each bucket's all-reduce wait for the previous one to
// complete and its future's thread to wake (16 back-to-back all-reduces of 1 KiB took 1.6x as long). A C++
// callback that makes calls is ordered as it comes, as before. The cost where a future opens: the calls after it
// reach collie only once its callbacks ran.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "collie_work.hpp"

namespace collie::torchbackend {

/// A collie call that failed when it was made: `groupFailed` when the group failed (the lost ranks to be named).
struct IssueFailed : std::runtime_error {
  IssueFailed(const std::string& message, bool groupFailed) : std::runtime_error(message), groupFailed(groupFailed) {}
  bool groupFailed;
};

class IssueOrder {
 public:
  using Key = std::vector<uint32_t>;  // a place in the order: compared lexicographically, a prefix first

  explicit IssueOrder(std::shared_ptr<FutureWaiter> waiter) : waiter_(std::move(waiter)) {}

  /// Runs `calls` (the collie calls that add their handles to `work`) now when nothing comes before them, or, with
  /// `now`, at once (a coalescing block's calls, one collie group made on its thread); an exception then
  /// propagates. Otherwise queues them to run in their place; an exception then fails `work`.
  void issue(const c10::intrusive_ptr<CollieWork>& work, std::function<void()> calls, bool now = false);
  /// get_future() created `work`'s future; `opens`: its callbacks may make calls (asked for from Python). Returns
  /// whether the caller hands `work` to the FutureWaiter now; otherwise it goes there when it is issued, or when
  /// its place is reached.
  bool futureAsked(CollieWork* work, bool opens);
  /// The callbacks of `work`'s future have run: issues what waited only for them.
  void callbacksRan(CollieWork* work);
  /// Whether `work` is queued behind the callbacks this thread runs now (a wait on it there would never end).
  bool heldBehindThisThread(const CollieWork* work);
  /// Waits until a call made now on this thread would go at once, then opens `block` at that place: calls placed
  /// after it wait until closeBlock (a coalescing block, whose calls reach collie as one group at its end).
  void openBlock(const c10::intrusive_ptr<CollieWork>& block);
  void closeBlock(CollieWork* block) { callbacksRan(block); }
  /// The group is going away: everything queued is issued now, in order, and later calls go at once.
  void close();

  /// How many future callbacks the calling thread runs now, nested (0: none).
  static size_t callbacksDepth();

  /// Marks the calling thread as running `work`'s future callbacks for its lifetime.
  class RunningCallbacks {
   public:
    explicit RunningCallbacks(CollieWork* work);
    ~RunningCallbacks();
    RunningCallbacks(const RunningCallbacks&) = delete;
    RunningCallbacks& operator=(const RunningCallbacks&) = delete;
  };

 private:
  struct Queued {
    c10::intrusive_ptr<CollieWork> work;
    std::function<void()> calls;  // none: `work`'s future opens here
  };
  /// Under mutex_: the next place of a call made on this thread (inside the innermost open future's callbacks it
  /// runs, or the program's).
  Key nextPlace();
  /// Under mutex_: whether something at `key` may go now (nothing queued before it, not blockedByOpen).
  bool mayGo(const Key& key) const;
  /// Under mutex_: whether an open future could still make a call placed before `key`.
  bool blockedByOpen(const Key& key) const;
  /// Under mutex_: runs `calls` for `work`; true when it goes to the FutureWaiter.
  bool run(CollieWork& work, const std::function<void()>& calls, bool propagate);
  /// Under mutex_: `work`'s calls reached collie. Returns whether its future was asked for (then hand it to the
  /// FutureWaiter once mutex_ is released); adds it to the open ones when that future opened.
  bool issued(CollieWork& work);
  /// Under mutex_: `work`'s future opens at `key` (now if `work` was issued: returns true, hand it to the
  /// FutureWaiter).
  bool opened(CollieWork& work, Key key);
  /// Under mutex_: issues the queued calls that may go now, in order (all of them when closing); those to hand to
  /// the FutureWaiter go to `out`.
  void issueQueued(std::vector<c10::intrusive_ptr<CollieWork>>& out);
  void handToWaiter(const std::vector<c10::intrusive_ptr<CollieWork>>& works);

  std::shared_ptr<FutureWaiter> waiter_;
  std::mutex mutex_;
  std::condition_variable changed_;
  uint32_t nextProgramPlace_ = 0;
  uint64_t issuedCount_ = 0;
  bool closing_ = false;
  std::vector<c10::intrusive_ptr<CollieWork>> open_;  // issued, future opened, callbacks not run
  std::map<Key, Queued> queued_;
};

}  // namespace collie::torchbackend
