// The order of a communicator's calls and its progress thread (see progress_queue.hpp).
#include "core/progress_queue.hpp"

#include "base/params.hpp"
#include "base/topology.hpp"

namespace collie {

void Work::State::complete(ErrorCode c, std::string msg) {
  {
    std::lock_guard<std::mutex> lock(mu);
    code = c;
    message = std::move(msg);
    done = true;
  }
  cv.notify_all();
}

void Work::State::wait() {
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
}

bool Work::State::test() {
  std::lock_guard<std::mutex> lock(mu);
  return done;
}

}  // namespace collie

namespace collie::core {

void ProgressQueue::drain() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    state_.fetch_add(kInterest, std::memory_order_acq_rel);  // an inline call that ends now wakes us
    cv_.wait(lock, [&] { return pending_ == 0 && (state_.load(std::memory_order_acquire) & kInline) == 0; });
    state_.fetch_sub(kInterest, std::memory_order_acq_rel);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ProgressQueue::beginInline() {
  uint32_t idle = 0;
  return state_.compare_exchange_strong(idle, kInline, std::memory_order_seq_cst);
}

void ProgressQueue::endInline() {
  if (state_.fetch_sub(kInline, std::memory_order_seq_cst) == kInline) return;  // nobody waits for us
  { std::lock_guard<std::mutex> lock(mu_); }  // a waiter is either asleep in cv_ now or sees the bit clear
  cv_.notify_all();
}

std::vector<OpDesc> ProgressQueue::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OpDesc> ops;
  for (const Batch& b : queue_) ops.insert(ops.end(), b.ops.begin(), b.ops.end());
  return ops;
}

void ProgressQueue::enqueue(std::vector<OpDesc> ops, std::shared_ptr<WorkState> work, std::shared_ptr<void> hold) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(Batch{std::move(ops), std::move(work), std::move(hold)});
  ++pending_;
  state_.fetch_add(kInterest, std::memory_order_acq_rel);
  if (!thread_.joinable()) {
    // COLLIE_PIN_THREADS: the progress thread runs on the NUMA node of the rank's (calling) thread, near its memory.
    const int node = base::params::pinThreads() ? base::currentNumaNode() : -1;
    thread_ = std::thread([this, node] {
      if (node >= 0) base::bindThreadToNode(node);
      loop();
    });
  }
  cv_.notify_all();
}

void ProgressQueue::loop() {
  while (true) {
    Batch batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock,
               [&] { return stop_ || (!queue_.empty() && (state_.load(std::memory_order_acquire) & kInline) == 0); });
      if (queue_.empty()) return;  // stop_ with nothing left
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    ErrorCode code = ErrorCode::Success;
    std::string message;
    runner_(batch.ops, code, message);
    batch.hold.reset();
    for (OpDesc& op : batch.ops)
      if (op.work && op.work != batch.work) op.work->complete(code, message);
    batch.work->complete(code, message);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      state_.fetch_sub(kInterest, std::memory_order_seq_cst);
    }
    cv_.notify_all();
    if (afterBatch_) afterBatch_();
  }
}

}  // namespace collie::core
