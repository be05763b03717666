// CollieWork and FutureWaiter (collie_work.hpp).
#include "collie_work.hpp"

#include <ATen/core/jit_type.h>
#include <Python.h>
#include <c10/util/Exception.h>

#include <stdexcept>

#include "issue_order.hpp"

namespace collie::torchbackend {

CollieWork::CollieWork(int rank, c10d::OpType type, std::string name, std::vector<at::Tensor> outputs,
                       std::shared_ptr<FutureWaiter> waiter, std::shared_ptr<IssueOrder> order,
                       std::shared_ptr<FailureReporter> reporter)
    : c10d::Work(rank, type),
      name_(std::move(name)),
      outputs_(std::move(outputs)),
      waiter_(std::move(waiter)),
      issueOrder_(std::move(order)),
      reporter_(std::move(reporter)) {}

CollieWork::~CollieWork() = default;

void CollieWork::complete() {
  // The handles are waited on outside completeMutex_, so that isCompleted() and wait(timeout) on other threads
  // never block behind a thread waiting here; the post-processing runs once, on one thread, outside it too (a
  // barrier's completes other Works, whose callbacks may make calls).
  std::vector<collie::Work> handles;
  std::string message;
  bool explain;
  {
    std::unique_lock<std::mutex> lock(completeMutex_);
    stateCv_.wait(lock, [this] { return issueSeq() != 0 || done_; });
    if (done_) {
      lock.unlock();
      deliverFuture();
      return;
    }
    handles = handles_;
    message = issueError_;
    explain = explainIssueError_;
  }
  if (explain && reporter_) message = reporter_->explain(message);
  for (const collie::Work& h : handles) {
    try {
      h.wait();
    } catch (const std::exception& e) {
      if (message.empty()) message = reporter_ ? reporter_->explain(e.what()) : e.what();
    }
  }
  std::vector<std::function<void()>> post;
  {
    std::unique_lock<std::mutex> lock(completeMutex_);
    if (finishing_ || done_) {  // another thread completes it: wait for that, then see to the future
      stateCv_.wait(lock, [this] { return done_; });
      lock.unlock();
      deliverFuture();
      return;
    }
    finishing_ = true;
    post.swap(post_);
  }
  if (message.empty()) {
    try {
      for (auto& fn : post) fn();
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(completeMutex_);
    handles_.clear();
    if (!message.empty()) error_ = std::make_exception_ptr(std::runtime_error("collie " + name_ + ": " + message));
    done_ = true;
    error = error_;
  }
  stateCv_.notify_all();
  finish(error);
  deliverFuture();
}

void CollieWork::deliverFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(completeMutex_);
    if (!done_ || !future_ || futureDelivered_ || futureHeld_) return;
    futureDelivered_ = true;
    future = future_;
    error = error_;
  }
  FutureWaiter::InCallbacks counted;  // on a waiter thread, so that another starts if every one is in callbacks
  struct Ran {  // IssueOrder hears that the callbacks ran however they end (a C++ callback may throw)
    CollieWork* work;
    ~Ran() { work->issueOrder_->callbacksRan(work); }
  } ran{this};
  IssueOrder::RunningCallbacks running(this);  // the calls the callbacks make take their place (issue_order.hpp)
  if (error)
    future->setError(error);
  else
    future->markCompleted(c10::IValue(outputs_));
}

void CollieWork::markIssued(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(completeMutex_);  // so that complete()'s wait sees it
    issueSeq_.store(seq, std::memory_order_release);
  }
  stateCv_.notify_all();
}

bool CollieWork::isCompleted() {
  if (!handlesDone()) return false;
  complete();
  return true;
}

bool CollieWork::poll() {
  {
    std::lock_guard<std::mutex> lock(completeMutex_);
    if (done_) return true;
    if (issueSeq() == 0) return false;
    if (future_) return false;  // the FutureWaiter completes it
  }
  return isCompleted();
}

bool CollieWork::handlesDone() {
  std::lock_guard<std::mutex> lock(completeMutex_);
  if (done_) return true;
  if (issueSeq() == 0) return false;
  if (!issueError_.empty()) return true;
  for (const collie::Work& h : handles_)
    if (!h.test()) return false;
  return true;
}

bool CollieWork::wait(std::chrono::milliseconds timeout) {
  TORCH_CHECK(openBlockThread_.load() != std::this_thread::get_id(), "collie ", name_,
              ": waited on inside its coalescing block (batch_isend_irecv), whose calls reach collie only at its end");
  TORCH_CHECK(!issueOrder_->heldBehindThisThread(this), "collie ", name_,
              ": waited on in the callbacks of a future asked for before this call was made; it reaches collie only "
              "once those callbacks end, so the wait would never return (attach callbacks when asking for the "
              "future: get_future().then(...))");
  if (timeout != kNoTimeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!isCompleted()) {
      TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "collie ", name_, ": wait timed out after ",
                  timeout.count(), " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  complete();
  if (error_) std::rethrow_exception(error_);
  return true;
}

int CollieWork::sourceRank() const {
  TORCH_CHECK(opType_ == c10d::OpType::RECVANYSOURCE, "collie ", name_,
              ": sourceRank() is only for a receive from any source");
  if (issueSeq() == 0) return -1;  // not made yet (IssueOrder holds it back)
  return source_.source();
}

c10::intrusive_ptr<c10::ivalue::Future> CollieWork::getFuture() {
  c10::intrusive_ptr<c10::ivalue::Future> future;
  bool done;
  {
    std::lock_guard<std::mutex> lock(completeMutex_);
    if (future_) return future_;
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future = future_;
    done = done_;
  }
  // Complete already: set at once, so callbacks attached next run at once, on the attaching thread, as NCCL's do.
  // Otherwise, asked for from Python, the future's callbacks may make calls: they take their place here
  // (issue_order.hpp). Asked for by C++ (DDP's reducer), they do not.
  if (done) {
    deliverFuture();
  } else if (issueOrder_->futureAsked(this, Py_IsInitialized() && PyGILState_Check())) {
    waiter_->enqueue(c10::intrusive_ptr<CollieWork>::reclaim_copy(this));
  }
  return future;
}

std::string FailureReporter::explain(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!done_) {
    done_ = true;
    lost_ = findLost();
  }
  if (lost_.empty()) return message;
  return lost_ + "; " + message;
}

std::string FailureReporter::findLost() {
  if (!store_ || size_ < 2) return "";
  const auto key = [](int r) { return "collie/failed/" + std::to_string(r); };
  try {
    store_->set(key(rank_), std::vector<uint8_t>{1});
    const auto deadline = std::chrono::steady_clock::now() + wait_;
    std::vector<int> missing;
    while (true) {
      missing.clear();
      for (int r = 0; r < size_; ++r)
        if (r != rank_ && !store_->check({key(r)})) missing.push_back(r);
      if (missing.empty() || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (missing.empty()) return "";
    std::string text = missing.size() == 1 ? "lost rank" : "lost ranks";
    for (size_t i = 0; i < missing.size(); ++i) text += (i ? ", " : " ") + std::to_string(missing[i]);
    return text + " (it did not report after the group failed: it died, hung or was killed)";
  } catch (const std::exception&) {
    return "";  // the store went away too (its server may have been on the lost rank)
  }
}

namespace {

// The FutureWaiter whose thread this is (none on other threads), and how deep in future callbacks it is.
thread_local FutureWaiter* tWaiterOfThisThread = nullptr;
thread_local int tCallbacksDepth = 0;

}  // namespace

FutureWaiter::~FutureWaiter() { stop(); }

void FutureWaiter::enqueue(c10::intrusive_ptr<CollieWork> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      queue_.push_back(std::move(work));
      addThreadIfAllInCallbacks();
      cv_.notify_one();
      return;
    }
  }
  work->complete();  // the group is going away: complete on the caller's thread
}

void FutureWaiter::addThreadIfAllInCallbacks() {
  // A thread keeps the FutureWaiter alive: one that the group's destruction detached (stop() on that thread) still
  // returns through loop().
  if (!queue_.empty() && inCallbacks_ == threads_.size())
    threads_.emplace_back([self = shared_from_this()] { self->loop(); });
}

void FutureWaiter::stop() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    cv_.notify_all();
  }
  // Threads start only under mutex_ while not stopping: none starts after this swap.
  {
    std::lock_guard<std::mutex> lock(mutex_);
    threads.swap(threads_);
  }
  // The last reference to a group may go from Python, holding the GIL (a frame's cleanup at exit), while a thread
  // here completes a future whose callbacks take the GIL (a Python callback runs, or is only destroyed): joining it
  // with the GIL held would wait forever (seen with torch 2.6 under torchrun). Let go of it for the join.
  PyThreadState* released = Py_IsInitialized() && PyGILState_Check() ? PyEval_SaveThread() : nullptr;
  for (std::thread& t : threads) {
    if (t.get_id() == std::this_thread::get_id())
      t.detach();  // the group's last reference went in a callback on this thread: it returns to loop() and ends
    else if (t.joinable())
      t.join();
  }
  if (released) PyEval_RestoreThread(released);
}

void FutureWaiter::loop() {
  tWaiterOfThisThread = this;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    c10::intrusive_ptr<CollieWork> work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    work->complete();  // its callbacks count this thread as inside them (InCallbacks)
    work.reset();
    lock.lock();
  }
}

FutureWaiter::InCallbacks::InCallbacks() {
  if (!tWaiterOfThisThread || tCallbacksDepth++ > 0) return;
  waiter_ = tWaiterOfThisThread;
  std::lock_guard<std::mutex> lock(waiter_->mutex_);
  ++waiter_->inCallbacks_;
  if (!waiter_->stopping_) waiter_->addThreadIfAllInCallbacks();
}

FutureWaiter::InCallbacks::~InCallbacks() {
  if (!tWaiterOfThisThread) return;
  --tCallbacksDepth;
  if (!waiter_) return;
  std::lock_guard<std::mutex> lock(waiter_->mutex_);
  --waiter_->inCallbacks_;
}

}  // namespace collie::torchbackend
