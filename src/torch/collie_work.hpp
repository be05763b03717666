// The c10d Work of the collie torch backend. A CollieWork is one torch.distributed call: the collie async handles
// it waits on, the post-processing to run once they are done (staging copies written back, gathered pieces
// split out), and the output tensors. It completes (once) on whichever thread first needs it: wait() on the
// caller's thread, isCompleted() when every handle is done, the FutureWaiter thread once get_future() was asked for
// (DDP's reducer chains its bucket callbacks on that future), or the process group (a later call's pruning, a
// barrier, the group's destruction). Its collie calls may be made after it is returned (IssueOrder keeps the order
// of calls made from future callbacks: issue_order.hpp); it completes after that. The handles are waited on outside the
// Work's mutex, so isCompleted() and wait(timeout) never block behind another thread's wait. A failure of collie
// becomes the Work's exception (a RuntimeError in Python) and the future's error.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <chrono>
#include <collie/collie.hpp>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <vector>

namespace collie::torchbackend {

class FutureWaiter;
class IssueOrder;

/// Names the lost ranks when a group fails. collie reports the peer a rank saw fail, which is not always the rank
/// that died (a neighbour that aborted because of it closes its connections too). So each rank whose call failed
/// sets "collie/failed/<rank>" in the group's c10d Store and waits (a few seconds at most) for the others' keys:
/// the ranks that never report are the lost ones. Done once per group; store failures leave the message as is.
class FailureReporter {
 public:
  FailureReporter(c10::intrusive_ptr<c10d::Store> store, int rank, int size, std::chrono::milliseconds wait)
      : store_(std::move(store)), rank_(rank), size_(size), wait_(wait) {}
  /// `message` with the lost ranks named in front ("lost rank 2 (...); <message>").
  std::string explain(const std::string& message);

 private:
  std::string findLost();
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_, size_;
  std::chrono::milliseconds wait_;
  std::mutex mutex_;
  bool done_ = false;
  std::string lost_;
};

class CollieWork : public c10d::Work {
 public:
  CollieWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
             std::shared_ptr<FutureWaiter> waiter, std::shared_ptr<IssueOrder> order,
             std::shared_ptr<FailureReporter> reporter);
  ~CollieWork() override;

  /// A collie handle this call waits on (added by the calls IssueOrder runs, before it marks them issued).
  void add(const collie::Work& work) { handles_.push_back(work); }
  /// Runs on success, after every handle is done (before the outputs are reported). Only before it is issued.
  void then(std::function<void()> fn) { post_.push_back(std::move(fn)); }
  /// A receive from any source: the collie handle whose source() sourceRank() reports.
  void setSourceOf(const collie::Work& work) { source_ = work; }
  /// Part of a coalescing block still open on this thread (its calls reach collie at the block's end): a wait on
  /// it there would never return.
  void setInOpenBlock(bool open) { openBlockThread_.store(open ? std::this_thread::get_id() : std::thread::id()); }
  /// Marks the call as failed already (a group that threw at its end, a call that could not be made);
  /// `groupFailed`: the lost ranks are named in front when it completes.
  void failWith(const std::string& message, bool groupFailed = false) {
    std::lock_guard<std::mutex> lock(completeMutex_);
    issueError_ = message;
    explainIssueError_ = groupFailed;
  }

  /// True once it is issued and every handle is done; completes the Work then (its outputs are written). Never
  /// blocks.
  bool isCompleted() override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  std::vector<at::Tensor> result() override { return outputs_; }
  /// The rank a receive from any source took its message from (-1 until it is known).
  int sourceRank() const override;

  /// Waits until it is issued (for as long as the callbacks ahead of it take) and for every handle, runs the
  /// post-processing (on one thread, outside the Work's mutex), sets the exception and the future (its callbacks
  /// run on this thread). Idempotent.
  void complete();
  /// isCompleted(), except that a Work whose future was asked for is left to the FutureWaiter (its callbacks run
  /// there). For the process group's pruning of the Works it keeps; never blocks.
  bool poll();
  /// Whether it is complete; never completes it.
  bool done() {
    std::lock_guard<std::mutex> lock(completeMutex_);
    return done_;
  }
  /// 0 until its collie calls were made (IssueOrder may hold them back for a while), then its rank in the order
  /// the group's calls reached collie.
  uint64_t issueSeq() const { return issueSeq_.load(std::memory_order_acquire); }

 private:
  friend class IssueOrder;
  bool handlesDone();
  void holdFuture(bool held) {
    std::lock_guard<std::mutex> lock(completeMutex_);
    futureHeld_ = held;
  }
  void markIssued(uint64_t seq);
  /// Completes the future once (its callbacks run on this thread), then tells IssueOrder they ran.
  void deliverFuture();

  std::string name_;
  std::vector<at::Tensor> outputs_;
  std::vector<collie::Work> handles_;
  collie::Work source_;  // valid for a receive from any source
  std::vector<std::function<void()>> post_;
  std::string issueError_;
  bool explainIssueError_ = false;
  std::shared_ptr<FutureWaiter> waiter_;
  std::shared_ptr<IssueOrder> issueOrder_;
  std::shared_ptr<FailureReporter> reporter_;
  struct {                                                           // IssueOrder's, under its mutex
    bool futureAsked = false, opened = false, callbacksRan = false;  // issued: issueSeq_ != 0
    std::vector<uint32_t> place;                                     // where its future opened (IssueOrder::Key)
    uint32_t nextChild = 0;                                          // the next place among its callbacks' calls
  } orderState_;
  std::atomic<uint64_t> issueSeq_{0};
  std::atomic<std::thread::id> openBlockThread_{};
  std::mutex completeMutex_;
  std::condition_variable stateCv_;  // issueSeq_ set, done_
  bool finishing_ = false;           // a thread runs the post-processing
  bool done_ = false;
  bool futureDelivered_ = false;
  bool futureHeld_ = false;  // IssueOrder has not reached the place where the future was asked for
  std::exception_ptr error_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

/// The threads of a process group that complete the Works whose futures were asked for, in order. Completing a
/// future runs its callbacks on the completing thread, and a callback may wait on the future of a call it made
/// (PowerSGD's hook does): so while every thread is inside callbacks and Works wait in the queue, one more thread
/// starts (InCallbacks counts them, however the callbacks came to run there). One
/// thread serves a program whose callbacks do not wait (DDP's default hook); threads stay until stop().
class FutureWaiter : public std::enable_shared_from_this<FutureWaiter> {
 public:
  FutureWaiter() = default;  // made by std::make_shared: each thread holds it until it ends
  ~FutureWaiter();
  void enqueue(c10::intrusive_ptr<CollieWork> work);
  /// Completes what is queued, then stops the thread.
  void stop();

  /// For its lifetime, counts the calling thread as inside future callbacks when it is a waiter thread (the
  /// outermost callbacks only), starting another thread when every one is and Works wait.
  class InCallbacks {
   public:
    InCallbacks();
    ~InCallbacks();
    InCallbacks(const InCallbacks&) = delete;
    InCallbacks& operator=(const InCallbacks&) = delete;

   private:
    FutureWaiter* waiter_ = nullptr;
  };

 private:
  void loop();
  /// Under mutex_: starts a thread when Works wait and every thread is inside future callbacks.
  void addThreadIfAllInCallbacks();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<CollieWork>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  size_t inCallbacks_ = 0;  // threads running a future's callbacks
};

}  // namespace collie::torchbackend
