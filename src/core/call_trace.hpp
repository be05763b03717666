// CallTrace: a timeline of one communicator's calls, written as Chrome trace JSON (the Trace Event Format's array
// form) that Perfetto (ui.perfetto.dev) and chrome://tracing open. On with COLLIE_TRACE=PREFIX: rank R writes
// PREFIX.rank<R>.trace.json (PREFIX.<comm>.rank<R>.trace.json for a communicator not named "comm"; .rank<R>.N. when
// that file exists already: a second communicator of the same name, or a recreated one), and
// tools/collie-trace merges the ranks' files into one view, one process track per rank.
//
// What it holds, per rank (pid = rank):
//   - thread "calls": one slice per collective call: its name, and as args the call number, dtype, op, count,
//     bytes, root, algorithm, transports and whether it failed;
//   - threads "recv from rank P" / "send to rank P": one slice per schedule step and peer, from the step's start
//     until its last receive from P arrived (the wait on P) or its last send to P completed; a slice starts no
//     earlier than the previous one on its thread ended, since transfers with one peer complete in order;
//   - threads "ddp bucket K" (src/ddp/): "ready" while the bucket's gradients come in, "reduce" from its launch
//     until its average was taken.
//
// Clock. The flight recorder's (TickClock, flight_recorder.hpp): a time-stamp counter read on the hot path,
// turned into CLOCK_REALTIME microseconds when written. Ranks on one host share that clock; across hosts it is as
// aligned as NTP keeps them. Each file's ts are microseconds since its own "base_us" (process_name's args), so a
// double keeps sub-microsecond precision; collie-trace re-bases every rank on the earliest.
//
// Cost. Off, the hooks are one predictable branch each (a null pointer: the recorder's begin/finish, three points
// in the executor). On, an event is a clock read and a few stores; a call's events are queued under a mutex once,
// when it ends (the DDP thread queues its spans too); every 4096 events, and on failure, abort,
// SIGUSR1/SIGTERM/SIGABRT (the flight recorder's dump hooks; skipped if the interrupted thread holds the lock),
// destroy, and exit() without a destroy (an atexit hook, flight_signals.cpp), they are formatted (std::to_chars,
// compact JSON: about 0.2 us an event) and written out. The array is closed at destroy; a file cut short by a killed
// process still loads (the format allows a missing "]", and collie-trace reads it), without the events of its last
// interval.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "core/op_desc.hpp"

namespace collie::core {

class TickClock;

/// `s` escaped for the inside of a JSON string (quote, backslash, control characters); the trace's and the flight
/// recorder's files.
std::string jsonEscaped(const std::string& s);
/// The transports of a call's bitmask (bit t: names[t], the planner's order of preference), joined by "+";
/// "self" when none (one rank, or nothing to move).
std::string transportsNamed(uint32_t mask, const std::vector<std::string>& names);

class CallTrace {
 public:
  /// The trace of this communicator, or null when COLLIE_TRACE is unset. A file that cannot be opened is logged
  /// (WARN) and gives null: the job runs on without a trace.
  static std::unique_ptr<CallTrace> open(int rank, int nranks, const std::string& commName, const TickClock& clock,
                                         std::vector<std::string> transportNames);
  /// Where rank `rank` of `commName` writes, for a COLLIE_TRACE of `prefix`: instance 0 is the first such
  /// communicator in the run; a name and rank whose file exists already gets the first free instance N > 0
  /// (PREFIX[.<comm>].rank<R>.N.trace.json), so no file is ever replaced.
  static std::string pathFor(const std::string& prefix, const std::string& commName, int rank, int instance = 0);
  ~CallTrace();  ///< flushes and closes the array

  // From the flight recorder's hooks, on the executing thread.
  void callBegin(const OpDesc& op, algorithms::Algorithm algo, uint32_t transports, size_t bytes, uint64_t seq,
                 uint64_t startTicks);
  void callsEnd(bool ok, uint64_t endTicks);
  /// From the executor: step `step` of the batch's job `job` waited on `peer` (received from it when `recv`, else
  /// sent to it) from `start` to `end`.
  void stepWait(size_t job, size_t step, int peer, bool recv, size_t bytes, uint64_t start, uint64_t end);
  /// From the DDP layer (any thread): a span on the track "ddp bucket <bucket>".
  void ddpSpan(const char* name, size_t bucket, size_t bytes, uint64_t start, uint64_t end);

  /// Writes out what is buffered (any thread).
  void flush();
  /// flush() if the lock is free (signal and exit paths, where its holder may never run again); false if not.
  bool tryFlush();
  const std::string& path() const { return path_; }

 private:
  enum class Kind : uint8_t { Call, Wait, Ddp };
  struct Event {
    Kind kind;
    bool flag;  // Call: ok; Wait: recv
    algorithms::Collective coll;
    DataType type;
    ReduceOp op;
    algorithms::Algorithm algo;
    int32_t peerOrRoot;
    uint32_t transports;
    uint64_t seq;    // Call/Wait: the call's number; Ddp: the bucket
    uint64_t count;  // Call: elements; Wait: the step; Ddp: unused
    uint64_t bytes;
    uint64_t start, end;
    const char* name;  // Ddp only (a literal)
  };

  CallTrace(int rank, int nranks, std::string commName, const TickClock& clock, std::string path, FILE* file,
            std::vector<std::string> transportNames);
  void push(const Event& e);  // under mu_
  void writeLocked();
  void format(const Event& e, double nsPerTick, std::string* text);
  void nameThread(uint64_t tid, std::string* out);

  const int rank_, nranks_;
  const std::string name_;
  const TickClock& clock_;
  const std::string path_;
  std::vector<std::string> transportNames_;
  std::mutex mu_;
  FILE* file_;
  std::vector<Event> events_;      // not yet written
  std::vector<Event> open_;        // calls begun, not yet ended, then their waits (executing thread)
  size_t calls_ = 0;               // the calls at the front of open_
  std::vector<uint64_t> lastEnd_;  // by wait thread id: the end of its last slice, in ticks
  std::vector<uint64_t> named_;    // thread ids whose thread_name is written
};

}  // namespace collie::core
