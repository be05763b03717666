// The timeline (COLLIE_TRACE, src/core/call_trace.hpp) and the statistics (Communicator::stats, COLLIE_STATS) with
// every rank a forked process. The trace: each rank runs a known sequence of calls and two DDP iterations, then
// tests/multiproc/helpers/check_trace.py parses every rank's JSON (names, args, per-peer waits inside their calls
// and matched by the peer's sends, DDP bucket spans) and runs tools/collie-trace on them (one track per rank,
// events in time order, one clock). A rank ended by SIGTERM leaves a file that still loads, with its calls.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <collie/ddp.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/collie-trace-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string runChecker(const std::string& prefix, int nranks, const std::string& extra, int* status) {
  const std::string cmd = std::string("/usr/bin/python3 ") + COLLIE_TRACE_CHECK_PATH + " " + prefix + " " +
                          std::to_string(nranks) + " " + COLLIE_TRACE_TOOL_PATH + " " + extra + " 2>&1";
  return runCommand(cmd, status);
}

/// The calls check_trace.py expects first, each result checked.
void knownCalls(Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  std::vector<float> a(8, static_cast<float>(r + 1));
  comm.allReduce(a.data(), a.data(), a.size(), DataType::Float32, ReduceOp::Sum);
  for (float x : a) ASSERT_EQ(x, static_cast<float>(n * (n + 1) / 2));
  std::vector<float> b(16384, r == 1 ? 3.5f : 0.0f);
  comm.broadcast(b.data(), b.data(), b.size(), DataType::Float32, 1);
  for (float x : b) ASSERT_EQ(x, 3.5f);
  std::vector<int32_t> mine(4, r), all(4 * static_cast<size_t>(n), -1);
  comm.allGather(mine.data(), all.data(), mine.size(), DataType::Int32);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], static_cast<int32_t>(i / 4));
}

/// The rest: a group of Send/Recv around the ring, an async AllReduce, two DDP iterations.
void laterCalls(Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  std::vector<int64_t> out(32, r), in(32, -1);
  groupStart();
  comm.send(out.data(), out.size(), DataType::Int64, (r + 1) % n);
  comm.recv(in.data(), in.size(), DataType::Int64, (r + n - 1) % n);
  groupEnd();
  for (int64_t x : in) ASSERT_EQ(x, (r + n - 1) % n);
  std::vector<int64_t> m(4, r);
  comm.allReduceAsync(m.data(), m.data(), m.size(), DataType::Int64, ReduceOp::Max).wait();
  for (int64_t x : m) ASSERT_EQ(x, n - 1);

  std::vector<ddp::Parameter> params(3);
  const size_t counts[3] = {4096, 2048, 1024};
  for (size_t i = 0; i < 3; ++i) params[i].count = counts[i];
  ddp::ReducerOptions ro;
  ro.bucketCapBytes = ro.firstBucketCapBytes = 8192;  // one parameter per bucket
  ro.broadcastParameters = false;
  ddp::GradientReducer red(comm, params, ro);
  std::vector<std::vector<float>> grads(3);
  for (int it = 0; it < 2; ++it) {
    for (size_t i = 0; i < 3; ++i) grads[i].assign(counts[i], static_cast<float>(r + it));
    for (size_t i = 3; i-- > 0;) red.markReady(i, grads[i].data());
    red.finalize();
    const float mean = static_cast<float>(n - 1) / 2.0f + static_cast<float>(it);
    for (size_t i = 0; i < 3; ++i)
      for (float x : grads[i]) ASSERT_FLOAT_EQ(x, mean) << "parameter " << i << " iteration " << it;
  }
}

TEST(TraceProc, EveryRankWritesItsCallsWaitsAndDdpSpans) {
  constexpr int kRanks = 3;
  TempDir dir;
  const std::string prefix = (dir.path / "job").string();
  ScopedEnv trace("COLLIE_TRACE", prefix.c_str());
  auto exits = ProcessLauncher::run(kRanks, [](Communicator& comm) {
    knownCalls(comm);
    laterCalls(comm);
  });
  ASSERT_TRUE(allRanksSucceeded(exits));
  int status = 0;
  const std::string report = runChecker(prefix, kRanks, "", &status);
  std::printf("%s", report.c_str());
  EXPECT_EQ(status, 0) << report;
}

TEST(TraceProc, ARankEndedBySigtermLeavesALoadableTrace) {
  // Rank 2 makes the first three calls, then sleeps until SIGTERM: the signal's dump writes its buffered events
  // (the array stays open), and the tool merges its file with the others'.
  constexpr int kRanks = 3, kKilled = 2;
  TempDir dir;
  const std::string prefix = (dir.path / "term").string();
  ScopedEnv trace("COLLIE_TRACE", prefix.c_str());
  ProcessLauncher launcher(kRanks, Options{30s, ""});
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    knownCalls(comm);
    sh.counters[0].fetch_add(1);
    if (comm.rank() == kKilled) std::this_thread::sleep_for(60s);
  });
  ASSERT_TRUE(waitForCount(sh.counters[0], kRanks, 60s)) << "the ranks did not finish their calls";
  // The others destroy their communicators meanwhile (their destroy waits on nobody).
  launcher.kill(kKilled, SIGTERM);
  auto exits = launcher.wait(60s);
  EXPECT_TRUE(exits[0].ok() && exits[1].ok()) << exits[0].describe() << exits[1].describe();
  EXPECT_EQ(exits[kKilled].signal, SIGTERM) << exits[kKilled].describe();
  int status = 0;
  const std::string report = runChecker(prefix, kRanks, "--cut " + std::to_string(kKilled), &status);
  std::printf("%s", report.c_str());
  EXPECT_EQ(status, 0) << report;
}

/// How many call slices `path` holds (its text, a compact JSON array, perhaps without its "]").
size_t tracedCalls(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return 0;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  std::fclose(f);
  size_t calls = 0;
  for (size_t at = 0; (at = text.find("\"cat\":\"call\"", at)) != std::string::npos; ++at) ++calls;
  return calls;
}

TEST(TraceProc, TwoLiveCommunicatorsOfOneNameWriteSeparateTraces) {
  // Both splits are named "twin" (as every torch process group is "torch"): the second takes .rank<R>.1., and
  // collie-trace merges it as a communicator of its own.
  constexpr int kRanks = 2;
  TempDir dir;
  const std::string prefix = (dir.path / "twin").string();
  ScopedEnv trace("COLLIE_TRACE", prefix.c_str());
  auto exits = ProcessLauncher::run(kRanks, [](Communicator& comm) { twoSameNamedSplitsBody(comm, "twin"); });
  ASSERT_TRUE(allRanksSucceeded(exits));
  for (int r = 0; r < kRanks; ++r) {
    const std::string first = prefix + ".twin.rank" + std::to_string(r) + ".trace.json";
    const std::string second = prefix + ".twin.rank" + std::to_string(r) + ".1.trace.json";
    EXPECT_EQ(tracedCalls(first), 2u) << first;
    EXPECT_EQ(tracedCalls(second), 3u) << second;
  }
  int status = 0;
  const std::string out =
      runCommand(std::string("/usr/bin/python3 ") + COLLIE_TRACE_TOOL_PATH + " " + prefix + " 2>&1", &status);
  EXPECT_EQ(status, 0) << out;
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_NE(out.find("twin rank " + std::to_string(r) + ": 2 calls"), std::string::npos) << out;
    EXPECT_NE(out.find("twin #1 rank " + std::to_string(r) + ": 3 calls"), std::string::npos) << out;
  }
}

TEST(TraceProc, ARankExitingWithoutDestroyWritesItsBufferedEvents) {
  // Fewer events than a flush interval, and exit() with the communicator alive: the atexit hook writes them.
  TempDir dir;
  const std::string prefix = (dir.path / "exit").string();
  ScopedEnv trace("COLLIE_TRACE", prefix.c_str());
  auto exits = ProcessLauncher::run(2, [](Communicator& comm) {
    std::vector<float> v(8, 1.0f);
    for (int i = 0; i < 4; ++i) comm.allReduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
    std::exit(0);  // no destroy
  });
  ASSERT_TRUE(allRanksSucceeded(exits));
  for (int r = 0; r < 2; ++r) {
    const std::string path = prefix + ".rank" + std::to_string(r) + ".trace.json";
    EXPECT_EQ(tracedCalls(path), 4u) << path;
  }
}

TEST(StatsProc, CountsCallsWithTheRingOff) {
  ScopedEnv stats("COLLIE_STATS", "1");
  ScopedEnv entries("COLLIE_FLIGHT_RECORDER_ENTRIES", "0");
  auto exits = ProcessLauncher::run(2, [](Communicator& comm) {
    std::vector<float> v(64, 1.0f);
    for (int i = 0; i < 3; ++i) comm.allReduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
    const CommStats s = comm.stats();
    EXPECT_NE(s.summary.find(": 3 call(s)"), std::string::npos) << s.summary;
    ASSERT_EQ(s.rows.size(), 1u);
    EXPECT_EQ(s.rows[0].calls, 3u);
  });
  EXPECT_TRUE(allRanksSucceeded(exits));
}

TEST(StatsProc, CountsBytesAndTimesEveryCallWithCollieStats) {
  ScopedEnv stats("COLLIE_STATS", "1");
  auto exits = ProcessLauncher::run(2, [](Communicator& comm) {
    std::vector<float> v(1024, 1.0f);
    for (int i = 0; i < 5; ++i) comm.allReduce(v.data(), v.data(), 256, DataType::Float32, ReduceOp::Sum);
    comm.broadcast(v.data(), v.data(), 1000, DataType::Float32, 0);
    const CommStats s = comm.stats();
    ASSERT_TRUE(s.timed);
    uint64_t allReduces = 0, allReduceBytes = 0, broadcasts = 0, broadcastBytes = 0;
    for (const CollectiveStats& row : s.rows) {
      EXPECT_GT(row.seconds, 0.0) << row.collective << " " << row.algorithm;
      EXPECT_LT(row.seconds, 30.0) << row.collective << " " << row.algorithm;
      if (row.collective == "AllReduce") {
        allReduces += row.calls;
        allReduceBytes += row.bytes;
      } else if (row.collective == "Broadcast") {
        broadcasts += row.calls;
        broadcastBytes += row.bytes;
      } else {
        ADD_FAILURE() << "a row for a collective never called: " << row.collective;
      }
    }
    EXPECT_EQ(allReduces, 5u);
    EXPECT_EQ(allReduceBytes, 5u * 256 * 4);
    EXPECT_EQ(broadcasts, 1u);
    EXPECT_EQ(broadcastBytes, 4000u);
    EXPECT_NE(s.summary.find("AllReduce"), std::string::npos) << s.summary;
    EXPECT_NE(s.summary.find("us/call"), std::string::npos) << s.summary;
  });
  EXPECT_TRUE(allRanksSucceeded(exits));
}

}  // namespace
}  // namespace collie::test
