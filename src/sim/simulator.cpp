#include "sim/simulator.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/errors.hpp"
#include "base/poller.hpp"
#include "core/executor.hpp"

namespace collie::sim {
namespace {

constexpr size_t kGuard = 64;              // bytes after every buffer that must stay untouched
constexpr unsigned char kSentinel = 0xCD;  // initial bytes of outputs and guards

struct Layout {
  size_t in = 0, out = 0;  // elements
};

Layout layoutOf(algorithms::Collective coll, int n, size_t count) {
  const size_t all = count * static_cast<size_t>(n);
  switch (coll) {
    case Collective::AllGather:
      return {count, all};
    case Collective::ReduceScatter:
      return {all, count};
    case Collective::AllToAll:
      return {all, all};
    default:
      return {count, count};
  }
}

// One rank's memory: an input and an output, or one buffer for in-place calls; kGuard bytes after each.
struct RankBuffers {
  std::vector<unsigned char> in, out, both;
  void* input = nullptr;
  void* output = nullptr;
};

// ---- Exact integer data and the results the collectives must produce ------------------------------------------

template <typename T>
T valueAt(int rank, size_t i) {
  uint64_t x = (static_cast<uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull ^
               (static_cast<uint64_t>(i) + 7) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<T>(x);
}

template <typename T>
T combine(T a, T b, ReduceOp op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
    case ReduceOp::PreMulSum:  // the executor's scaling of each input comes before any schedule: factor 1 here
      return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
    case ReduceOp::Prod:
      return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
    case ReduceOp::Max:
      return std::max(a, b);
    case ReduceOp::Min:
      return std::min(a, b);
  }
  return a;
}

template <typename T>
T reducedAt(int n, size_t i, ReduceOp op) {  // element i of every rank's input, reduced
  T acc = valueAt<T>(0, i);
  for (int r = 1; r < n; ++r) acc = combine(acc, valueAt<T>(r, i), op);
  if (op == ReduceOp::Avg) acc = static_cast<T>(acc / n);
  return acc;
}

template <typename T>
void fillInput(void* buf, int rank, size_t count) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < count; ++i) p[i] = valueAt<T>(rank, i);
}

template <typename T, typename Expected>
std::string firstMismatch(const void* buf, size_t count, int rank, const char* what, Expected&& expected) {
  const T* p = static_cast<const T*>(buf);
  for (size_t i = 0; i < count; ++i) {
    T want = expected(i);
    if (p[i] != want) {
      return base::format("rank %d: %s[%zu] = %lld, expected %lld", rank, what, i, static_cast<long long>(p[i]),
                          static_cast<long long>(want));
    }
  }
  return {};
}

std::string untouched(const unsigned char* p, size_t bytes, int rank, const char* what) {
  for (size_t i = 0; i < bytes; ++i)
    if (p[i] != kSentinel) return base::format("rank %d: %s byte %zu was written", rank, what, i);
  return {};
}

// Checks every rank's buffers after the run; returns the first problem found.
template <typename T>
std::string checkResults(const SimOptions& o, const std::vector<RankBuffers>& bufs) {
  const int n = o.nranks;
  const size_t count = o.count;
  const Layout lay = layoutOf(o.coll, n, count);
  const bool inPlace = o.inPlace && o.coll != Collective::AllToAll;
  std::vector<T> reduced;
  if (o.coll == Collective::AllReduce || o.coll == Collective::Reduce) {
    reduced.resize(count);
    for (size_t i = 0; i < count; ++i) reduced[i] = reducedAt<T>(n, i, o.op);
  } else if (o.coll == Collective::ReduceScatter) {
    reduced.resize(lay.in);
    for (size_t i = 0; i < lay.in; ++i) reduced[i] = reducedAt<T>(n, i, o.op);
  }
  for (int r = 0; r < n; ++r) {
    const RankBuffers& b = bufs[static_cast<size_t>(r)];
    std::string err;
    auto mine = [&](size_t i) { return valueAt<T>(r, i); };
    // Send buffers are read-only; so is every byte after a buffer.
    if (!inPlace) err = firstMismatch<T>(b.input, lay.in, r, "input", mine);
    if (err.empty() && !inPlace) err = untouched(b.in.data() + lay.in * sizeof(T), kGuard, r, "guard after input");
    if (err.empty() && !inPlace) err = untouched(b.out.data() + lay.out * sizeof(T), kGuard, r, "guard after output");
    if (err.empty() && inPlace) err = untouched(b.both.data() + b.both.size() - kGuard, kGuard, r, "guard");
    if (!err.empty()) return err;
    // The result.
    switch (o.coll) {
      case Collective::AllReduce:
        err = firstMismatch<T>(b.output, count, r, "output", [&](size_t i) { return reduced[i]; });
        break;
      case Collective::Broadcast:
        err = firstMismatch<T>(b.output, count, r, "output", [&](size_t i) { return valueAt<T>(o.root, i); });
        break;
      case Collective::Reduce:
        if (r == o.root) {
          err = firstMismatch<T>(b.output, count, r, "output", [&](size_t i) { return reduced[i]; });
        } else if (inPlace) {
          err = firstMismatch<T>(b.output, count, r, "buffer (non-root)", mine);
        } else {
          err = untouched(static_cast<const unsigned char*>(b.output), count * sizeof(T), r, "output (non-root)");
        }
        break;
      case Collective::AllGather:
        err = firstMismatch<T>(b.output, lay.out, r, "output",
                               [&](size_t i) { return valueAt<T>(static_cast<int>(i / count), i % count); });
        break;
      case Collective::ReduceScatter:
        err = firstMismatch<T>(b.output, count, r, "output",
                               [&](size_t i) { return reduced[static_cast<size_t>(r) * count + i]; });
        break;
      case Collective::AllToAll:
        err = firstMismatch<T>(b.output, lay.out, r, "output", [&](size_t i) {
          return valueAt<T>(static_cast<int>(i / count), static_cast<size_t>(r) * count + i % count);
        });
        break;
      default:
        break;
    }
    if (!err.empty()) return err;
  }
  return {};
}

template <typename T>
void prepare(const SimOptions& o, std::vector<RankBuffers>& bufs) {
  const int n = o.nranks;
  const Layout lay = layoutOf(o.coll, n, o.count);
  const bool inPlace = o.inPlace && o.coll != Collective::AllToAll;
  for (int r = 0; r < n; ++r) {
    RankBuffers& b = bufs[static_cast<size_t>(r)];
    if (inPlace) {
      const size_t elems = std::max(lay.in, lay.out);
      b.both.assign(elems * sizeof(T) + kGuard, kSentinel);
      unsigned char* base = b.both.data();
      if (o.coll == Collective::AllGather) {
        b.output = base;
        b.input = base + static_cast<size_t>(r) * o.count * sizeof(T);
      } else if (o.coll == Collective::ReduceScatter) {
        b.input = base;
        b.output = base + static_cast<size_t>(r) * o.count * sizeof(T);
      } else {
        b.input = b.output = base;
      }
    } else {
      b.in.assign(lay.in * sizeof(T) + kGuard, kSentinel);
      b.out.assign(lay.out * sizeof(T) + kGuard, kSentinel);
      b.input = b.in.data();
      b.output = b.out.data();
    }
    fillInput<T>(b.input, r, lay.in);
  }
}

template <typename F>
auto byIntegerType(DataType type, F&& f) {
  switch (type) {
    case DataType::Int8:
      return f(int8_t{});
    case DataType::Uint8:
      return f(uint8_t{});
    case DataType::Int32:
      return f(int32_t{});
    case DataType::Uint32:
      return f(uint32_t{});
    case DataType::Int64:
      return f(int64_t{});
    case DataType::Uint64:
      return f(uint64_t{});
    default:
      break;
  }
  COLLIE_FAIL(ErrorCode::InvalidArgument, "simulator: data checks need an integer type, not %s",
              base::dataTypeName(type));
}

// The receives each rank posts from each peer, in posting order, marked when they are reduced after landing
// (for the gamma part of the time model). Mirrors how the executor slices a step (core/executor.cpp).
void setReduceMarks(sim::MemoryFabric& fabric, int rank, const Schedule& sch, size_t elemSize, size_t sliceBytes) {
  const size_t sliceElems = std::max<size_t>(1, sliceBytes / elemSize);
  std::vector<std::pair<int, std::vector<uint8_t>>> byPeer;
  for (const Step& s : sch.steps) {
    if (s.recvPeer < 0 || s.count == 0 || s.kind == StepKind::Copy) continue;
    auto it = std::find_if(byPeer.begin(), byPeer.end(), [&](const auto& e) { return e.first == s.recvPeer; });
    if (it == byPeer.end()) it = byPeer.insert(byPeer.end(), {s.recvPeer, {}});
    const bool reduces = s.kind == StepKind::RecvReduce || s.kind == StepKind::RecvReduceSend;
    it->second.insert(it->second.end(), (s.count + sliceElems - 1) / sliceElems, reduces ? 1 : 0);
  }
  for (auto& [peer, marks] : byPeer)
    if (peer != rank) fabric.setReduceMarks(rank, peer, std::move(marks));
}

}  // namespace

SimResult simulate(const SimOptions& o) {
  const int n = o.nranks;
  COLLIE_ARG_CHECK(n >= 1, "simulator: nranks=%d", n);
  COLLIE_ARG_CHECK(algorithms::supports(o.algo, o.coll), "simulator: %s does not implement %s",
                   algorithms::algorithmName(o.algo), algorithms::collectiveName(o.coll));
  COLLIE_ARG_CHECK(o.coll != Collective::Send && o.coll != Collective::Recv,
                   "simulator: Send/Recv are not collectives");
  COLLIE_ARG_CHECK(o.root >= 0 && o.root < n, "simulator: root=%d with nranks=%d", o.root, n);
  COLLIE_ARG_CHECK(o.hosts.describes(n), "simulator: a host layout of %zu ranks with nranks=%d", o.hosts.hostOf.size(),
                   n);
  const size_t elemSize = base::dataTypeSize(o.type);
  COLLIE_ARG_CHECK(elemSize > 0, "simulator: invalid data type");

  SimResult res;
  // Schedules and buffers.
  std::vector<algorithms::Schedule> schedules(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    schedules[static_cast<size_t>(r)] =
        algorithms::build(o.algo, algorithms::ScheduleKey{o.coll, r, n, o.count, o.root, elemSize}, o.hosts);
    if (o.mutate) o.mutate(r, schedules[static_cast<size_t>(r)]);
  }
  std::vector<RankBuffers> bufs(static_cast<size_t>(n));
  RankBuffers shared;
  if (o.checkData) {
    byIntegerType(o.type, [&](auto t) { prepare<decltype(t)>(o, bufs); });
  } else {
    const Layout lay = layoutOf(o.coll, n, o.count);
    shared.in.assign(lay.in * elemSize + kGuard, 0);
    shared.out.assign(lay.out * elemSize + kGuard, 0);
    for (RankBuffers& b : bufs) {
      b.input = shared.in.data();
      b.output = shared.out.data();
    }
  }

  // Links, executors, jobs.
  sim::MemoryFabric fabric(n, o.cost, o.checkData);
  fabric.setHosts(o.hosts.hostOf, o.interHost);
  base::Poller poller;  // required by the executor; never waited on (step() does not wait)
  std::atomic<bool> abortFlag{false};
  std::vector<std::vector<std::unique_ptr<transport::Connection>>> owned(static_cast<size_t>(n));
  std::vector<std::unique_ptr<core::Executor>> execs(static_cast<size_t>(n));
  std::vector<core::Job> jobs(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const Schedule& sch = schedules[static_cast<size_t>(r)];
    std::vector<transport::Connection*> conns(static_cast<size_t>(n), nullptr);
    for (const Step& s : sch.steps) {
      for (int p : {s.sendPeer, s.recvPeer}) {
        if (p < 0 || conns[static_cast<size_t>(p)] != nullptr) continue;
        COLLIE_INTERNAL_CHECK(p < n, "rank %d: schedule names peer %d of %d", r, p, n);
        auto c = p == r ? transport::makeSelfConnection(r) : fabric.connect(r, p);
        conns[static_cast<size_t>(p)] = c.get();
        owned[static_cast<size_t>(r)].push_back(std::move(c));
      }
    }
    setReduceMarks(fabric, r, sch, elemSize, o.sliceBytes);
    execs[static_cast<size_t>(r)] = std::make_unique<core::Executor>(r, n, std::move(conns), poller, abortFlag, "sim");
    core::Job& job = jobs[static_cast<size_t>(r)];
    job.schedule = &sch;
    job.buffers =
        core::JobBuffers{bufs[static_cast<size_t>(r)].input, bufs[static_cast<size_t>(r)].output, o.type, o.op};
    job.sliceBytes = o.sliceBytes;
    job.slicesInFlight = o.slicesInFlight;
    res.maxSteps = std::max(res.maxSteps, sch.steps.size());
  }

  // Run: step every rank that may move until none can, then move the clock to the next delivery.
  std::vector<int> dirty, next, woken;
  std::vector<uint8_t> queued(static_cast<size_t>(n), 0), finished(static_cast<size_t>(n), 0);
  int doneCount = 0;
  int current = -1;
  try {
    for (int r = 0; r < n; ++r) {
      current = r;
      execs[static_cast<size_t>(r)]->begin(std::span<const core::Job>(&jobs[static_cast<size_t>(r)], 1));
      dirty.push_back(r);
    }
    auto enqueue = [&](int r) {
      if (!finished[static_cast<size_t>(r)] && !queued[static_cast<size_t>(r)]) {
        queued[static_cast<size_t>(r)] = 1;
        next.push_back(r);
      }
    };
    while (true) {
      while (!dirty.empty()) {
        next.clear();
        for (int r : dirty) {
          current = r;
          core::Executor& e = *execs[static_cast<size_t>(r)];
          bool moved = e.step();
          if (e.done()) {
            if (!finished[static_cast<size_t>(r)]) ++doneCount;
            finished[static_cast<size_t>(r)] = 1;
          } else if (moved) {
            enqueue(r);
          }
        }
        current = -1;
        woken.clear();
        fabric.takeWoken(woken);
        for (int r : woken) enqueue(r);
        for (int r : next) queued[static_cast<size_t>(r)] = 0;
        dirty.swap(next);
      }
      if (doneCount == n) break;
      if (!fabric.advanceClock()) {
        std::string who;
        int listed = 0;
        for (int r = 0; r < n && listed < 8; ++r) {
          if (finished[static_cast<size_t>(r)]) continue;
          std::string p = fabric.pendingOf(r);
          who += base::format("\n  rank %d: %s", r,
                              p.empty() ? "nothing in flight (its next step cannot start)" : p.c_str());
          ++listed;
        }
        res.error = base::format("deadlock: %d of %d ranks cannot move and nothing is in flight:%s%s", n - doneCount, n,
                                 who.c_str(), n - doneCount > listed ? "\n  ..." : "");
        return res;
      }
      fabric.deliverDue();
      woken.clear();
      fabric.takeWoken(woken);
      for (int r : woken) enqueue(r);
      for (int r : next) queued[static_cast<size_t>(r)] = 0;
      dirty.swap(next);
      next.clear();
    }
  } catch (const Error& e) {
    res.error = current >= 0 ? base::format("rank %d: %s", current, e.what()) : std::string(e.what());
    for (auto& ex : execs) ex->cancel();
    return res;
  }
  res.seconds = fabric.now();
  for (int r = 0; r < n; ++r) {
    uint64_t b = fabric.bytesSent(r);
    res.totalBytesSent += b;
    if (b > res.maxBytesSent) {
      res.maxBytesSent = b;
      res.busiestRank = r;
    }
    res.maxMessages = std::max(res.maxMessages, fabric.messagesSent(r));
  }
  if (!fabric.quiet()) {
    res.error = "transfers left over after every rank finished";
    return res;
  }
  if (o.checkData) {
    res.error = byIntegerType(o.type, [&](auto t) { return checkResults<decltype(t)>(o, bufs); });
    if (!res.error.empty()) return res;
  }
  res.ok = true;
  return res;
}

}  // namespace collie::sim
