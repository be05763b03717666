// The collective bodies of tests/common/bodies.hpp with every rank a forked process (ProcessLauncher):
// nranks {2,3,4} x every collective over types {int8, float16, bfloat16, float32, int64}, every op, counts
// {0, 1, 7, 1M+3}, in place and out of place; async calls, groups, split and barrier. And collierun running a
// plain C program (tests/multiproc/helpers/env_allreduce.c) that initialises from the launcher's environment.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>

#include "common/bodies.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options procOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "multiproc";
  return o;
}

class ProcessMatrix : public ::testing::TestWithParam<std::tuple<int, Coll>> {};

TEST_P(ProcessMatrix, TypesOpsCountsAndPlacement) {
  const auto [nranks, coll] = GetParam();
  Matrix m;
  m.types = {DataType::Int8, DataType::Float16, DataType::Bfloat16, DataType::Float32, DataType::Int64};
  m.counts = {0, 1, 7, largeCountOf(coll, nranks)};
  auto exits = ProcessLauncher::run(
      nranks, [coll = coll, &m](Communicator& comm) { runMatrix(comm, coll, m); }, procOptions(), 240s);
  EXPECT_TRUE(allRanksSucceeded(exits));
}

INSTANTIATE_TEST_SUITE_P(Processes, ProcessMatrix,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::ValuesIn(kAllColls)),
                         [](const ::testing::TestParamInfo<std::tuple<int, Coll>>& info) {
                           return collName(std::get<1>(info.param)) + "_" + std::to_string(std::get<0>(info.param)) +
                                  "ranks";
                         });

class Processes : public ::testing::TestWithParam<int> {};

TEST_P(Processes, Async) { EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(GetParam(), asyncBody, procOptions()))); }
TEST_P(Processes, Groups) {
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(GetParam(), groupBody, procOptions())));
}
TEST_P(Processes, Split) { EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(GetParam(), splitBody, procOptions()))); }
TEST_P(Processes, Barrier) {
  EXPECT_TRUE(allRanksSucceeded(ProcessLauncher::run(GetParam(), barrierBody, procOptions())));
}

INSTANTIATE_TEST_SUITE_P(Processes, Processes, ::testing::Values(2, 3, 4),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "ranks";
                         });

TEST(ProcessLauncher, ReportsAFailingRank) {
  // A gtest failure and an exception in children come back as non-zero exits of those ranks only.
  auto exits = ProcessLauncher::run(
      3,
      [](Communicator& comm) {
        comm.barrier();
        if (comm.rank() == 1) ADD_FAILURE() << "deliberate gtest failure (expected in this test's output)";
        if (comm.rank() == 2) throw std::runtime_error("deliberate exception (expected in this test's output)");
      },
      procOptions(), 60s);
  ASSERT_EQ(exits.size(), 3u);
  EXPECT_TRUE(exits[0].ok()) << exits[0].describe();
  EXPECT_TRUE(exits[1].exited && exits[1].exitCode == kChildGtestFailure) << exits[1].describe();
  EXPECT_TRUE(exits[2].exited && exits[2].exitCode == kChildException) << exits[2].describe();
  EXPECT_FALSE(allRanksSucceeded(exits));
  // The deliberate failure happened in a child; this (parent) test is unaffected by it.
  EXPECT_FALSE(::testing::Test::HasFailure());
}

TEST(ProcessLauncher, KillsChildrenStillRunningAtTheDeadline) {
  // Rank 0 must get through init, calibration and destroy before the deadline: 5 s leaves room for ASan on a
  // loaded machine (it takes a few hundred ms there).
  auto t0 = std::chrono::steady_clock::now();
  auto exits = ProcessLauncher::run(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 1) std::this_thread::sleep_for(60s);
      },
      procOptions(), 5s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
  ASSERT_EQ(exits.size(), 2u);
  EXPECT_TRUE(exits[0].ok()) << exits[0].describe();
  EXPECT_TRUE(exits[1].killedAtDeadline) << exits[1].describe();
  EXPECT_EQ(exits[1].signal, SIGKILL) << exits[1].describe();
}

// ---- collierun + init from the environment ------------------------------------------------------------------

std::string pathOf(const char* env, const char* builtIn) {
  const char* v = std::getenv(env);
  return (v && *v) ? std::string(v) : std::string(builtIn);
}

#ifndef COLLIERUN_PATH
#define COLLIERUN_PATH ""
#endif
#ifndef COLLIE_ENV_ALLREDUCE_PATH
#define COLLIE_ENV_ALLREDUCE_PATH ""
#endif

class Collierun : public ::testing::TestWithParam<int> {};

TEST_P(Collierun, EnvInitAllReduceFromPlainC) {
  const int n = GetParam();
  std::string collierun = pathOf("COLLIERUN", COLLIERUN_PATH);
  const std::string helper = pathOf("COLLIE_ENV_ALLREDUCE", COLLIE_ENV_ALLREDUCE_PATH);
  if (collierun.empty()) {
    const char* dir = std::getenv("COLLIE_BUILD_DIR");
    if (dir) collierun = std::string(dir) + "/tools/collierun";
  }
  if (collierun.empty() || access(collierun.c_str(), X_OK) != 0) {
    GTEST_SKIP() << "collierun was not built (COLLIE_BUILD_TOOLS=OFF): '" << collierun << "'";
  }
  ASSERT_EQ(access(helper.c_str(), X_OK), 0) << "helper not built: " << helper;
  const std::string cmd = collierun + " -n " + std::to_string(n) + " --timeout 120 " + helper + " 2>&1";
  int status = -1;
  const std::string out = runCommand(cmd, &status);
  ASSERT_GE(status, 0) << cmd << " did not exit normally\n" << out;
  EXPECT_EQ(status, 0) << cmd << "\n" << out;
  for (int r = 0; r < n; ++r) {
    const std::string line =
        "[" + std::to_string(r) + "] env_allreduce ok: rank " + std::to_string(r) + " of " + std::to_string(n);
    EXPECT_NE(out.find(line), std::string::npos) << "missing '" << line << "' in:\n" << out;
  }
}

INSTANTIATE_TEST_SUITE_P(Processes, Collierun, ::testing::Values(1, 2, 4));

// Ranks whose tuners choose different algorithms for one call (here COLLIE_ALGO differs; a CPU count or a host's
// rank count that differs did the same) exchange messages of different schedules. Before 2026-11-29 those passed
// every check and some ranks returned success with wrong sums; the fingerprint now carries the algorithm, so every
// rank fails with a mismatch naming both. Over shm and tcp.
TEST(CollierunAlgorithms, RanksWhoseAlgorithmsDifferFailWithAMismatchNotWrongSums) {
  std::string collierun = pathOf("COLLIERUN", COLLIERUN_PATH);
  const std::string helper = pathOf("COLLIE_ENV_ALLREDUCE", COLLIE_ENV_ALLREDUCE_PATH);
  if (collierun.empty() || access(collierun.c_str(), X_OK) != 0) GTEST_SKIP() << "collierun was not built";
  for (const char* shmDisable : {"0", "1"}) {
    const std::string cmd = "COLLIE_SHM_DISABLE=" + std::string(shmDisable) + " " + collierun +
                            " -n 4 --timeout 60 sh -c 'if [ \"$COLLIE_RANK\" = 0 ]; then export COLLIE_ALGO=rhd; else "
                            "export COLLIE_ALGO=direct; fi; exec " +
                            helper + "' 2>&1";
    int status = -1;
    const std::string out = runCommand(cmd, &status);
    EXPECT_NE(status, 0) << cmd << "\n" << out;
    EXPECT_EQ(out.find("env_allreduce ok"), std::string::npos) << "a rank succeeded:\n" << out;
    EXPECT_NE(out.find("ranks chose different algorithms for one call"), std::string::npos) << out;
    EXPECT_NE(out.find("by rhd"), std::string::npos) << out;
    EXPECT_NE(out.find("by direct"), std::string::npos) << out;
  }
}

// Settings that change the messages ranks exchange must be equal on every rank: the bootstrap root compares them and
// refuses every rank at init, naming the variable (before, COLLIE_SLICE_BYTES failed the first call with a size
// mismatch, COLLIE_INIT_CHUNK init with mismatched Send/Recv, and an eager rank waited for dials until the timeout).
TEST(CollierunSettings, RanksWhoseSettingsDifferFailAtInitNamingTheSetting) {
  std::string collierun = pathOf("COLLIERUN", COLLIERUN_PATH);
  const std::string helper = pathOf("COLLIE_ENV_ALLREDUCE", COLLIE_ENV_ALLREDUCE_PATH);
  if (collierun.empty() || access(collierun.c_str(), X_OK) != 0) GTEST_SKIP() << "collierun was not built";
  struct Case {
    const char* setting;  // exported on rank 2 only
    const char* named;    // what every refusal says
  };
  const Case cases[] = {
      {"COLLIE_SLICE_BYTES=8192", "COLLIE_SLICE_BYTES is 0 (unset) on rank 0 but 8192 on rank 2"},
      {"COLLIE_INIT_CHUNK=1", "COLLIE_INIT_CHUNK is 0 (unset) on rank 0 but 1 on rank 2"},
      {"COLLIE_CONNECT=eager", "COLLIE_CONNECT (or the config's connect mode) is lazy on rank 0 but eager on rank 2"},
  };
  for (const Case& c : cases) {
    for (const char* shmDisable : {"0", "1"}) {
      const std::string cmd = "COLLIE_SHM_DISABLE=" + std::string(shmDisable) + " " + collierun +
                              " -n 4 --timeout 60 sh -c 'if [ \"$COLLIE_RANK\" = 2 ]; then export " + c.setting +
                              "; fi; exec " + helper + "' 2>&1";
      int status = -1;
      const std::string out = runCommand(cmd, &status);
      EXPECT_NE(status, 0) << cmd << "\n" << out;
      EXPECT_EQ(out.find("env_allreduce ok"), std::string::npos) << "a rank succeeded:\n" << out;
      // The root's log line, then each rank's error (collierun stops the others once the first exits).
      EXPECT_NE(out.find(std::string("bootstrap root: refused every rank: ") + c.named), std::string::npos) << out;
      EXPECT_NE(out.find("collieCommInitFromEnv(&comm, &config) failed: invalid usage"), std::string::npos) << out;
      EXPECT_NE(out.find(std::string(c.named) + "; it must be the same on every rank (bootstrap.cpp"),
                std::string::npos)
          << out;
    }
  }
  // Settings that may differ still may: slices in flight only pace a rank's own receives.
  const std::string cmd = collierun +
                          " -n 4 --timeout 60 sh -c 'if [ \"$COLLIE_RANK\" = 2 ]; then export "
                          "COLLIE_SLICES_IN_FLIGHT=1; fi; exec " +
                          helper + "' 2>&1";
  int status = -1;
  const std::string out = runCommand(cmd, &status);
  EXPECT_EQ(status, 0) << out;
}

}  // namespace
}  // namespace collie::test
