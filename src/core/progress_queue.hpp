// ProgressQueue: the order in which a communicator's calls run, and the progress thread that runs queued ones.
//
// Who drives progress: a blocking call with nothing queued runs on the calling thread (beginInline/endInline, no
// hand-off); async calls, and blocking calls that arrive while async work is queued, are enqueued and run on the
// progress thread in order. The progress thread starts with the first enqueued batch and sleeps on a condition
// variable when idle. WorkState is the completion shared by a Work handle and the queue.
#pragma once

#include <atomic>
#include <collie/collie.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/op_desc.hpp"

namespace collie {

/// Completion state shared by a Work handle and the communicator (core::WorkState).
struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  ErrorCode code = ErrorCode::Success;
  std::string message;
  int source = -1;  ///< a receive from any source: the rank it matched (written before completion)

  void complete(ErrorCode c, std::string msg);
  void wait();
  bool test();
};

}  // namespace collie

namespace collie::core {

using WorkState = Work::State;

class ProgressQueue {
 public:
  /// Runs one batch on the progress thread and reports its outcome in code and message (never throws).
  using Runner = std::function<void(std::vector<OpDesc>& ops, ErrorCode& code, std::string& message)>;

  /// `afterBatch` (optional) runs on the progress thread after each batch, once it no longer counts as running.
  explicit ProgressQueue(Runner runner, std::function<void()> afterBatch = {})
      : runner_(std::move(runner)), afterBatch_(std::move(afterBatch)) {}
  ~ProgressQueue() { drain(); }
  ProgressQueue(const ProgressQueue&) = delete;
  ProgressQueue& operator=(const ProgressQueue&) = delete;

  /// Waits until nothing is queued or running, then stops the progress thread. Idempotent.
  void drain();
  /// True, and marks a call as running inline, when nothing is queued or running: the caller then runs its call
  /// on its own thread and calls endInline(). False: the caller must enqueue to keep the order.
  bool beginInline();
  void endInline();
  /// Ends a call that beginInline() let run inline when it goes out of scope.
  struct InlineClaim {
    ProgressQueue& queue;
    ~InlineClaim() { queue.endInline(); }
  };
  /// Queues a batch; the progress thread runs it after everything queued before, then completes every op's work
  /// and `work` with the outcome. `hold` (optional: a sharing family's turn, link_share.hpp) is released once the
  /// batch has run, before the works complete.
  void enqueue(std::vector<OpDesc> ops, std::shared_ptr<WorkState> work, std::shared_ptr<void> hold = {});
  /// The calls queued and not yet started, in order (for the flight recorder). Any thread.
  std::vector<OpDesc> queued();

 private:
  struct Batch {
    std::vector<OpDesc> ops;
    std::shared_ptr<WorkState> work;
    std::shared_ptr<void> hold;
  };
  void loop();

  Runner runner_;
  std::function<void()> afterBatch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> queue_;
  size_t pending_ = 0;  // queued or running on the progress thread
  // kInline while a call runs inline, plus kInterest for each batch pending and for drain() waiting: a blocking
  // call claims the inline run with one compare-and-swap (from 0: nothing else pending or running), and
  // endInline() takes mu_ to wake the others only when someone is interested. Sequentially consistent, so that
  // a flag stored before a failed beginInline() is seen by whoever held the claim, after it lets go
  // (CommImpl::closeIfAborted).
  static constexpr uint32_t kInline = 1, kInterest = 2;
  std::atomic<uint32_t> state_{0};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace collie::core
