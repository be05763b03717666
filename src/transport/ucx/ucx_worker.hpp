// One UCP context and worker (UCX, OpenUCX) and what collie asks of UCX outside a connection.
//
// A UcxTransport owns one UcxWorker per communicator, made at its first serve(); its connections share it
// (std::shared_ptr, so the worker outlives the last endpoint). Per communicator rather than per process because
// (1) the tag space is the communicator's: a tag is (sender rank, message number), which would collide between
// two communicators on one worker; (2) ranks run as threads of one process in the tests, each needing its own
// worker; (3) the worker's lifetime is then the communicator's, with nothing global to tear down. The price is
// a UCP context and worker per communicator (1-6 ms and 2-9 ms to create here, UCX_TLS=tcp and sm), and the
// destructor's progress before ucp_worker_destroy until UCX is quiet for 10 ms (100 ms at most; ucx_worker.cpp:
// UCX 1.13 asserts on a wireup reply left).
//
// The worker is driven by the thread that drives the communicator's connections (UCS_THREAD_MODE_SERIALIZED:
// that thread may change between calls, never two at once). Progress is ucp_worker_progress; sleeping goes
// through collie's Poller: the worker's event fd (UCP_FEATURE_WAKEUP) is registered with it, and the worker is a
// SleepHook whose prepareToSleep() arms the worker (ucp_worker_arm), refusing the sleep when UCX already has
// events (UCS_ERR_BUSY), so no wake-up is lost. It also refuses while a send is in flight: the event fd signals
// arrivals only, not a send queued inside UCX becoming able to go (a shared-memory FIFO slot freed by the peer,
// a rendezvous step), so a rank waiting on its sends polls instead of sleeping.
//
// UCX also needs progress after an operation completed: a rendezvous receive completes before its
// acknowledgement to the sender has left (it queues when the shared-memory FIFO is full), and the sender's send
// completes only once that arrives. collie progresses only inside calls, so a rank that finished its call would
// leave the sender waiting until its next call. So a linger thread progresses the worker (every millisecond,
// under mutex(), which the connections hold too) for kLinger after the worker's last operation completed, and
// sleeps otherwise. (Found by the conformance suite: 150 messages each way between threads stalled over sm.)
// While the worker is in use the thread ticks every millisecond rather than being woken at each completion: a
// wake-up per completion (a context switch, and the mutex taken from under the executor) was half of a small
// message's time (bench_transport PingPong/ucx/8 over tcp: 33 us one way with it, 16 without). Only a thread
// asleep for good (idle past kLinger, or never used) is woken, by the next completion.
//
// The same thread runs the worker's background tasks (drive()): a connection answered on the accept loop's thread
// while this rank's executor is elsewhere has its wireup moved on here, so that the dialling rank's connect ends
// whatever this rank is doing (ucx_transport.cpp). While a task runs, the thread progresses every millisecond
// whatever is in flight, and wakes the poller when anything moved (the executor may sleep on an event UCX has
// already handed to this thread).
//
// ucxHostInfo() answers, once per process, what collie-info and COLLIE_NET=auto ask: the UCX version and the
// transport/device resources UCX would use here (after UCX_TLS and UCX_NET_DEVICES), and whether one of them
// is RDMA (rc, dc, ud: InfiniBand or RoCE through libibverbs).
#pragma once

#include <ucp/api/ucp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/poller.hpp"

namespace collie::transport::ucx {

class UcxWorker final : public base::SleepHook {
 public:
  /// ucp_init (reading UCX_* variables; a non-empty `tls` replaces UCX_TLS) and ucp_worker_create; fails with
  /// SystemError naming UCX's status.
  UcxWorker(int rank, const std::string& tls);
  ~UcxWorker() override;
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h handle() const { return worker_; }
  /// This worker's address (for the peers' ucp_ep_create).
  const std::vector<uint8_t>& address() const { return address_; }
  /// The transport/device resources of its context ("tcp/lo", "posix/memory", ...).
  const std::vector<std::string>& resources() const { return resources_; }
  /// Whether endpoints ask UCX to report a dead peer (UCP_ERR_HANDLING_MODE_PEER): only where a network
  /// transport (tcp, rc, dc, ud) is enabled, since UCX 1.13's shared-memory transports cannot honour it (a
  /// dead peer is then seen through the connection's liveness socket only).
  bool peerFailureMode() const { return peerFailureMode_; }
  /// Registers the event fd and this sleep hook with `poller` (once; a different poller replaces the first).
  void attach(base::Poller* poller);
  /// ucp_worker_progress until it reports nothing more (bounded); true when anything happened.
  bool progress();

  /// Held by whoever calls into UCX on this worker: the connections (the executor's thread) and the linger
  /// thread (see the file comment).
  std::recursive_mutex& mutex() { return mu_; }
  /// An operation UCX holds (posted, not complete) begins or ends; call with mutex() held. While a send is in
  /// flight prepareToSleep() refuses the sleep; once none is, the linger thread progresses for a while.
  void opStarted(bool send);
  void opFinished(bool send);

  /// Keeps an operation its connection gave up on while UCX still holds its request (call with mutex() held): its
  /// completion callback frees it and calls forget(); one UCX never calls back (a send to a dead peer over shared
  /// memory, whose transports cannot report one) is freed with `free` after ucp_worker_destroy.
  void adopt(void* op, void (*free)(void*));
  void forget(void* op);

  /// Runs `step` on the linger thread, under mutex(), after each of its progress ticks (every millisecond) until it
  /// returns true or throws (the exception is dropped: the task keeps what it needs to report). `key` names the task
  /// for undrive(); one task per key.
  void drive(const void* key, std::function<bool()> step);
  /// After it returns (call with or without mutex()), the task of `key` does not run and will not run again.
  void undrive(const void* key);

  bool prepareToSleep() override;
  void finishSleep() override {}

 private:
  void detach();
  void lingerLoop();
  /// The background tasks' tick: progress, then each task once; drops those that finished. Under mu_.
  void runTasks();

  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int eventFd_ = -1;
  base::Poller* poller_ = nullptr;
  std::vector<uint8_t> address_;
  std::vector<std::string> resources_;
  bool peerFailureMode_ = false;
  std::recursive_mutex mu_;
  std::condition_variable_any idle_;  ///< wakes the linger thread asleep for good: the worker went idle, or stop_
  bool lingerAsleep_ = false;         ///< the linger thread waits on idle_ without a tick
  int64_t opsInFlight_ = 0;
  int64_t sendsInFlight_ = 0;
  std::chrono::steady_clock::time_point idleSince_{};
  bool stop_ = false;
  std::vector<std::pair<const void*, std::function<bool()>>> tasks_;  ///< drive(); run by the linger thread
  std::vector<std::pair<void*, void (*)(void*)>> orphans_;            ///< adopt()
  std::thread linger_;
};

/// What UCX offers on this host (computed once per process).
struct UcxHostInfo {
  std::string version;                 ///< ucp_get_version_string()
  std::vector<std::string> resources;  ///< "tcp/eth0", "posix/memory", "rc_mlx5/mlx5_0:1", ...
  bool rdma = false;                   ///< a resource is rc*, dc* or ud* (InfiniBand / RoCE)
  std::string error;                   ///< why UCX could not be asked (then resources is empty)
};
const UcxHostInfo& ucxHostInfo();

}  // namespace collie::transport::ucx
