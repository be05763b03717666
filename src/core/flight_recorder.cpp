// FlightRecorder's cold half: reading entries back, the JSON dump, the log summary (see flight_recorder.hpp).
#include "core/flight_recorder.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <ctime>

#include "base/datatypes.hpp"
#include "base/errors.hpp"
#include "base/log.hpp"
#include "base/params.hpp"

namespace collie::core {

namespace {

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int64_t wallNowUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* stateName(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::Running:
      return "running";
    case FlightRecorder::State::Done:
      return "done";
    case FlightRecorder::State::Failed:
      return "failed";
  }
  return "unknown";
}

std::string jsonString(const std::string& s) { return "\"" + jsonEscaped(s) + "\""; }

}  // namespace

struct FlightRecorder::Entry {
  uint64_t seq;
  State state;
  algorithms::Collective coll;
  DataType type;
  ReduceOp op;
  algorithms::Algorithm algo;
  uint64_t count, bytes;
  int root;
  uint32_t transports;
  uint64_t start, end;
};

FlightRecorder::FlightRecorder(int rank, int nranks, std::string commName, size_t entries)
    : rank_(rank),
      nranks_(nranks),
      name_(std::move(commName)),
      capacity_(entries),
      slots_(entries ? std::make_unique<Slot[]>(entries) : nullptr),
      timed_(!base::params::flightRecorder().empty() || !base::params::trace().empty() || base::params::stats() == 1),
      stats_(timed_) {
  if (slots_) {
    registerFlightRecorder(this);
    registered_ = true;
  }
}

FlightRecorder::~FlightRecorder() {
  if (registered_) unregisterFlightRecorder(this);
}

void FlightRecorder::setTrace(CallTrace* trace) {
  trace_ = trace;
  if (trace && !registered_) {  // COLLIE_FLIGHT_RECORDER_ENTRIES=0: registered for the trace's flushes alone
    registerFlightRecorder(this);
    registered_ = true;
  }
}

void FlightRecorder::setQueuedSource(QueuedSource source) {
  std::lock_guard<std::mutex> lock(sourceMu_);
  queued_ = std::move(source);
}

void FlightRecorder::setTransportNames(std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(sourceMu_);  // a dump (SIGUSR1) may run during init
  transportNames_ = std::move(names);
}

// A slot being written (odd version, or a version that moved during the read) is read again: the writer is a few
// stores from done. A slot that holds a newer call than `seq` (the ring went round) gives false.
bool FlightRecorder::read(uint64_t seq, Entry* e) const {
  const Slot& s = slots_[seq % capacity_];
  uint64_t kind = 0, rt = 0;
  for (int attempt = 0;; ++attempt) {
    if (attempt == 100000) return false;  // the writer stopped mid-entry (a signal on its thread): give up
    const uint64_t v1 = s.version.load(std::memory_order_acquire);
    if (v1 & 1) continue;
    kind = s.kind.load(std::memory_order_relaxed);
    rt = s.rootAndTransports.load(std::memory_order_relaxed);
    e->seq = s.seq.load(std::memory_order_relaxed);
    e->count = s.count.load(std::memory_order_relaxed);
    e->bytes = s.bytes.load(std::memory_order_relaxed);
    e->start = s.start.load(std::memory_order_relaxed);
    e->end = s.end.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.version.load(std::memory_order_relaxed) == v1) break;
  }
  if (e->seq != seq) return false;
  e->state = static_cast<State>(kind & 0xff);
  e->coll = static_cast<algorithms::Collective>((kind >> 8) & 0xff);
  e->type = static_cast<DataType>((kind >> 16) & 0xff);
  e->op = static_cast<ReduceOp>((kind >> 24) & 0xff);
  e->algo = static_cast<algorithms::Algorithm>((kind >> 32) & 0xff);
  e->root = static_cast<int>(static_cast<int32_t>(rt & 0xffffffffu));
  e->transports = static_cast<uint32_t>(rt >> 32);
  return true;
}

namespace {

/// One tick count and one steady-clock reading of the same instant (and, when `wallUs` is given, the wall clock's):
/// of eight tries, the one whose tick reads around the clock reads are closest together. A preemption between the
/// reads (a loaded host) would otherwise shift every time the clock gives against the other ranks' clocks, at the
/// origin, or skew the rate: 100 us lost between the two reads, 100 ms after the origin, is 0.1% of every
/// interval, 60 us at the end of a 60 ms trace.
void readTogether(uint64_t* ticks, int64_t* steady, int64_t* wallUs) {
  uint64_t tightest = UINT64_MAX;
  for (int i = 0; i < 8; ++i) {
    const uint64_t before = TickClock::ticks();
    const int64_t s = steadyNs();
    const int64_t w = wallUs ? wallNowUs() : 0;
    const uint64_t after = TickClock::ticks();
    if (after - before >= tightest) continue;
    tightest = after - before;
    *ticks = before + (after - before) / 2;
    *steady = s;
    if (wallUs) *wallUs = w;
  }
}

}  // namespace

TickClock::TickClock() : originTicks_(0), originSteadyNs_(0), originWallUs_(0) {
  readTogether(&originTicks_, &originSteadyNs_, &originWallUs_);
}

double TickClock::nsPerTick() const {
#if defined(__x86_64__)
  uint64_t t = 0;
  int64_t now = 0;
  readTogether(&t, &now, nullptr);
  const int64_t ns = now - originSteadyNs_;
  if (t <= originTicks_ || ns < 1000000) return 1.0 / 2.5;  // too soon to measure: assume 2.5 GHz
  return static_cast<double>(ns) / static_cast<double>(t - originTicks_);
#else
  return 1.0;
#endif
}

std::string FlightRecorder::toJson(const std::string& reason) {
  // Newest first: while this reads, new calls overwrite the oldest slots, so the calls that matter most are read
  // before the ring can come round to them. A reader held up long enough for the ring to come round past even the
  // newest (a descheduled thread on a loaded host) reads again.
  uint64_t n = 0;
  std::vector<Entry> entries;
  for (int attempt = 0; attempt < 5; ++attempt) {
    n = calls();
    const uint64_t first = n > capacity_ ? n - capacity_ : 0;
    entries.clear();
    entries.reserve(static_cast<size_t>(n - first));
    for (uint64_t seq = n; seq-- > first;) {
      Entry e{};
      if (read(seq, &e)) entries.push_back(e);
    }
    if (n == 0 || (!entries.empty() && entries.front().seq + 1 == n)) break;
  }
  const double npt = clock_.nsPerTick();
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::string out = base::format(
      "{\"format\": \"collie-flight-recorder/1\", \"comm\": %s, \"instance\": %d, \"rank\": %d, \"nranks\": %d, "
      "\"host\": %s, "
      "\"pid\": %d, \"reason\": %s, \"dumped_at_us\": %lld, \"calls\": %llu, \"entries\": [",
      jsonString(name_).c_str(), instance_, rank_, nranks_, jsonString(host).c_str(), static_cast<int>(getpid()),
      jsonString(reason).c_str(), static_cast<long long>(wallNowUs()), static_cast<unsigned long long>(n));
  std::vector<std::string> names;
  std::vector<OpDesc> queued;
  {
    std::lock_guard<std::mutex> lock(sourceMu_);
    names = transportNames_;
    if (queued_) queued = queued_();
  }
  bool any = false;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    const Entry& e = *it;
    const std::string transport = transportsNamed(e.transports, names);
    const double startUs = clock_.wallUs(e.start, npt);
    out += base::format(
        "%s\n  {\"seq\": %llu, \"coll\": \"%s\", \"dtype\": \"%s\", \"op\": \"%s\", \"count\": %llu, \"bytes\": %llu, "
        "\"root\": %d, \"algo\": \"%s\", \"transport\": \"%s\", \"state\": \"%s\", \"start_us\": %.1f",
        any ? "," : "", static_cast<unsigned long long>(e.seq), algorithms::collectiveName(e.coll),
        base::dataTypeName(e.type), base::reduceOpName(e.op), static_cast<unsigned long long>(e.count),
        static_cast<unsigned long long>(e.bytes), e.root, algorithms::algorithmName(e.algo), transport.c_str(),
        stateName(e.state), startUs);
    if (e.state != State::Running && e.end >= e.start) {
      out += base::format(", \"end_us\": %.1f, \"duration_us\": %.1f", clock_.wallUs(e.end, npt),
                          static_cast<double>(e.end - e.start) * npt / 1000.0);
    }
    out += "}";
    any = true;
  }
  uint64_t seq = n;
  for (const OpDesc& q : queued) {
    out += base::format(
        "%s\n  {\"seq\": %llu, \"coll\": \"%s\", \"dtype\": \"%s\", \"op\": \"%s\", \"count\": %zu, \"bytes\": %zu, "
        "\"root\": %d, \"state\": \"queued\"}",
        any ? "," : "", static_cast<unsigned long long>(seq++), algorithms::collectiveName(q.coll),
        base::dataTypeName(q.type), base::reduceOpName(q.op), q.count, q.count * base::dataTypeSize(q.type), q.root);
    any = true;
  }
  return out + "\n]}\n";
}

std::string FlightRecorder::summary() const {
  const uint64_t n = calls();
  const uint64_t first = n > capacity_ ? n - capacity_ : 0;
  const double npt = clock_.nsPerTick();
  std::string open, lastDone;
  for (uint64_t seq = n; seq-- > first;) {
    Entry e{};
    if (!read(seq, &e)) continue;
    std::string what = base::format("#%llu %s(%s, %s, %llu B)", static_cast<unsigned long long>(e.seq),
                                    algorithms::collectiveName(e.coll), base::dataTypeName(e.type),
                                    base::reduceOpName(e.op), static_cast<unsigned long long>(e.bytes));
    if (e.state == State::Running) {
      const std::string since =
          e.start ? base::format(" for %.0f ms", static_cast<double>(TickClock::ticks() - e.start) * npt / 1e6)
                  : std::string();
      open = base::format("%s running%s%s%s", what.c_str(), since.c_str(), open.empty() ? "" : "; ", open.c_str());
    } else if (e.state == State::Done) {
      lastDone = what;
      break;
    } else if (open.empty()) {
      open = what + " failed";
    }
  }
  return base::format("%s rank %d: %llu call(s); in flight: %s; last done: %s", name_.c_str(), rank_,
                      static_cast<unsigned long long>(n), open.empty() ? "none" : open.c_str(),
                      lastDone.empty() ? "none" : lastDone.c_str());
}

std::string FlightRecorder::path() const {
  const std::string& prefix = base::params::flightRecorder();
  if (prefix.empty() || !slots_) return {};
  const std::string named = name_ == "comm" ? prefix : prefix + "." + name_;
  if (instance_ > 0) return base::format("%s.rank%d.%d.json", named.c_str(), rank_, instance_);
  return base::format("%s.rank%d.json", named.c_str(), rank_);
}

void FlightRecorder::failed(ErrorCode code, const std::string& message) {
  finish(false);
  if (!slots_ && !trace_) return;
  if (code == ErrorCode::Timeout && slots_) COLLIE_WARN(base::kLogColl, "flight recorder: %s", summary().c_str());
  dump(std::string(base::errorCodeName(code)) + ": " + message);
}

void FlightRecorder::flushTraceAtExit() {
  if (trace_) trace_->tryFlush();
}

std::string FlightRecorder::dump(const std::string& reason, bool fromSignal) {
  // The recorder's own file first: the trace's flush may wait on its lock (or, from a signal, be skipped).
  const std::string file = writeDump(reason);
  if (trace_) {
    if (!fromSignal)
      trace_->flush();
    else if (!trace_->tryFlush())
      COLLIE_INFO(base::kLogColl, "%s rank %d: the trace was busy at the %s: its buffered events are not written",
                  name_.c_str(), rank_, reason.c_str());
  }
  return file;
}

std::string FlightRecorder::writeDump(const std::string& reason) {
  const std::string file = path();
  if (file.empty()) return {};
  const std::string text = toJson(reason);
  static std::atomic<unsigned> dumps{0};  // two threads may dump at once (abort while a call fails)
  const std::string tmp = base::format("%s.tmp.%d.%u", file.c_str(), static_cast<int>(getpid()), dumps.fetch_add(1));
  FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f) ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), file.c_str()) != 0) {
    COLLIE_WARN(base::kLogColl, "%s rank %d: could not write the flight recorder to %s: %s", name_.c_str(), rank_,
                file.c_str(), base::errnoString(errno).c_str());
    std::remove(tmp.c_str());
    return {};
  }
  COLLIE_INFO(base::kLogColl, "%s rank %d: flight recorder written to %s (%s)", name_.c_str(), rank_, file.c_str(),
              reason.c_str());
  return file;
}

}  // namespace collie::core
