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
    cv_.wait(lock, [&] { return pending_ == 0 && !inlineRunning_; });
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool ProgressQueue::beginInline() {
  std::lock_guard<std::mutex> lock(mu_);
  if (pending_ != 0 || inlineRunning_) return false;
  inlineRunning_ = true;
  return true;
}

void ProgressQueue::endInline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inlineRunning_ = false;
  }
  cv_.notify_all();
}

std::vector<OpDesc> ProgressQueue::queued() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<OpDesc> ops;
  for (const Batch& b : queue_) ops.insert(ops.end(), b.ops.begin(), b.ops.end());
  return ops;
}

void ProgressQueue::enqueue(std::vector<OpDesc> ops, std::shared_ptr<WorkState> work) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(Batch{std::move(ops), std::move(work)});
  ++pending_;
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
      cv_.wait(lock, [&] { return stop_ || (!queue_.empty() && !inlineRunning_); });
      if (queue_.empty()) return;  // stop_ with nothing left
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    ErrorCode code = ErrorCode::Success;
    std::string message;
    runner_(batch.ops, code, message);
    for (OpDesc& op : batch.ops)
      if (op.work && op.work != batch.work) op.work->complete(code, message);
    batch.work->complete(code, message);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    cv_.notify_all();
  }
}

}  // namespace collie::core
