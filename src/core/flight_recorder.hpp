// FlightRecorder: each communicator's last N calls (COLLIE_FLIGHT_RECORDER_ENTRIES), for the post-mortem of a
// hang or a failure: sequence number, collective, type, op, count, bytes, root, algorithm, transports, state
// (queued, running, done, failed) and start/end times. Queued calls (async calls waiting behind the running one)
// cost nothing to record: a dump reads them from the progress queue.
//
// Cost. The ring is allocated once; recording a call is a few relaxed atomic stores (plain moves on x86) and a
// time-stamp counter read at its start and its end, so the 8-byte latency does not move (perf/RESULTS.md). Only
// the thread that runs the executor records; a dump may run on another thread (SIGUSR1, abort), so every field
// is an atomic word and each entry carries a version (odd while it is being written): a dump reads an entry
// again when its version moved under it, never prints a torn one, and reads newest first, leaving out only the
// oldest calls if new ones overwrite them meanwhile.
//
// Dumps. With COLLIE_FLIGHT_RECORDER=PREFIX, dump() writes PREFIX.rank<R>.json (PREFIX.<name>.rank<R>.json for a
// communicator not named "comm"): one JSON object, one call per line, written to a temporary file and renamed.
// Live communicators of the same name and rank in one process (torch's process groups are all "torch") each get
// an instance, the lowest not taken by a live one, in creation order: instance K > 0 writes PREFIX[.<name>]
// .rank<R>.K.json, so their dumps never replace each other and the ranks that create them alike agree on K. A
// communicator created after one was destroyed may take its K again, and its dump then replaces the old one's.
// The communicator dumps on a failure (timeout, dead peer, abort, any collective error) and at destroy when
// COLLIE_FLIGHT_RECORDER_DESTROY=1; flight_signals.cpp dumps every live recorder on SIGUSR1 and before a
// SIGTERM or SIGABRT ends the process. tools/collie-flight merges the ranks' files into one report.
//
// The same per-call hooks feed the communicator's CallStats (call_stats.hpp: counts, bytes, time per collective
// and algorithm) and, with COLLIE_TRACE set, its CallTrace (call_trace.hpp), whose buffered events every dump
// writes out; the clock below is theirs too.
#pragma once

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "base/errors.hpp"
#include "core/call_stats.hpp"
#include "core/call_trace.hpp"
#include "core/op_desc.hpp"

namespace collie::core {

/// The clock of the recorder, the stats and the trace: a cheap monotonic tick on the hot path (the TSC on x86,
/// steady_clock nanoseconds elsewhere), turned into wall-clock (CLOCK_REALTIME) time only when read back, from an
/// origin taken when the clock is made.
class TickClock {
 public:
  TickClock();
  static uint64_t ticks() {
#if defined(__x86_64__)
    return __rdtsc();
#else
    return static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }
  /// Nanoseconds per tick, measured from the origin to now (2.5 GHz assumed in the first millisecond).
  double nsPerTick() const;
  /// Microseconds from the origin to tick `t`.
  double sinceOriginUs(uint64_t t, double nsPerTick) const {
    return (static_cast<double>(t) - static_cast<double>(originTicks_)) * nsPerTick / 1000.0;
  }
  /// Wall-clock microseconds (since the epoch) of tick `t`.
  double wallUs(uint64_t t, double nsPerTick) const {
    return static_cast<double>(originWallUs_) + sinceOriginUs(t, nsPerTick);
  }
  int64_t originWallUs() const { return originWallUs_; }

 private:
  uint64_t originTicks_;
  int64_t originSteadyNs_;
  int64_t originWallUs_;
};

class FlightRecorder;
/// The signal and exit registry (flight_signals.cpp); registering gives the recorder its instance.
void registerFlightRecorder(FlightRecorder* r);
void unregisterFlightRecorder(FlightRecorder* r);

class FlightRecorder {
 public:
  enum class State : uint8_t { Running = 1, Done = 2, Failed = 3 };
  /// The calls queued behind the running one (the progress queue's), read only when dumping.
  using QueuedSource = std::function<std::vector<OpDesc>()>;

  /// entries == 0: the recorder keeps nothing (and dumps nothing).
  FlightRecorder(int rank, int nranks, std::string commName, size_t entries);
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  /// Where dumps find the queued calls; an empty source (set before the queue goes away) stops that.
  void setQueuedSource(QueuedSource source);

  /// The transport names, in the planner's order of preference (bit t of a call's transports names [t]).
  void setTransportNames(std::vector<std::string> names);
  /// Where calls are traced from now on (null: nowhere); it is flushed by every dump, on signals and at exit.
  void setTrace(CallTrace* trace);

  // The hot path, on the executing thread only.
  /// A call starts: a new entry in state Running.
  void begin(const OpDesc& op, algorithms::Algorithm algo, uint32_t transports, size_t bytes) {
    const uint64_t t = timed_ ? TickClock::ticks() : 0;
    stats_.begin(op.coll, algo, bytes, t);
    if (trace_) [[unlikely]]
      trace_->callBegin(op, algo, transports, bytes, next_, t);
    if (!slots_) {  // COLLIE_FLIGHT_RECORDER_ENTRIES=0: counted all the same (stats' "N call(s)")
      next_++;
      published_.store(next_, std::memory_order_release);
      return;
    }
    Slot& s = slots_[next_ % capacity_];
    const uint64_t v = s.version.load(std::memory_order_relaxed);
    s.version.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    s.seq.store(next_, std::memory_order_relaxed);
    s.kind.store(pack(op, algo, State::Running), std::memory_order_relaxed);
    s.count.store(op.count, std::memory_order_relaxed);
    s.bytes.store(bytes, std::memory_order_relaxed);
    s.rootAndTransports.store(static_cast<uint32_t>(op.root) | uint64_t{transports} << 32, std::memory_order_relaxed);
    s.start.store(t, std::memory_order_relaxed);
    s.end.store(0, std::memory_order_relaxed);
    s.version.store(v + 2, std::memory_order_release);
    next_++;
    published_.store(next_, std::memory_order_release);
  }
  /// Every call begun since the last finish() ends, successfully or not.
  void finish(bool ok) {
    const uint64_t t = timed_ ? TickClock::ticks() : 0;
    stats_.finish(t);
    if (trace_) [[unlikely]]
      trace_->callsEnd(ok, t);
    if (!slots_) return;
    for (; open_ < next_; ++open_) {
      Slot& s = slots_[open_ % capacity_];
      const uint64_t v = s.version.load(std::memory_order_relaxed);
      s.version.store(v + 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      const uint64_t k = s.kind.load(std::memory_order_relaxed);
      s.kind.store((k & ~uint64_t{0xff}) | static_cast<uint8_t>(ok ? State::Done : State::Failed),
                   std::memory_order_relaxed);
      s.end.store(t, std::memory_order_relaxed);
      s.version.store(v + 2, std::memory_order_release);
    }
  }

  /// The running calls failed with `code`: finish(false), then the log gets summary() for a timeout, and the
  /// dump file is written.
  void failed(ErrorCode code, const std::string& message);

  /// Writes the dump file when COLLIE_FLIGHT_RECORDER is set; `reason` goes into it; then flushes the trace.
  /// Returns the path written (empty when none). Any thread. `fromSignal` (the signal and exit paths, where the
  /// interrupted thread may hold the trace's lock): the trace is flushed only if its lock is free.
  std::string dump(const std::string& reason, bool fromSignal = false);
  /// At exit (the registry's atexit hook): what the trace has buffered is written out, if its lock is free.
  void flushTraceAtExit();
  /// The recorder as JSON (what dump() writes): the last calls, then the queued ones (state "queued", numbered as
  /// they will be when they start).
  std::string toJson(const std::string& reason);
  /// One line for the log: the calls in flight and the last one done.
  std::string summary() const;

  /// Calls begun so far (the next call's sequence number).
  uint64_t calls() const { return published_.load(std::memory_order_acquire); }
  /// Where dump() writes for this rank ("" when COLLIE_FLIGHT_RECORDER is unset).
  std::string path() const;
  const std::string& name() const { return name_; }
  int rank() const { return rank_; }
  int instance() const { return instance_; }  ///< among live recorders of this name and rank in this process
  const TickClock& clock() const { return clock_; }
  /// The calls so far, per collective and algorithm (any thread).
  std::vector<CallStats::Row> statsRows() const { return stats_.rows(clock_.nsPerTick()); }
  bool statsTimed() const { return stats_.timed(); }

 private:
  struct Slot {
    std::atomic<uint64_t> version{0};
    std::atomic<uint64_t> seq{0};
    std::atomic<uint64_t> kind{0};  ///< state | coll << 8 | type << 16 | op << 24 | algo << 32 (pack())
    std::atomic<uint64_t> count{0};
    std::atomic<uint64_t> bytes{0};
    std::atomic<uint64_t> rootAndTransports{0};
    std::atomic<uint64_t> start{0};
    std::atomic<uint64_t> end{0};
  };
  /// One entry as read back, with its fields decoded.
  struct Entry;

  static uint64_t pack(const OpDesc& op, algorithms::Algorithm algo, State state) {
    return static_cast<uint64_t>(state) | uint64_t{static_cast<uint8_t>(op.coll)} << 8 |
           uint64_t{static_cast<uint8_t>(op.type)} << 16 | uint64_t{static_cast<uint8_t>(op.op)} << 24 |
           uint64_t{static_cast<uint8_t>(algo)} << 32;
  }
  bool read(uint64_t seq, Entry* out) const;
  std::string writeDump(const std::string& reason);  // dump()'s own file

  const int rank_, nranks_;
  const std::string name_;
  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  // Start and end times are taken only when something keeps them (COLLIE_FLIGHT_RECORDER, COLLIE_TRACE or
  // COLLIE_STATS=1): the two clock reads are most of the recorder's cost per call (about 20 ns on this project's VM).
  const bool timed_;
  CallStats stats_;
  CallTrace* trace_ = nullptr;
  friend void registerFlightRecorder(FlightRecorder* r);
  int instance_ = 0;         // among live recorders of this name and rank (set by the registry, under its lock)
  bool registered_ = false;  // in the signal/exit registry (flight_signals.cpp): with ring entries or a trace
  uint64_t next_ = 0;        // executing thread only
  uint64_t open_ = 0;        // first call not finished
  std::atomic<uint64_t> published_{0};
  std::vector<std::string> transportNames_;
  std::mutex sourceMu_;  // orders a dump's reads of transportNames_ and queued_ with their replacement
  QueuedSource queued_;
  TickClock clock_;
};

}  // namespace collie::core
