// Tests of tools/collierun, the local launcher, run as a real program on /bin/sh snippets: output prefixes,
// the environment each rank gets, failure propagation, exit codes, timeout and signal forwarding.
// The binary is found at $COLLIE_BUILD_DIR/tools/collierun (set by CTest), else next to this test's build
// folder; the tests are skipped when it has not been built.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

struct Result {
  int code = -1;  // exit code, or 128+signal
  std::string out;
  std::string err;
  double seconds = 0;
};

// Runs `/bin/sh -c script`, capturing stdout and stderr apart; gives up reading after 60 s.
Result runShell(const std::string& script) {
  Result res;
  int outPipe[2], errPipe[2];
  if (pipe2(outPipe, O_CLOEXEC) != 0 || pipe2(errPipe, O_CLOEXEC) != 0) return res;
  auto start = std::chrono::steady_clock::now();
  pid_t pid = fork();
  if (pid == 0) {
    dup2(outPipe[1], STDOUT_FILENO);
    dup2(errPipe[1], STDERR_FILENO);
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(126);
  }
  close(outPipe[1]);
  close(errPipe[1]);
  pollfd fds[2] = {{outPipe[0], POLLIN, 0}, {errPipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&res.out, &res.err};
  int open = 2;
  while (open > 0 && std::chrono::steady_clock::now() - start < std::chrono::seconds(60)) {
    if (poll(fds, 2, 1000) < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, static_cast<size_t>(n));
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return res;
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

bool executable(const std::string& path) { return !path.empty() && access(path.c_str(), X_OK) == 0; }

std::string findCollierun() {
  if (const char* dir = std::getenv("COLLIE_BUILD_DIR")) {
    std::string path = std::string(dir) + "/tools/collierun";
    if (executable(path)) return path;
  }
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (n > 0) {
    std::string dir(self, static_cast<size_t>(n));
    dir = dir.substr(0, dir.rfind('/'));  // <build>/tests
    for (const char* rel : {"/../tools/collierun", "/tools/collierun", "/../../tools/collierun"}) {
      if (executable(dir + rel)) return dir + rel;
    }
  }
  return "";
}

class CollierunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = findCollierun();
    if (bin_.empty()) {
      GTEST_SKIP() << "collierun is not built (looked in $COLLIE_BUILD_DIR/tools and ../tools from the test "
                      "binary); build the 'collierun' target first";
    }
  }

  // collierun with args, and the launcher's own COLLIE_ROOT_ADDR/COLLIE_SECRET cleared unless asked to keep.
  Result collierun(const std::string& args, bool cleanEnv = true) {
    std::string env = cleanEnv ? "env -u COLLIE_ROOT_ADDR -u COLLIE_SECRET " : "";
    return runShell(env + bin_ + " " + args);
  }

  std::string bin_;
};

TEST_F(CollierunTest, PrefixesEveryLineWithTheRankOnTheRightStream) {
  Result r = collierun("-n 4 -- /bin/sh -c 'echo hello $COLLIE_RANK; echo oops $COLLIE_RANK >&2; echo bye'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> outLines = lines(r.out), errLines = lines(r.err);
  std::multiset<std::string> out(outLines.begin(), outLines.end()), err(errLines.begin(), errLines.end());
  std::multiset<std::string> wantOut, wantErr;
  for (int rank = 0; rank < 4; ++rank) {
    std::string p = "[" + std::to_string(rank) + "] ";
    wantOut.insert(p + "hello " + std::to_string(rank));
    wantOut.insert(p + "bye");
    wantErr.insert(p + "oops " + std::to_string(rank));
  }
  EXPECT_EQ(out, wantOut) << r.out;
  EXPECT_EQ(err, wantErr) << r.err;
}

TEST_F(CollierunTest, KeepsEachRanksLinesInOrder) {
  Result r = collierun("-n 3 -- /bin/sh -c 'i=0; while [ $i -lt 300 ]; do echo $i; i=$((i+1)); done'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::map<std::string, int> next;
  for (const std::string& line : lines(r.out)) {
    std::string prefix = line.substr(0, line.find(' '));
    EXPECT_EQ(line.substr(line.find(' ') + 1), std::to_string(next[prefix]++)) << line;
  }
  EXPECT_EQ(next.size(), 3u);
  for (auto& [prefix, count] : next) EXPECT_EQ(count, 300) << prefix;
}

TEST_F(CollierunTest, SetsTheEnvironmentOfEachRank) {
  const int n = 5;
  Result r = collierun(
      "-n 5 -- /bin/sh -c 'echo $COLLIE_RANK $COLLIE_NRANKS $COLLIE_LOCAL_RANK $COLLIE_LOCAL_SIZE "
      "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $COLLIE_ROOT_ADDR $COLLIE_SECRET'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> got = lines(r.out);
  ASSERT_EQ(got.size(), static_cast<size_t>(n)) << r.out;
  std::set<int> ranks;
  std::set<std::string> addrs, secrets;
  for (const std::string& line : got) {
    std::istringstream in(line);
    std::string prefix, addr, secret;
    int rank, nranks, localRank, localSize, torchRank, worldSize, torchLocalRank, localWorldSize;
    in >> prefix >> rank >> nranks >> localRank >> localSize >> torchRank >> worldSize >> torchLocalRank >>
        localWorldSize >> addr >> secret;
    ASSERT_FALSE(in.fail()) << line;
    EXPECT_EQ(prefix, "[" + std::to_string(rank) + "]");
    EXPECT_EQ(nranks, n);
    EXPECT_EQ(localRank, rank);
    EXPECT_EQ(localSize, n);
    EXPECT_EQ(torchRank, rank);
    EXPECT_EQ(worldSize, n);
    EXPECT_EQ(torchLocalRank, rank);
    EXPECT_EQ(localWorldSize, n);
    ranks.insert(rank);
    addrs.insert(addr);
    secrets.insert(secret);
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3, 4}));
  ASSERT_EQ(addrs.size(), 1u);
  ASSERT_EQ(secrets.size(), 1u);
  const std::string& addr = *addrs.begin();
  ASSERT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
  int port = std::atoi(addr.c_str() + 10);
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
  const std::string& secret = *secrets.begin();
  EXPECT_EQ(secret.size(), 32u);
  EXPECT_EQ(secret.find_first_not_of("0123456789abcdef"), std::string::npos) << secret;
}

TEST_F(CollierunTest, EachJobGetsItsOwnSecret) {
  Result a = collierun("-n 1 -- /bin/sh -c 'echo $COLLIE_SECRET'");
  Result b = collierun("-n 1 -- /bin/sh -c 'echo $COLLIE_SECRET'");
  ASSERT_EQ(a.code, 0);
  ASSERT_EQ(b.code, 0);
  EXPECT_NE(a.out, b.out);
}

TEST_F(CollierunTest, PassesAGivenRootAddressThrough) {
  Result r = runShell("env -u COLLIE_SECRET COLLIE_ROOT_ADDR=10.1.2.3:4567 " + bin_ +
                      " -n 2 -- /bin/sh -c 'echo $COLLIE_ROOT_ADDR'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> out = lines(r.out);  // the two ranks print at the same moment, in either order
  EXPECT_EQ(std::multiset<std::string>(out.begin(), out.end()),
            (std::multiset<std::string>{"[0] 10.1.2.3:4567", "[1] 10.1.2.3:4567"}))
      << r.out;
}

TEST_F(CollierunTest, SingleRankAndPartialLastLine) {
  Result r = collierun("-n 1 -- /bin/sh -c 'echo one; printf two; printf three >&2'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "[0] one\n[0] two\n");
  EXPECT_EQ(r.err, "[0] three\n");
}

TEST_F(CollierunTest, FailingRankStopsTheOthersAndDecidesTheExitCode) {
  Result r = collierun("-n 3 -- /bin/sh -c 'if [ $COLLIE_RANK = 1 ]; then exit 3; fi; sleep 30'");
  EXPECT_EQ(r.code, 3) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("collierun: rank 1 exited with code 3"), std::string::npos) << r.err;
}

TEST_F(CollierunTest, KeepGoingLetsTheOthersFinish) {
  Result r = collierun(
      "-n 4 --keep-going -- /bin/sh -c 'if [ $COLLIE_RANK = 1 ]; then exit 3; fi; "
      "if [ $COLLIE_RANK = 3 ]; then sleep 0.2; kill -KILL $$; fi; sleep 0.5; echo done $COLLIE_RANK'");
  EXPECT_EQ(r.code, 3) << r.err;  // the first failing rank's code
  std::vector<std::string> out = lines(r.out);
  EXPECT_EQ(std::multiset<std::string>(out.begin(), out.end()),
            (std::multiset<std::string>{"[0] done 0", "[2] done 2"}))
      << r.out;
  EXPECT_NE(r.err.find("collierun: rank 1 exited with code 3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("collierun: rank 3 killed by signal SIGKILL"), std::string::npos) << r.err;
}

TEST_F(CollierunTest, RanksThatIgnoreSigtermGetSigkill) {
  Result r =
      collierun("-n 2 -- /bin/sh -c 'trap \"\" TERM; if [ $COLLIE_RANK = 0 ]; then sleep 0.5; exit 5; fi; sleep 30'");
  EXPECT_EQ(r.code, 5) << r.err;
  EXPECT_GE(r.seconds, 2);  // SIGKILL comes 3 s after SIGTERM
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("collierun: rank 0 exited with code 5"), std::string::npos) << r.err;
}

TEST_F(CollierunTest, RankKilledBySignalGives128PlusSignal) {
  Result r = collierun("-n 3 -- /bin/sh -c 'if [ $COLLIE_RANK = 2 ]; then kill -KILL $$; fi; sleep 30'");
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("collierun: rank 2 killed by signal SIGKILL, possibly by the OOM killer (out of memory"),
            std::string::npos)
      << r.err;
}

TEST_F(CollierunTest, WarnsWhenRanksFarExceedTheCores) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores <= 0 || 8 * cores + 1 > 1024) GTEST_SKIP() << cores << " cores: too many ranks to start for this test";
  const long n = 8 * cores + 1;
  Result r = collierun("-n " + std::to_string(n) + " -- true");
  EXPECT_EQ(r.code, 0) << r.err;  // a warning, not a refusal
  EXPECT_NE(r.err.find("collierun: warning: " + std::to_string(n) + " ranks on " + std::to_string(cores) + " CPU core"),
            std::string::npos)
      << r.err;
  // 8 per core is still fine.
  Result ok = collierun("-n " + std::to_string(8 * cores) + " -- true");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.err.find("ranks on"), std::string::npos) << ok.err;
}

TEST_F(CollierunTest, WarnsWhenTheMemoryEstimateExceedsMemAvailable) {
  // 2 ranks of 2^40 MiB each exceed any machine's MemAvailable.
  Result r = runShell("env -u COLLIE_ROOT_ADDR -u COLLIE_SECRET COLLIERUN_RANK_MEM_MB=1099511627776 " + bin_ +
                      " -n 2 -- true");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("collierun: warning: 2 ranks may need about"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(MemAvailable): the OOM killer may kill ranks"), std::string::npos) << r.err;
  // The default estimate for 2 ranks (128 MiB) says nothing on any machine able to build collie.
  EXPECT_EQ(collierun("-n 2 -- true").err, "");
}

TEST_F(CollierunTest, AllRanksSucceedGivesZero) {
  Result r = collierun("-n 3 -- true");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
}

TEST_F(CollierunTest, MissingProgramGives127) {
  Result r = collierun("-n 2 -- /nonexistent/collie-prog arg");
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("collierun: cannot run '/nonexistent/collie-prog': No such file or directory"),
            std::string::npos)
      << r.err;
  Result inPath = collierun("-n 2 collie-no-such-program-in-path");
  EXPECT_EQ(inPath.code, 127);
  EXPECT_NE(inPath.err.find("cannot run 'collie-no-such-program-in-path'"), std::string::npos) << inPath.err;
}

TEST_F(CollierunTest, TimeoutKillsTheJobWith124) {
  Result r = collierun("-n 2 --timeout 1 -- sleep 30");
  EXPECT_EQ(r.code, 124) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("timed out"), std::string::npos) << r.err;
  Result fast = collierun("--timeout=20 -n 2 -- true");
  EXPECT_EQ(fast.code, 0) << fast.err;
}

TEST_F(CollierunTest, ForwardsSigtermToTheRanks) {
  Result r = runShell("env -u COLLIE_ROOT_ADDR -u COLLIE_SECRET " + bin_ +
                      " -n 2 -- /bin/sh -c 'echo up; exec sleep 30' & pid=$!; sleep 0.5; kill -TERM $pid; "
                      "wait $pid");
  EXPECT_EQ(r.code, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_NE(r.err.find("killed by signal SIGTERM"), std::string::npos) << r.err;
}

TEST_F(CollierunTest, UsageErrors) {
  for (const char* args : {"", "true", "-n 0 true", "-n x true", "-n 2", "-n 2 --", "-n 2 --bogus true",
                           "-n 2 --timeout 0 true", "-n 2 --timeout"}) {
    Result r = collierun(args);
    EXPECT_EQ(r.code, 2) << "args: '" << args << "'";
    EXPECT_EQ(r.err.rfind("collierun: ", 0), 0u) << "args: '" << args << "': " << r.err;
  }
  EXPECT_NE(collierun("true").err.find("-n"), std::string::npos);
  EXPECT_NE(collierun("-n 2").err.find("no program"), std::string::npos);
}

TEST_F(CollierunTest, Help) {
  for (const char* flag : {"-h", "--help"}) {
    Result r = collierun(flag);
    EXPECT_EQ(r.code, 0);
    EXPECT_NE(r.out.find("Usage: collierun -n N"), std::string::npos) << r.out;
  }
}

// ---- The examples (examples/allreduce_c.c, examples/allreduce_cpp.cpp) under collierun, and without it ----------

std::string findExample(const std::string& name) {
  if (const char* dir = std::getenv("COLLIE_BUILD_DIR")) {
    std::string path = std::string(dir) + "/examples/" + name;
    if (executable(path)) return path;
  }
  return "";
}

// Each of the 4 ranks prints "<name>: rank R of 4: ..." ending in "ok", once: one 4-rank job, not four 1-rank jobs.
void expectFourRanksOk(const Result& r, const std::string& name) {
  EXPECT_EQ(r.code, 0) << r.err;
  std::multiset<std::string> seen;
  for (const std::string& line : lines(r.out)) {
    if (line.find(name + ": rank ") == std::string::npos) continue;
    EXPECT_NE(line.find(" of 4: "), std::string::npos) << line;
    EXPECT_EQ(line.substr(line.size() - 4), ": ok") << line;
    seen.insert(line.substr(0, line.find(' ')));
  }
  EXPECT_EQ(seen, (std::multiset<std::string>{"[0]", "[1]", "[2]", "[3]"})) << r.out;
}

TEST_F(CollierunTest, ExampleCRunsOneFourRankJob) {
  const std::string prog = findExample("allreduce_c");
  if (prog.empty()) GTEST_SKIP() << "examples/allreduce_c is not built";
  Result r = collierun("-n 4 --timeout 60 " + prog);
  expectFourRanksOk(r, "allreduce_c");
  EXPECT_NE(r.out.find("[1] allreduce_c: rank 1 of 4: sum 10 (expected 10): ok"), std::string::npos) << r.out;
}

TEST_F(CollierunTest, ExampleCppRunsOneFourRankJob) {
  const std::string prog = findExample("allreduce_cpp");
  if (prog.empty()) GTEST_SKIP() << "examples/allreduce_cpp is not built";
  Result r = collierun("-n 4 --timeout 60 " + prog);
  expectFourRanksOk(r, "allreduce_cpp");
  EXPECT_NE(r.out.find("[3] allreduce_cpp: rank 3 of 4: sum 10, async sum 12: ok"), std::string::npos) << r.out;
}

TEST_F(CollierunTest, ExampleCWithoutALauncherSaysWhy) {
  const std::string prog = findExample("allreduce_c");
  if (prog.empty()) GTEST_SKIP() << "examples/allreduce_c is not built";
  // No launcher's variables at all (those of collierun, torchrun, Open MPI and Slurm).
  Result r = runShell(
      "env -u COLLIE_RANK -u COLLIE_NRANKS -u COLLIE_ROOT_ADDR -u COLLIE_SECRET -u RANK -u WORLD_SIZE "
      "-u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE -u SLURM_PROCID -u SLURM_NTASKS " +
      prog);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("allreduce_c: collieCommInitFromEnv failed: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no launcher environment found"), std::string::npos) << r.err;
}

// examples/ddp_shrink: one rank (rank 0, the bootstrap root's host, in the tcp run) kills itself during backward;
// the survivors shrink, reload their checkpoint and finish. Checked: only the victim failed (collierun names every
// failing rank under --keep-going), each survivor recovered and ends with the same parameters as the others, and the
// loss went down.
void expectDdpShrinkSurvived(const Result& r, int nranks, int victim) {
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.err;
  EXPECT_NE(r.err.find("collierun: rank " + std::to_string(victim) + " killed by signal SIGKILL"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("exited with code"), std::string::npos) << r.err;
  std::set<std::string> hashes, recovered, finished;
  std::vector<double> losses;
  const std::string tail = ", identical on all " + std::to_string(nranks - 1) + ": yes";
  for (const std::string& line : lines(r.out)) {
    const std::string who = line.substr(0, line.find(' '));
    if (line.find("shrank to rank") != std::string::npos) recovered.insert(who);
    if (line.find(" step ") != std::string::npos && line.find("  loss ") != std::string::npos)
      losses.push_back(std::stod(line.substr(line.find("  loss ") + 7)));
    const size_t at = line.find("parameters ");
    if (at == std::string::npos) continue;
    EXPECT_EQ(line.substr(line.size() - tail.size()), tail) << line;
    hashes.insert(line.substr(at + 11, 16));
    finished.insert(who);
  }
  std::set<std::string> survivors;
  for (int rank = 0; rank < nranks; ++rank)
    if (rank != victim) survivors.insert("[" + std::to_string(rank) + "]");
  EXPECT_EQ(recovered, survivors) << r.out;
  EXPECT_EQ(finished, survivors) << r.out;
  EXPECT_EQ(hashes.size(), 1u) << r.out;
  ASSERT_GE(losses.size(), 10u) << r.out;
  EXPECT_LT(losses.back(), losses.front() / 10) << r.out;
}

TEST_F(CollierunTest, ExampleDdpShrinkGoesOnWithoutAKilledRankOverShm) {
  const std::string prog = findExample("ddp_shrink");
  if (prog.empty()) GTEST_SKIP() << "examples/ddp_shrink is not built";
  Result r = collierun("-n 4 --keep-going --timeout 60 " + prog + " --kill-rank 2 --kill-step 137");
  expectDdpShrinkSurvived(r, 4, 2);
}

TEST_F(CollierunTest, ExampleDdpShrinkGoesOnWithoutRankZeroOverTcp) {
  const std::string prog = findExample("ddp_shrink");
  if (prog.empty()) GTEST_SKIP() << "examples/ddp_shrink is not built";
  Result r = runShell("env -u COLLIE_ROOT_ADDR -u COLLIE_SECRET COLLIE_SHM_DISABLE=1 " + bin_ +
                      " -n 3 --keep-going --timeout 60 " + prog + " --kill-rank 0 --kill-step 60");
  expectDdpShrinkSurvived(r, 3, 0);
}

// ---- collie-info's arguments, and a *_perf tool run without a launcher --------------------------------------------

std::string findBuilt(const std::string& rel) {
  if (const char* dir = std::getenv("COLLIE_BUILD_DIR")) {
    std::string path = std::string(dir) + "/" + rel;
    if (executable(path)) return path;
  }
  return "";
}

TEST(CollieInfoArgs, RejectsUnknownTransportsAndOptionsWithTheValidOnes) {
  const std::string info = findBuilt("tools/collie-info");
  if (info.empty()) GTEST_SKIP() << "tools/collie-info is not built";
  Result r = runShell(info + " --tuner --transport foo");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("unknown transport 'foo' for --transport (valid: tcp, shm)"), std::string::npos) << r.err;

  r = runShell(info + " --bogus");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown option '--bogus' (valid: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--tuner"), std::string::npos) << r.err;

  for (const char* args : {"--tuner --nranks 0", "--tuner --nranks 3x", "--tuner --transport", "--nranks 4"}) {
    r = runShell(info + " " + args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_FALSE(r.err.empty()) << args;
  }

  r = runShell(info + " --tuner --transport shm --nranks 4");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Tuner for 4 ranks over shm"), std::string::npos) << r.out;
}

// all_reduce_perf without collierun: one rank after a warning that says how to run N, and no absurd bandwidth.
TEST(PerfWithoutLauncher, WarnsAndPrintsNoAbsurdBandwidth) {
  const std::string perf = findBuilt("perf/all_reduce_perf");
  if (perf.empty()) GTEST_SKIP() << "perf/all_reduce_perf is not built";
  Result r =
      runShell("env -u COLLIE_RANK -u COLLIE_NRANKS -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u SLURM_PROCID " +
               perf + " -b 8 -e 8M -f 32 -n 5 -w 1");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: no launcher environment"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("running ONE rank"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("collierun -n N "), std::string::npos) << r.err;
  int rows = 0;
  for (const std::string& line : lines(r.out)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::vector<std::string> f;
    for (std::string w; in >> w;) f.push_back(w);
    ASSERT_GE(f.size(), 13u) << line;
    ++rows;
    // Columns 6-7 and 10-11: algbw and busbw out of place and in place; in place with one rank moves nothing.
    EXPECT_EQ(f[10], "N/A") << line;
    for (size_t c : {6u, 10u}) {
      if (f[c] == "N/A") continue;
      EXPECT_LT(std::stod(f[c]), 1000.0) << "absurd algbw in: " << line;  // a single host's memory copy
      EXPECT_EQ(std::stod(f[c + 1]), 0.0) << line;                        // one rank: busbw 0
    }
  }
  EXPECT_EQ(rows, 5) << r.out;  // 8 B, 256 B, 8 KiB, 256 KiB, 8 MiB
  EXPECT_NE(r.out.find("# Avg bus bandwidth    : 0 GB/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# N/A algbw/busbw: one rank in place moves no data"), std::string::npos) << r.out;
}

// The algo and transport columns and JSON fields say what ran (Communicator::lastCall), not what -A asked for.
TEST_F(CollierunTest, PerfTableSaysWhichAlgorithmAndTransportRan) {
  const std::string perf = findBuilt("perf/all_reduce_perf");
  if (perf.empty()) GTEST_SKIP() << "perf/all_reduce_perf is not built";
  char dir[] = "/tmp/collie_perf_json_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string json = std::string(dir) + "/ring.json";
  for (const char* transport : {"shm", "tcp"}) {
    const std::string env = std::string(transport) == "tcp" ? "COLLIE_SHM_DISABLE=1 " : "COLLIE_SHM_DISABLE=0 ";
    Result r = collierun("-n 3 --timeout 60 -- env " + env + perf + " -b 1K -e 64K -f 8 -n 2 -w 1 -A ring -J " + json);
    ASSERT_EQ(r.code, 0) << r.err;
    int rows = 0;
    for (const std::string& line : lines(r.out)) {
      if (line.rfind("[0] ", 0) != 0 || line.size() < 5 || line[4] == '#') continue;
      std::istringstream in(line.substr(4));
      std::vector<std::string> f;
      for (std::string w; in >> w;) f.push_back(w);
      if (f.size() < 15) continue;  // the empty last-error line
      ++rows;
      EXPECT_EQ(f[13], "ring") << line;
      EXPECT_EQ(f[14], transport) << line;
    }
    EXPECT_EQ(rows, 3) << r.out;  // 1 KiB, 8 KiB, 64 KiB
    EXPECT_NE(r.out.find("algo  transport"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("# Avg bus bandwidth    : "), std::string::npos);
    EXPECT_NE(r.out.find(" GB/s\n"), std::string::npos) << r.out;
    FILE* f = std::fopen(json.c_str(), "r");
    ASSERT_NE(f, nullptr);
    std::string text;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
    std::fclose(f);
    size_t algos = 0, transports = 0;
    for (size_t pos = 0; (pos = text.find("\"algorithm\": \"ring\"", pos)) != std::string::npos; ++pos) ++algos;
    const std::string t = std::string("\"transport\": \"") + transport + "\"";
    for (size_t pos = 0; (pos = text.find(t, pos)) != std::string::npos; ++pos) ++transports;
    EXPECT_EQ(algos, 3u) << text;
    EXPECT_EQ(transports, 3u) << text;
  }
  std::remove(json.c_str());
  rmdir(dir);
}

// -o all sweeps every reduction, premulsum included (as nccl-tests: each rank's own factor, 1 + rank % 2, through
// collieRedOpCreatePreMulSum), and every row's result is checked (#wrong 0, out of place and in place).
TEST_F(CollierunTest, PerfToolsSweepEveryOpPreMulSumIncludedAndCheckIt) {
  for (const char* tool : {"perf/all_reduce_perf", "perf/reduce_scatter_perf"}) {
    const std::string perf = findBuilt(tool);
    if (perf.empty()) GTEST_SKIP() << tool << " is not built";
    Result r = collierun("-n 3 --timeout 60 -- " + perf + " -b 8 -e 64K -f 64 -n 2 -w 1 -o all -d all");
    ASSERT_EQ(r.code, 0) << r.err;
    std::map<std::string, int> rowsPerOp;
    for (const std::string& line : lines(r.out)) {
      if (line.rfind("[0] ", 0) != 0 || line.size() < 5 || line[4] == '#') continue;
      std::istringstream in(line.substr(4));
      std::vector<std::string> f;
      for (std::string w; in >> w;) f.push_back(w);
      if (f.size() < 15) continue;
      ++rowsPerOp[f[3]];
      EXPECT_EQ(f[8], "0") << tool << ": " << line;
      EXPECT_EQ(f[12], "0") << tool << ": " << line;
    }
    for (const char* op : {"sum", "prod", "max", "min", "avg", "premulsum"})
      EXPECT_EQ(rowsPerOp[op], 10 * 3) << tool << " " << op << "\n" << r.out;  // 10 types x 8 B, 512 B, 32 KiB
  }
}

}  // namespace
