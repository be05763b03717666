// The UCP context and worker of a UcxTransport, and the once-per-process UCX host query (see ucx_worker.hpp).
#include "transport/ucx/ucx_worker.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>

#include "base/errors.hpp"
#include "base/log.hpp"

namespace collie::transport::ucx {
namespace {

constexpr int kMaxProgressRounds = 64;  // ucp_worker_progress calls per progress(): bounded, so a flood cannot starve
constexpr auto kLinger = std::chrono::milliseconds(500);  // see the file comment of ucx_worker.hpp
// The destructor's drain (~UcxWorker).
constexpr auto kDrainQuiet = std::chrono::milliseconds(10);
constexpr auto kDrainMost = std::chrono::milliseconds(100);

/// A UCP context with the features collie uses; `what` names the caller for messages.
ucp_context_h makeContext(const char* what, const std::string& tls) {
  ucp_config_t* config = nullptr;
  ucs_status_t s = ucp_config_read(nullptr, nullptr, &config);  // UCX_TLS, UCX_NET_DEVICES, ... from the environment
  COLLIE_ENFORCE(s == UCS_OK, ErrorCode::SystemError, "%s: UCX could not read its configuration (UCX_* variables): %s",
                 what, ucs_status_string(s));
  if (!tls.empty()) s = ucp_config_modify(config, "TLS", tls.c_str());
  if (s != UCS_OK) {
    ucp_config_release(config);
    COLLIE_FAIL(ErrorCode::InvalidArgument, "%s: UCX refuses the transport list '%s': %s", what, tls.c_str(),
                ucs_status_string(s));
  }
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;
  ucp_context_h context = nullptr;
  s = ucp_init(&params, config, &context);
  ucp_config_release(config);
  COLLIE_ENFORCE(s == UCS_OK, ErrorCode::SystemError, "%s: ucp_init failed: %s (check UCX_TLS and UCX_NET_DEVICES)",
                 what, ucs_status_string(s));
  return context;
}

/// The resources UCX prints for `context` ("#      resource 1  :  md 1  dev 1  flags -- tcp/lo"): the names after "--
/// ".
std::vector<std::string> contextResources(ucp_context_h context) {
  std::vector<std::string> out;
  char* text = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&text, &size);
  if (!f) return out;
  ucp_context_print_info(context, f);
  std::fclose(f);
  char* save = nullptr;
  for (char* line = strtok_r(text, "\n", &save); line; line = strtok_r(nullptr, "\n", &save)) {
    const char* at = std::strstr(line, "-- ");
    if (!std::strstr(line, "resource") || !at) continue;
    std::string name(at + 3);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\r')) name.pop_back();
    out.push_back(name);
  }
  std::free(text);
  return out;
}

bool startsWithAny(const std::string& name, std::initializer_list<const char*> prefixes) {
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

}  // namespace

UcxWorker::UcxWorker(int rank, const std::string& tls) {
  std::string what = base::format("ucx transport of rank %d", rank);
  context_ = makeContext(what.c_str(), tls);
  resources_ = contextResources(context_);
  for (const std::string& r : resources_) peerFailureMode_ |= startsWithAny(r, {"tcp", "rc", "dc", "ud"});
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucs_status_t s = ucp_worker_create(context_, &params, &worker_);
  if (s != UCS_OK) {
    ucp_cleanup(context_);
    COLLIE_FAIL(ErrorCode::SystemError, "%s: ucp_worker_create failed: %s", what.c_str(), ucs_status_string(s));
  }
  ucp_address_t* addr = nullptr;
  size_t len = 0;
  s = ucp_worker_get_address(worker_, &addr, &len);
  if (s == UCS_OK) {
    address_.assign(reinterpret_cast<uint8_t*>(addr), reinterpret_cast<uint8_t*>(addr) + len);
    ucp_worker_release_address(worker_, addr);
    s = ucp_worker_get_efd(worker_, &eventFd_);
  }
  if (s != UCS_OK) {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    COLLIE_FAIL(ErrorCode::SystemError, "%s: UCX worker address or event fd: %s", what.c_str(), ucs_status_string(s));
  }
  linger_ = std::thread([this] { lingerLoop(); });
  COLLIE_INFO(base::kLogNet, "ucx: rank %d worker ready (address %zu bytes, UCX %s)", rank, address_.size(),
              ucp_get_version_string());
}

UcxWorker::~UcxWorker() {
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    stop_ = true;
  }
  idle_.notify_all();
  linger_.join();
  detach();
  // Let UCX finish its own traffic first (wireup replies of lanes made late, e.g. a rendezvous lane): UCX 1.13
  // asserts when ucp_worker_destroy purges a pending wireup reply
  // (Conformance.PeerCloseGivesRemoteErrorAfterItsLastData over ucx_tcp aborted in 15-17 of 30 runs without this).
  // Progress until UCX has had nothing to do for kDrainQuiet (1 ms sufficed in 30 of 30 runs), kDrainMost at most.
  const auto start = std::chrono::steady_clock::now();
  auto lastMoved = start;
  for (auto now = start; now - start < kDrainMost && now - lastMoved < kDrainQuiet;
       now = std::chrono::steady_clock::now())
    if (ucp_worker_progress(worker_) != 0)
      lastMoved = now;
    else
      std::this_thread::sleep_for(std::chrono::microseconds(200));
  ucp_worker_destroy(worker_);
  for (auto [op, free] : orphans_) free(op);  // UCX will not call back any more
  ucp_cleanup(context_);
}

void UcxWorker::attach(base::Poller* poller) {
  std::lock_guard<std::recursive_mutex> lock(mu_);  // the linger thread wakes poller_
  if (poller == poller_) return;
  detach();
  if (!poller) return;
  poller->add(eventFd_);
  poller->addSleepHook(this);
  poller_ = poller;
}

void UcxWorker::detach() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (!poller_) return;
  poller_->removeSleepHook(this);
  poller_->remove(eventFd_);
  poller_ = nullptr;
}

bool UcxWorker::progress() {
  bool any = false;
  for (int i = 0; i < kMaxProgressRounds && ucp_worker_progress(worker_) != 0; ++i) any = true;
  return any;
}

void UcxWorker::opStarted(bool send) {
  ++opsInFlight_;
  if (send) ++sendsInFlight_;
}

void UcxWorker::opFinished(bool send) {
  if (send) --sendsInFlight_;
  if (--opsInFlight_ == 0) {
    idleSince_ = std::chrono::steady_clock::now();
    if (lingerAsleep_) idle_.notify_one();  // a ticking linger thread sees it within a millisecond
  }
}

void UcxWorker::adopt(void* op, void (*free)(void*)) { orphans_.emplace_back(op, free); }

void UcxWorker::forget(void* op) {
  std::erase_if(orphans_, [op](const auto& o) { return o.first == op; });
}

void UcxWorker::drive(const void* key, std::function<bool()> step) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  undrive(key);
  tasks_.emplace_back(key, std::move(step));
  if (lingerAsleep_) idle_.notify_one();
}

void UcxWorker::undrive(const void* key) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  tasks_.erase(std::remove_if(tasks_.begin(), tasks_.end(), [key](const auto& t) { return t.first == key; }),
               tasks_.end());
}

void UcxWorker::runTasks() {
  bool moved = progress();
  // A task may undrive itself or others (a failing connection closes): run from a copy, dropping by key.
  auto tasks = tasks_;
  for (auto& [key, step] : tasks) {
    if (std::none_of(tasks_.begin(), tasks_.end(), [k = key](const auto& t) { return t.first == k; })) continue;
    bool finished = true;
    try {
      finished = step();
    } catch (const std::exception& e) {
      COLLIE_TRACE(base::kLogNet, "ucx: a background task of the worker failed: %s", e.what());
    }
    if (finished) undrive(key);
  }
  moved |= progress();
  if (moved && poller_) poller_->wake();  // what this thread took from UCX may be what the executor sleeps on
}

void UcxWorker::lingerLoop() {
  std::unique_lock<std::recursive_mutex> lock(mu_);
  while (!stop_) {
    if (!tasks_.empty()) {
      runTasks();
      idle_.wait_for(lock, std::chrono::milliseconds(1));
      continue;
    }
    // Asleep for good when the worker last went idle more than kLinger ago (or never did), operations in flight
    // or not: the next completion that leaves it idle wakes this thread.
    const bool neverIdle = idleSince_ == std::chrono::steady_clock::time_point{};
    if (neverIdle || std::chrono::steady_clock::now() - idleSince_ > kLinger) {
      lingerAsleep_ = true;
      idle_.wait(lock);
      lingerAsleep_ = false;
      continue;
    }
    if (opsInFlight_ == 0)
      while (ucp_worker_progress(worker_) != 0) {
      }
    idle_.wait_for(lock, std::chrono::milliseconds(1));  // the executor takes the lock meanwhile
  }
}

bool UcxWorker::prepareToSleep() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (sendsInFlight_ > 0) return false;  // see the file comment of ucx_worker.hpp
  // UCS_ERR_BUSY: events are pending, so progress instead of sleeping. UCS_OK: the event fd will fire.
  return ucp_worker_arm(worker_) != UCS_ERR_BUSY;
}

const UcxHostInfo& ucxHostInfo() {
  static UcxHostInfo info;
  static std::once_flag once;
  std::call_once(once, [] {
    info.version = ucp_get_version_string();
    ucp_context_h context = nullptr;
    try {
      context = makeContext("ucx host query", "");
    } catch (const Error& e) {
      info.error = e.what();
      return;
    }
    info.resources = contextResources(context);
    for (const std::string& r : info.resources) info.rdma |= startsWithAny(r, {"rc", "dc", "ud"});
    ucp_cleanup(context);
  });
  return info;
}

}  // namespace collie::transport::ucx
