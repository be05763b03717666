// Failures with every rank a forked process: a rank SIGKILLed in the middle of a stream of AllReduces, a rank
// that never calls, a rank stopped with SIGSTOP (alive but silent), and bad arguments. Every other rank must get
// an error (RemoteError or Timeout) within the timeout plus a margin, never hang, and find its communicator
// failed afterwards. The ranks report through the ProcessLauncher's shared page; the parent checks the exits.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 4;
constexpr int64_t kMs = 1000000;  // ns
constexpr auto kTimeout = 5s;
constexpr int64_t kTimeoutNs = 5000 * kMs;
constexpr int64_t kMarginNs = 3000 * kMs;

// Shared-page layout used below.
enum Counter { kEventNs = 0, kReported = 1 };
enum PerRank { kIterations = 0, kCodePlusOne = 1, kErrorAfterNs = 2 };

Options failOptions() {
  Options o;
  o.timeout = kTimeout;
  o.name = "proc-failures";
  return o;
}

bool isPeerFailure(ErrorCode c) { return c == ErrorCode::RemoteError || c == ErrorCode::Timeout; }

// Runs AllReduces until one fails; checks the failure and that the communicator stays failed. `event` is the
// counter the parent sets (monotonicNs) when it kills or stops a rank.
void allReduceUntilError(Communicator& comm, SharedArea& sh) {
  const int r = comm.rank();
  std::vector<float> buf(1 << 18, 1.0f);
  const int64_t start = monotonicNs();
  for (;;) {
    try {
      comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Max);
    } catch (const Error& e) {
      const int64_t now = monotonicNs(), event = sh.counters[kEventNs].load();
      sh.perRank[r][kCodePlusOne].store(static_cast<int>(e.code()) + 1);
      sh.perRank[r][kErrorAfterNs].store(event ? now - event : -1);
      EXPECT_NE(event, 0) << "an error before any rank was killed or stopped: " << e.what();
      EXPECT_TRUE(isPeerFailure(e.code())) << e.what();
      EXPECT_LT(now - event, kTimeoutNs + kMarginNs) << "the error came too late: " << e.what();
      EXPECT_NE(comm.asyncError(), ErrorCode::Success);
      const int64_t t1 = monotonicNs();
      EXPECT_THROW(comm.allReduce(buf.data(), buf.data(), 16, DataType::Float32, ReduceOp::Max), Error);
      EXPECT_THROW(comm.barrier(), Error);
      EXPECT_LT(monotonicNs() - t1, 500 * kMs) << "later calls on a failed communicator must fail at once";
      sh.counters[kReported].fetch_add(1);
      return;
    }
    sh.perRank[r][kIterations].fetch_add(1);
    if (monotonicNs() - start > 90000 * kMs) {
      ADD_FAILURE() << "no error after 90 s";
      sh.counters[kReported].fetch_add(1);
      return;
    }
  }
}

// Waits until every rank but `except` has done `iterations` AllReduces.
bool waitForIterations(SharedArea& sh, int except, int64_t iterations, std::chrono::seconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    bool all = true;
    for (int r = 0; r < kRanks; ++r)
      if (r != except && sh.perRank[r][kIterations].load() < iterations) all = false;
    if (all) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

bool waitForReports(SharedArea& sh, int count, std::chrono::seconds limit) {
  return waitForCount(sh.counters[kReported], count, limit);
}

std::string codesSeen(SharedArea& sh, int except) {
  std::string s;
  for (int r = 0; r < kRanks; ++r) {
    if (r == except) continue;
    int64_t c = sh.perRank[r][kCodePlusOne].load() - 1;
    s += " rank " + std::to_string(r) + ": code " + std::to_string(c) + " after " +
         std::to_string(sh.perRank[r][kErrorAfterNs].load() / kMs) + " ms;";
  }
  return s;
}

TEST(ProcessFailures, KilledRankGivesEveryOtherRankAnErrorQuickly) {
  constexpr int victim = 2;
  ProcessLauncher launcher(kRanks, failOptions());
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) { allReduceUntilError(comm, sh); });
  ASSERT_TRUE(waitForIterations(sh, -1, 3, 60s)) << "the ranks did not get going";
  sh.counters[kEventNs].store(monotonicNs());
  launcher.kill(victim, SIGKILL);
  auto exits = launcher.wait(60s);
  ASSERT_EQ(exits.size(), static_cast<size_t>(kRanks));
  EXPECT_FALSE(exits[victim].exited);
  EXPECT_EQ(exits[victim].signal, SIGKILL) << exits[victim].describe();
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    EXPECT_FALSE(exits[r].killedAtDeadline) << "rank " << r << " hung";
    EXPECT_NE(sh.perRank[r][kCodePlusOne].load(), 0) << "rank " << r << " saw no error";
  }
  RecordProperty("errors", codesSeen(sh, victim));
  std::printf("after SIGKILL of rank %d:%s\n", victim, codesSeen(sh, victim).c_str());
}

TEST(ProcessFailures, StoppedRankGivesTheOthersATimeout) {
  // SIGSTOP: the process and its sockets stay, it just never answers; only the timeout can tell.
  constexpr int victim = 1;
  ProcessLauncher launcher(kRanks, failOptions());
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) { allReduceUntilError(comm, sh); });
  ASSERT_TRUE(waitForIterations(sh, -1, 3, 60s)) << "the ranks did not get going";
  sh.counters[kEventNs].store(monotonicNs());
  launcher.kill(victim, SIGSTOP);
  const bool reported = waitForReports(sh, kRanks - 1, 60s);
  launcher.kill(victim, SIGKILL);
  auto exits = launcher.wait(60s);
  EXPECT_TRUE(reported) << "not every other rank reported an error";
  bool sawTimeout = false;
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    sawTimeout |= sh.perRank[r][kCodePlusOne].load() - 1 == static_cast<int>(ErrorCode::Timeout);
    // Nobody can know before the timeout that a silent rank is gone.
    EXPECT_GE(sh.perRank[r][kErrorAfterNs].load(), kTimeoutNs - 1000 * kMs) << "rank " << r;
  }
  EXPECT_TRUE(sawTimeout) << "no rank reported Timeout:" << codesSeen(sh, victim);
  std::printf("after SIGSTOP of rank %d:%s\n", victim, codesSeen(sh, victim).c_str());
}

TEST(ProcessFailures, RankThatNeverCallsGivesTheOthersATimeout) {
  constexpr int sleeper = kRanks - 1;
  ProcessLauncher launcher(kRanks, failOptions());
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    const int r = comm.rank();
    if (r == sleeper) {  // alive, connected, silent: waits until the others are done
      waitForReports(sh, kRanks - 1, 60s);
      return;
    }
    int64_t expected = 0;
    sh.counters[kEventNs].compare_exchange_strong(expected, monotonicNs());  // the first caller's start
    allReduceUntilError(comm, sh);
  });
  auto exits = launcher.wait(90s);
  EXPECT_TRUE(allRanksSucceeded(exits));
  bool sawTimeout = false;
  for (int r = 0; r < kRanks; ++r) {
    if (r == sleeper) continue;
    sawTimeout |= sh.perRank[r][kCodePlusOne].load() - 1 == static_cast<int>(ErrorCode::Timeout);
    EXPECT_GE(sh.perRank[r][kErrorAfterNs].load(), kTimeoutNs - 1000 * kMs) << "rank " << r;
  }
  EXPECT_TRUE(sawTimeout) << "no rank reported Timeout:" << codesSeen(sh, sleeper);
  std::printf("with rank %d silent:%s\n", sleeper, codesSeen(sh, sleeper).c_str());
}

TEST(ProcessFailures, BadArgumentsRefusedAndCommunicatorStillWorks) {
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(3, badArgumentsBody, failOptions(), 120s)));
}

TEST(ProcessFailures, RankExitingWithoutCallingFailsThePeersAtOnce) {
  // Rank 0 destroys its communicator and exits while the others wait in an AllReduce: its closed connections
  // must end their wait well before the timeout.
  ProcessLauncher launcher(3, failOptions());
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) {
    if (comm.rank() == 0) {
      sh.counters[kEventNs].store(monotonicNs());
      return;
    }
    std::vector<int32_t> buf(1000, 1);
    try {
      comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::Int32, ReduceOp::Sum);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::RemoteError) << e.what();
      EXPECT_LT(monotonicNs() - sh.counters[kEventNs].load(), 2000 * kMs) << e.what();
    }
  });
  EXPECT_TRUE(allRanksSucceeded(launcher.wait(60s)));
}

}  // namespace
}  // namespace collie::test
