// CallStats: what a communicator did, aggregated: per collective and algorithm, the calls, their bytes and (when
// calls are timed) the time they took. Communicator::stats() and collieCommGetStats() read it; the communicator
// prints summary() at destroy with COLLIE_STATS=1 or COLLIE_DEBUG=INFO, like NCCL_DEBUG=INFO's lines but one table
// for the whole run.
//
// Cost. The flight recorder's begin/finish (flight_recorder.hpp) feed it on the executing thread: a call adds to
// one cell (three words) and remembers the cell until the call ends. No lock and no read-modify-write: each word
// is an atomic written only by the executing thread with a relaxed load and store (plain moves on x86), so that
// stats() may read it from any thread. Time costs two clock reads per call, so it is kept only when the calls are
// timed anyway (COLLIE_FLIGHT_RECORDER or COLLIE_TRACE set) or COLLIE_STATS=1 asks for it. A group's calls end
// together: their time is shared equally among them.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/algorithms.hpp"

namespace collie::core {

class CallStats {
 public:
  static constexpr int kCollectives = algorithms::kNumCollectives;

  /// One collective and algorithm that ran, as read back.
  struct Row {
    algorithms::Collective coll;
    algorithms::Algorithm algo;
    uint64_t calls;
    uint64_t bytes;
    double seconds;  ///< -1 when the calls were not timed
  };

  explicit CallStats(bool timed) : timed_(timed) { open_.reserve(64); }

  /// A call starts (the executing thread).
  void begin(algorithms::Collective coll, algorithms::Algorithm algo, size_t bytes, uint64_t startTicks) {
    Cell& c = cells_[static_cast<size_t>(coll)][static_cast<size_t>(algo)];
    add(c.calls, 1);
    add(c.bytes, bytes);
    if (!timed_) return;
    if (open_.empty()) openedAt_ = startTicks;
    open_.push_back(&c);
  }
  /// Every call begun since the last finish() ends.
  void finish(uint64_t endTicks) {
    if (!timed_ || open_.empty()) return;
    // Clamped as the trace's waits are: a clock read on another core may be a few ticks behind.
    const uint64_t share = (endTicks > openedAt_ ? endTicks - openedAt_ : 0) / open_.size();
    for (Cell* c : open_) add(c->ticks, share);
    open_.clear();
  }

  bool timed() const { return timed_; }
  /// The cells that ran, collectives in enum order, then algorithms; any thread.
  std::vector<Row> rows(double nsPerTick) const;
  /// The table for the log: one line per collective and algorithm, and a total.
  static std::string summary(const std::vector<Row>& rows, bool timed);

 private:
  struct Cell {
    std::atomic<uint64_t> calls{0}, bytes{0}, ticks{0};
  };
  static void add(std::atomic<uint64_t>& w, uint64_t v) {
    w.store(w.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }

  const bool timed_;
  Cell cells_[kCollectives][algorithms::kNumAlgorithms];
  std::vector<Cell*> open_;  // executing thread only
  uint64_t openedAt_ = 0;
};

}  // namespace collie::core
