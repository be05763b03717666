// The shm transport with every rank a forked process (ProcessLauncher): every collective over shm (the default
// for ranks of one host) and over tcp (forced with COLLIE_SHM_DISABLE=1), each child checking from its own
// mappings which transport it got; a rank SIGKILLed in a stream of AllReduces over shm (the others get an error
// naming it, nothing is left in /dev/shm, with both segment backings); and a /dev/shm too small for the rings
// (a tiny tmpfs mounted in a private mount namespace): a clear error with the size and the fix, never a SIGBUS,
// and the default memfd backing unaffected.
//
// COLLIE_* variables are read once per process, so they are set in the parent right before the children are
// forked (the parent itself never builds transports) and removed afterwards.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

/// Mappings of shm transport segments in this process.
int shmMappings() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int n = 0;
  while (std::getline(maps, line))
    if (line.find("memfd:collie-shm") != std::string::npos || line.find("/dev/shm/collie-") != std::string::npos) ++n;
  return n;
}

/// Entries of /dev/shm that collie could have made.
std::vector<std::string> devShmLeftovers() {
  std::vector<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::string(e->d_name).rfind("collie", 0) == 0) out.emplace_back(e->d_name);
    closedir(d);
  }
  return out;
}

Options procOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "shm-proc";
  return o;
}

enum class Via { Shm, Tcp };

class ShmProcMatrix : public ::testing::TestWithParam<std::tuple<Via, int, Coll>> {};

TEST_P(ShmProcMatrix, CollectiveOverTheChosenTransport) {
  const auto [via, nranks, coll] = GetParam();
  ScopedEnv env(via == Via::Tcp ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  Matrix m;
  m.types = {DataType::Int8, DataType::Bfloat16, DataType::Float32};
  m.counts = {0, 1, 7, largeCountOf(coll, nranks)};
  auto exits = ProcessLauncher::run(
      nranks,
      [via = via, coll = coll, &m](Communicator& comm) {
        if (via == Via::Shm) {
          EXPECT_GT(shmMappings(), 0) << "same-host ranks must be linked by shm";
        } else {
          EXPECT_EQ(shmMappings(), 0) << "COLLIE_SHM_DISABLE=1 must leave same-host ranks on tcp";
        }
        runMatrix(comm, coll, m);
      },
      procOptions(), 300s);
  EXPECT_TRUE(allRanksSucceeded(exits));
}

INSTANTIATE_TEST_SUITE_P(Processes, ShmProcMatrix,
                         ::testing::Combine(::testing::Values(Via::Shm, Via::Tcp), ::testing::Values(2, 4),
                                            ::testing::ValuesIn(kAllColls)),
                         [](const ::testing::TestParamInfo<std::tuple<Via, int, Coll>>& info) {
                           return std::string(std::get<0>(info.param) == Via::Shm ? "shm_" : "tcp_") +
                                  collName(std::get<2>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) +
                                  "ranks";
                         });

TEST(ShmProc, AsyncGroupsSplitAndBarrierOverShm) {
  using Body = std::function<void(Communicator&)>;
  for (const Body& body : {Body(asyncBody), Body(groupBody), Body(splitBody), Body(barrierBody)})
    EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(3, body, procOptions())));
}

// ---- A rank killed in the middle of a stream over shm ----------------------------------------------------------

constexpr int kRanks = 4;
constexpr int64_t kMs = 1000000;  // ns
constexpr auto kTimeout = 5s;
constexpr int64_t kTimeoutNs = 5000 * kMs;
enum Counter { kEventNs = 0, kReported = 1 };
enum PerRank { kIterations = 0, kCodePlusOne = 1, kErrorAfterNs = 2, kNamesVictim = 3 };

void allReduceUntilError(Communicator& comm, SharedArea& sh, int victim) {
  const int r = comm.rank();
  EXPECT_GT(shmMappings(), 0);
  std::vector<float> buf(1 << 18, 1.0f);  // 1 MiB: slices take the single-copy path where it pays
  for (;;) {
    try {
      comm.allReduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::Max);
      comm.allReduce(buf.data(), buf.data(), 8, DataType::Float32, ReduceOp::Max);  // through the slots
    } catch (const Error& e) {
      const int64_t now = monotonicNs(), event = sh.counters[kEventNs].load();
      sh.perRank[r][kCodePlusOne].store(static_cast<int>(e.code()) + 1);
      sh.perRank[r][kErrorAfterNs].store(event ? now - event : -1);
      std::string what = e.what();
      sh.perRank[r][kNamesVictim].store(what.find("peer " + std::to_string(victim)) != std::string::npos);
      EXPECT_NE(event, 0) << "an error before the kill: " << what;
      EXPECT_TRUE(e.code() == ErrorCode::RemoteError || e.code() == ErrorCode::Timeout) << what;
      EXPECT_THROW(comm.barrier(), Error);
      sh.counters[kReported].fetch_add(1);
      return;
    }
    sh.perRank[r][kIterations].fetch_add(1);
  }
}

void killRankAndCheck(const char* backing) {
  constexpr int victim = 2;
  ScopedEnv env("COLLIE_SHM_BACKING", backing);
  Options options = procOptions();
  options.timeout = kTimeout;
  ProcessLauncher launcher(kRanks, options);
  SharedArea& sh = launcher.shared();
  launcher.start([&sh](Communicator& comm) { allReduceUntilError(comm, sh, victim); });
  for (int r = 0; r < kRanks; ++r) waitForCount(sh.perRank[r][kIterations], 3, 60s);
  sh.counters[kEventNs].store(monotonicNs());
  launcher.kill(victim, SIGKILL);
  auto exits = launcher.wait(60s);
  EXPECT_EQ(exits[victim].signal, SIGKILL) << exits[victim].describe();
  std::string seen;
  bool named = false;
  for (int r = 0; r < kRanks; ++r) {
    if (r == victim) continue;
    EXPECT_TRUE(exits[r].ok()) << exits[r].describe();
    EXPECT_NE(sh.perRank[r][kCodePlusOne].load(), 0) << "rank " << r << " saw no error";
    int64_t after = sh.perRank[r][kErrorAfterNs].load();
    // The death is seen on the socket: well before the timeout, not at it.
    EXPECT_LT(after, kTimeoutNs) << "rank " << r;
    named |= sh.perRank[r][kNamesVictim].load() != 0;
    seen += " rank " + std::to_string(r) + ": code " + std::to_string(sh.perRank[r][kCodePlusOne].load() - 1) +
            " after " + std::to_string(after / kMs) + " ms;";
  }
  EXPECT_TRUE(named) << "no survivor's error names peer " << victim << ":" << seen;
  EXPECT_TRUE(devShmLeftovers().empty()) << "left in /dev/shm: " << devShmLeftovers().front();
  std::printf("backing %s, after SIGKILL of rank %d:%s\n", backing, victim, seen.c_str());
}

TEST(ShmProc, KilledRankFailsTheOthersAndLeavesNothingInDevShm) { killRankAndCheck("memfd"); }
TEST(ShmProc, KilledRankFailsTheOthersAndLeavesNothingInDevShmWithDevShmBacking) { killRankAndCheck("devshm"); }

// ---- /dev/shm too small -------------------------------------------------------------------------------------------

// In a forked child: a private mount namespace with a 256 KiB tmpfs on /dev/shm, then a 2-rank communicator with
// the devshm backing (must fail with the message) and one with memfd (must work). Exit 0: as expected; 77: no
// private mount namespace here; else a failure, explained on stderr.
int tinyDevShmChild() {
  if (unshare(CLONE_NEWNS) != 0) return 77;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 77;
  if (mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=256k") != 0) return 77;
  char logPath[] = "/tmp/collie-shm-test-XXXXXX";
  int logFd = mkstemp(logPath);
  if (logFd < 0) return 3;
  int savedErr = dup(2);
  dup2(logFd, 2);
  std::vector<RankExit> devshm, memfd;
  {
    ScopedEnv env("COLLIE_SHM_BACKING", "devshm");
    devshm = ProcessLauncher::run(
        2, [](Communicator&) { ADD_FAILURE() << "init succeeded with a 256 KiB /dev/shm"; }, procOptions(), 60s);
  }
  memfd = ProcessLauncher::run(
      2,
      [](Communicator& comm) {
        EXPECT_GT(shmMappings(), 0);
        std::vector<float> v(1 << 20, 1.0f);
        comm.allReduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
        EXPECT_EQ(v[12345], 2.0f);
      },
      procOptions(), 60s);
  dup2(savedErr, 2);
  std::ifstream in(logPath);
  std::stringstream ss;
  ss << in.rdbuf();
  unlink(logPath);
  std::string log = ss.str();
  int rc = 0;
  for (const RankExit& e : devshm) {
    if (!(e.exited && e.exitCode == kChildInitFailure)) {
      fprintf(stderr, "devshm backing: rank %d: %s (expected an init failure)\n", e.rank, e.describe().c_str());
      rc = 1;
    }
  }
  for (const char* needle : {"/dev/shm is too small", "--shm-size", "bytes", "COLLIE_SHM_DISABLE=1"}) {
    if (log.find(needle) == std::string::npos) {
      fprintf(stderr, "the error does not say '%s'\n", needle);
      rc = 1;
    }
  }
  if (!allRanksSucceeded(memfd)) {
    fprintf(stderr, "memfd backing failed with a tiny /dev/shm\n");
    rc = 1;
  }
  if (rc != 0 || getenv("COLLIE_TEST_VERBOSE")) fprintf(stderr, "children's output:\n%s\n", log.c_str());
  // Show the message once in the test's output, as users would see it.
  size_t at = log.find("/dev/shm is too small");
  if (at != std::string::npos) {
    size_t begin = log.rfind('\n', at);
    begin = begin == std::string::npos ? 0 : begin + 1;
    fprintf(stderr, "%s\n", log.substr(begin, log.find('\n', at) - begin).c_str());
  }
  return rc;
}

TEST(ShmProc, TooSmallDevShmIsAClearErrorNeverABusError) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(tinyDevShmChild());
  int status = 0;
  auto deadline = std::chrono::steady_clock::now() + 180s;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      FAIL() << "the /dev/shm test child hung";
    }
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(WIFEXITED(status)) << "the child was killed by signal " << WTERMSIG(status);
  if (WEXITSTATUS(status) == 77) GTEST_SKIP() << "no private mount namespace here (unshare/mount need CAP_SYS_ADMIN)";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "see the child's stderr above";
}

}  // namespace
}  // namespace collie::test
