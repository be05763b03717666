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
// So the group keeps NCCL's order. A call whose future was asked for (get_future()) and whose callbacks have not run
// yet is open. While calls are open, only a thread running the callbacks of the last one opened issues at once; a
// call from any other thread (the program's, or another callback's) is queued with its Work returned, and reaches
// collie when the callbacks ahead of it have run, in the order it was made. A call issued from callbacks that asks
// for its own future opens in turn (callbacks nest as NCCL's do). A future asked for by a thread whose calls are
// held back opens at that place among them (after the calls it made before asking), whichever call it belongs to.
//
// Only a future asked for from Python (the GIL held) opens: Python's callbacks are the ones that make calls
// (PowerSGD's, a user's hook). DDP's C++ reducer asks for every bucket's future without the GIL and attaches no
// callback that makes calls; opening those would make each bucket's all-reduce wait for the previous one to
// complete and its future's thread to wake (about 25 us a bucket: 16 buckets of 1 KiB took 2.2x as long). A C++
// callback that makes calls is ordered as it comes, as before. The cost where a future opens: the program's next
// call reaches collie only once that future's callbacks ran.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "collie_work.hpp"

namespace collie::torchbackend {

class IssueOrder {
 public:
  explicit IssueOrder(std::shared_ptr<FutureWaiter> waiter) : waiter_(std::move(waiter)) {}

  /// Runs `calls` (the collie calls that add their handles to `work`) now when this thread may issue, or, with
  /// `now`, whatever is open (inside a coalescing block, whose calls form one collie group on one thread); an
  /// exception then propagates. Otherwise queues them to run once the callbacks ahead have; an exception then fails
  /// `work`.
  void issue(const c10::intrusive_ptr<CollieWork>& work, std::function<void()> calls, bool now = false);
  /// get_future() created `work`'s future while `work` was not complete; `opens`: its callbacks may make calls
  /// (asked for from Python). Returns whether the caller hands `work` to the FutureWaiter now; otherwise it goes
  /// there when it is issued, or when the place where its future was asked for is reached.
  bool futureAsked(CollieWork* work, bool opens);
  /// The callbacks of `work`'s future have run (or it had none): issues what waited only for them.
  void callbacksRan(CollieWork* work);
  /// Blocks until this thread may issue (startCoalescing: the block's calls must reach collie at once).
  void waitUntilMayIssue();
  /// Issues everything queued, in order, whatever is open (the group is going away).
  void flush();

  /// Marks the calling thread as running `work`'s future callbacks for its lifetime.
  class RunningCallbacks {
   public:
    explicit RunningCallbacks(const CollieWork* work);
    ~RunningCallbacks();
    RunningCallbacks(const RunningCallbacks&) = delete;
    RunningCallbacks& operator=(const RunningCallbacks&) = delete;
  };

 private:
  using Chain = std::vector<const CollieWork*>;  // the Works whose callbacks a thread runs, outermost first
  struct Queued {
    c10::intrusive_ptr<CollieWork> work;
    Chain chain;                  // of the thread that made the call
    std::function<void()> calls;  // none: `work`'s future opens here
  };
  /// Under mutex_: whether a thread running the callbacks in `chain` may issue now.
  bool mayIssue(const Chain& chain) const;
  /// Under mutex_: `work`'s calls reached collie. Returns whether its future was asked for (then hand it to the
  /// FutureWaiter once mutex_ is released); opens it when that future opens.
  bool issued(CollieWork& work);
  /// Under mutex_: `work`'s future opens (now if `work` was issued: returns true, hand it to the FutureWaiter).
  bool opened(CollieWork& work);
  /// Under mutex_: issues the queued calls that may go now, in order; those to hand to the FutureWaiter go to `out`.
  void issueQueued(std::vector<c10::intrusive_ptr<CollieWork>>& out, bool all = false);
  /// Waits (without the GIL) until a thread with `chain` may issue; `lock` holds mutex_ before and after.
  void waitMayIssue(std::unique_lock<std::mutex>& lock, const Chain& chain);
  void handToWaiter(const std::vector<c10::intrusive_ptr<CollieWork>>& works);

  std::shared_ptr<FutureWaiter> waiter_;
  std::mutex mutex_;
  std::condition_variable opened_or_closed_;
  std::vector<CollieWork*> open_;  // issued, future asked for, callbacks not run; in the order they opened
  std::deque<Queued> queued_;
};

}  // namespace collie::torchbackend
