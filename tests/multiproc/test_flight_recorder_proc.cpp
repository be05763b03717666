// The flight recorder end to end, with every rank a forked process and COLLIE_FLIGHT_RECORDER set: the ranks that
// time out write their dumps, a rank that is merely behind writes its own on SIGUSR1, and tools/collie-flight,
// run on those files, names the lagging rank and its call, and the call the others wait in. Calls that differ
// at the same sequence number are reported as a mismatch.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
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

enum Counter { kReported = 0 };

/// A fresh directory for one test's dumps, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/collie-flight-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
};

/// Runs the merge tool on `prefix`; returns its output (stdout and stderr) and sets *status to its exit status.
std::string runTool(const std::string& prefix, int* status) {
  return runCommand(std::string("/usr/bin/python3 ") + COLLIE_FLIGHT_TOOL_PATH + " " + prefix + " 2>&1", status);
}

TEST(FlightRecorder, MergeToolNamesTheLaggingRankAndItsCall) {
  // Ranks 0 and 1 go on to a Broadcast from rank 2; rank 2 stops after the AllReduces. The two time out (3 s) and
  // dump; rank 2 dumps on SIGUSR1.
  constexpr int kRanks = 3, kLagging = 2;
  TempDir dir;
  const std::string prefix = (dir.path / "job").string();
  ScopedEnv recorder("COLLIE_FLIGHT_RECORDER", prefix.c_str());
  ProcessLauncher launcher(kRanks, Options{3s, ""});
  SharedArea& sh = launcher.shared();
  launcher.start([&sh, prefix](Communicator& comm) {
    const int r = comm.rank();
    std::vector<float> v(1 << 20);  // 4 MiB
    for (int i = 0; i < 5; ++i) {
      for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(j % 7 + r);
      comm.allReduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
      for (size_t j = 0; j < v.size(); j += 4099) ASSERT_EQ(v[j], static_cast<float>(3 * (j % 7) + 3)) << j;
    }
    if (r == kLagging) {  // alive, behind: waits for the others to give up, then for its own dump (SIGUSR1)
      const fs::path mine = prefix + ".rank2.json";
      auto deadline = std::chrono::steady_clock::now() + 60s;
      while (!fs::exists(mine) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
      EXPECT_TRUE(fs::exists(mine)) << "no dump after SIGUSR1";
      return;
    }
    // Async: the Broadcast runs on the progress thread and an AllReduce waits in the queue behind it.
    std::vector<int64_t> w(8, r);
    Work bcast = comm.broadcastAsync(v.data(), v.data(), v.size(), DataType::Float32, kLagging);
    Work next = comm.allReduceAsync(w.data(), w.data(), w.size(), DataType::Int64, ReduceOp::Max);
    try {
      bcast.wait();
      ADD_FAILURE() << "the broadcast from a rank that never calls succeeded";
    } catch (const Error& e) {
      // The first to time out closes its connections: the other may see that first.
      EXPECT_TRUE(e.code() == ErrorCode::Timeout || e.code() == ErrorCode::RemoteError) << e.what();
    }
    EXPECT_THROW(next.wait(), Error);
    sh.counters[kReported].fetch_add(1);
  });
  ASSERT_TRUE(waitForCount(sh.counters[kReported], kRanks - 1, 60s)) << "ranks 0 and 1 did not time out";
  launcher.kill(kLagging, SIGUSR1);
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
  for (int r = 0; r < kRanks; ++r)
    ASSERT_TRUE(fs::exists(prefix + ".rank" + std::to_string(r) + ".json")) << "rank " << r << " wrote no dump";

  int status = 0;
  const std::string report = runTool(prefix, &status);
  std::printf("%s", report.c_str());
  EXPECT_EQ(status, 1) << "a rank is behind: the tool must say so in its status";
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      report, m, std::regex(R"(BEHIND: rank 2 is at call #(\d+) \(AllReduce\(float32, sum, 4 MiB\), done\))")))
      << report;
  const int lagging = std::stoi(m[1]);
  const std::string waiting = "ranks 0,1 failed in call #" + std::to_string(lagging + 1) + " Broadcast(root 2, 4 MiB)";
  EXPECT_NE(report.find(waiting), std::string::npos) << "expected \"" << waiting << "\" in:\n" << report;
  EXPECT_NE(report.find("timed out waiting for a peer: "), std::string::npos) << "a dump's reason names the timeout:\n"
                                                                              << report;
  EXPECT_NE(report.find("rank 2 ("), std::string::npos) << report;
  EXPECT_NE(report.find("signal USR1"), std::string::npos) << "rank 2 dumped on SIGUSR1:\n" << report;
  EXPECT_EQ(report.find("MISMATCH"), std::string::npos) << report;
  const std::string queued = "queued: #" + std::to_string(lagging + 2) + " AllReduce(int64, max, 64 B)";
  EXPECT_NE(report.find("rank 0 ("), std::string::npos) << report;
  EXPECT_NE(report.find(queued), std::string::npos) << "expected \"" << queued << "\" in:\n" << report;
}

TEST(FlightRecorder, MergeToolReportsCallsThatDifferAtTheSameSequenceNumber) {
  TempDir dir;
  const std::string prefix = (dir.path / "mm").string();
  ScopedEnv recorder("COLLIE_FLIGHT_RECORDER", prefix.c_str());
  ScopedEnv trace("COLLIE_TRACE", prefix.c_str());  // PREFIX.rank<R>.trace.json: not the tool's to read
  ProcessLauncher launcher(2, Options{5s, ""});
  launcher.start([](Communicator& comm) {
    std::vector<int32_t> v(4096, 1);
    comm.allReduce(v.data(), v.data(), 16, DataType::Int32, ReduceOp::Sum);
    const size_t count = comm.rank() == 0 ? 1024 : 2048;  // the bug under test
    EXPECT_THROW(comm.allReduce(v.data(), v.data(), count, DataType::Int32, ReduceOp::Sum), Error);
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
  EXPECT_TRUE(fs::exists(prefix + ".rank0.trace.json"));
  int status = 0;
  const std::string report = runTool(prefix, &status);
  std::printf("%s", report.c_str());
  EXPECT_EQ(status, 1);
  EXPECT_TRUE(std::regex_search(
      report,
      std::regex(
          R"(MISMATCH at call #\d+: rank 0 called AllReduce\(int32, sum, 4 KiB\) count 1024; rank 1 called AllReduce\(int32, sum, 8 KiB\) count 2048)")))
      << report;
}

TEST(FlightRecorder, SigtermWritesTheDumpAndStillEndsTheProcess) {
  TempDir dir;
  const std::string prefix = (dir.path / "term").string();
  ScopedEnv recorder("COLLIE_FLIGHT_RECORDER", prefix.c_str());
  ProcessLauncher launcher(2, Options{10s, ""});
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    std::vector<int32_t> v(256, comm.rank() + 1);
    for (int i = 0; i < 3; ++i) comm.allReduce(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Sum);
    EXPECT_EQ(v[255], 12);  // 1 + 2, then doubled twice
    sh.counters[kReported].fetch_add(1);
    if (comm.rank() == 1) std::this_thread::sleep_for(30s);  // SIGTERM ends it
  });
  waitForCount(sh.counters[kReported], 2, 60s);
  launcher.kill(1, SIGTERM);
  auto exits = launcher.wait(60s);
  EXPECT_TRUE(exits[0].ok()) << exits[0].describe();
  EXPECT_FALSE(exits[1].exited) << exits[1].describe();
  EXPECT_EQ(exits[1].signal, SIGTERM) << "the process must still end by the signal: " << exits[1].describe();
  EXPECT_LT(exits[1].seconds, 20) << "it slept on instead of ending";
  FILE* f = std::fopen((prefix + ".rank1.json").c_str(), "r");
  ASSERT_NE(f, nullptr) << "no dump from rank 1 after SIGTERM";
  std::string text(1 << 16, '\0');
  text.resize(std::fread(text.data(), 1, text.size(), f));
  std::fclose(f);
  EXPECT_NE(text.find("\"reason\": \"signal TERM\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"seq\": 2, \"coll\": \"AllReduce\", \"dtype\": \"int32\", \"op\": \"sum\", \"count\": 256"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("\"seq\": 3,"), std::string::npos) << text;
}

TEST(FlightRecorder, DumpsTakenWhileCallsRunAreWholeAndInOrder) {
  // SIGUSR1 every few milliseconds while rank 0 runs small AllReduces: each dump (another thread reading the ring
  // that the calling thread writes) must be valid JSON whose entries are consecutive calls, none torn.
  TempDir dir;
  const std::string prefix = (dir.path / "busy").string();
  ScopedEnv recorder("COLLIE_FLIGHT_RECORDER", prefix.c_str());
  ScopedEnv entries("COLLIE_FLIGHT_RECORDER_ENTRIES", "64");
  ProcessLauncher launcher(2, Options{20s, ""});
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    std::vector<int32_t> v(4, 0);
    sh.counters[kReported].fetch_add(1);
    while (v[0] == 0) {  // until the parent has sent its signals; the Max makes both ranks stop at the same call
      v[0] = sh.counters[kReported].load() >= 3 ? 1 : 0;
      comm.allReduce(v.data(), v.data(), v.size(), DataType::Int32, ReduceOp::Max);
    }
  });
  ASSERT_TRUE(waitForCount(sh.counters[kReported], 2, 60s)) << "the ranks did not start";
  const std::string file = prefix + ".rank0.json";
  // Entries overwritten by newer calls while the dump read the ring are left out, so only the oldest may be missing;
  // every entry kept is one whole call: increasing numbers ending at the last call begun, the same AllReduce each
  // time, an end no earlier than its start.
  const std::string check =
      "/usr/bin/python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); E=d['entries']; s=[e['seq'] for e in E]; "
      "assert E and s == sorted(set(s)) and s[-1] == d['calls'] - 1 and s[0] >= d['calls'] - 64, s; "
      "assert all((e['coll'], e['dtype'], e['op'], e['count'], e['bytes']) == ('AllReduce', 'int32', 'max', 4, 16) "
      "for e in E), E; "
      "assert all(e['state'] == 'running' or (e['state'] == 'done' and e['end_us'] >= e['start_us']) for e in E), "
      "E\" " +
      file + " 2>&1";
  int checked = 0;
  for (int i = 0; i < 20; ++i) {
    std::filesystem::remove(file);
    launcher.kill(0, SIGUSR1);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!fs::exists(file) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(fs::exists(file)) << "no dump after SIGUSR1 #" << i;
    FILE* p = popen(check.c_str(), "r");
    ASSERT_NE(p, nullptr);
    char buf[4096];
    const size_t n = fread(buf, 1, sizeof(buf) - 1, p);
    buf[n] = '\0';
    EXPECT_EQ(pclose(p), 0) << "dump #" << i << " is not whole: " << buf;
    ++checked;
  }
  sh.counters[kReported].fetch_add(1);
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
  EXPECT_EQ(checked, 20);
}

TEST(FlightRecorder, TwoLiveCommunicatorsOfOneNameWriteSeparateDumps) {
  // Both splits are named "twin" (as every torch process group is "torch"), and each dumps when destroyed: the
  // second takes instance 1 (.rank<R>.1.json) instead of replacing the first's file, and the tool reports the two
  // as communicators of their own.
  constexpr int kRanks = 2;
  TempDir dir;
  const std::string prefix = (dir.path / "twin").string();
  ScopedEnv recorder("COLLIE_FLIGHT_RECORDER", prefix.c_str());
  ScopedEnv atDestroy("COLLIE_FLIGHT_RECORDER_DESTROY", "1");
  auto exits = ProcessLauncher::run(kRanks, [](Communicator& comm) { twoSameNamedSplitsBody(comm, "twin"); });
  ASSERT_TRUE(allRanksSucceeded(exits));
  for (int r = 0; r < kRanks; ++r) {
    const std::string base = prefix + ".twin.rank" + std::to_string(r);
    const std::vector<std::pair<std::string, int>> expected = {{base + ".json", 2}, {base + ".1.json", 3}};
    for (const auto& [file, calls] : expected) {
      int status = 0;
      const std::string out = runCommand(
          "/usr/bin/python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); print(d['comm'], d['instance'], "
          "d['calls'])\" " +
              file + " 2>&1",
          &status);
      EXPECT_EQ(status, 0) << file << ": " << out;
      EXPECT_EQ(out, "twin " + std::string(calls == 2 ? "0" : "1") + " " + std::to_string(calls) + "\n") << file;
    }
  }
  int status = 0;
  const std::string report = runTool(prefix, &status);
  EXPECT_EQ(status, 0) << report;
  EXPECT_NE(report.find("communicator twin: 2 rank(s), 2 dump(s)"), std::string::npos) << report;
  EXPECT_NE(report.find("communicator twin (instance 1): 2 rank(s), 2 dump(s)"), std::string::npos) << report;
}

TEST(FlightRecorder, ToolRefusesAPrefixWithoutDumps) {
  int status = 0;
  const std::string report = runTool("/nonexistent/collie-flight-test", &status);
  EXPECT_EQ(status, 2) << report;
  EXPECT_NE(report.find("no dump matches"), std::string::npos) << report;
}

}  // namespace
}  // namespace collie::test
