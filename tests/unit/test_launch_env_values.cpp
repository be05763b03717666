// The launchers' integer variables (COLLIE_RANK/COLLIE_NRANKS, RANK/WORLD_SIZE, ..., MASTER_PORT) are checked
// before init does anything: a value past an int's range used to be truncated (COLLIE_NRANKS=4294967297 made a
// 1-rank job) and MASTER_PORT=2147483647 overflowed the +1 that gives the bootstrap port. Each must fail at once
// with InvalidArgument naming the variable, its value and the range. (Found reviewing the parsers for fuzzing.)
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <collie/collie.hpp>
#include <cstdint>
#include <string>

#include "common/scoped_env.hpp"
#include "core/launch_env.hpp"

namespace collie {
namespace {

using test::ScopedEnv;

/// The message createFromEnv fails with, checked to be InvalidArgument ("" if it did not fail).
std::string initFailure() {
  try {
    Communicator::createFromEnv();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

TEST(LaunchEnvValues, RankAndSizePastAnIntAreRefusedNotTruncated) {
  {
    ScopedEnv rank("COLLIE_RANK", "0"), size("COLLIE_NRANKS", "4294967297");
    EXPECT_NE(initFailure().find("COLLIE_NRANKS='4294967297' is not an integer in [1, 2147483647]"), std::string::npos);
  }
  {
    ScopedEnv rank("COLLIE_RANK", "4294967296"), size("COLLIE_NRANKS", "2");
    EXPECT_NE(initFailure().find("COLLIE_RANK='4294967296' is not an integer in [0, 2147483646]"), std::string::npos);
  }
  {
    ScopedEnv rank("RANK", "99999999999999999999999"), size("WORLD_SIZE", "2");
    EXPECT_NE(initFailure().find("RANK='99999999999999999999999'"), std::string::npos);
  }
  {
    ScopedEnv rank("COLLIE_RANK", "-1"), size("COLLIE_NRANKS", "2");
    EXPECT_NE(initFailure().find("COLLIE_RANK='-1'"), std::string::npos);
  }
}

TEST(LaunchEnvValues, MasterPortMustLeaveRoomForTheBootstrapPort) {
  ScopedEnv rank("RANK", "1"), size("WORLD_SIZE", "2"), addr("MASTER_ADDR", "127.0.0.1");
  for (const char* port : {"2147483647", "65535", "-1", "x"}) {
    ScopedEnv p("MASTER_PORT", port);
    EXPECT_NE(initFailure().find(std::string("MASTER_PORT='") + port + "' is not an integer in [0, 65534]"),
              std::string::npos)
        << port;
  }
}

// Under srun or a one-host mpirun with no address given, the ranks meet where the launcher's own variables say
// (core/launch_env.hpp); the real launchers run in tests/launchers/. These check the parts that decide it.
TEST(LaunchEnvMeeting, FirstHostOfASlurmHostList) {
  EXPECT_EQ(core::firstHostOfList("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(core::firstHostOfList("node[7,3-4]"), "node7");
  EXPECT_EQ(core::firstHostOfList("rack[2-3]-n[005,9]"), "rack2-n005");
  EXPECT_EQ(core::firstHostOfList("alpha,beta"), "alpha");
  EXPECT_EQ(core::firstHostOfList("solo"), "solo");
  EXPECT_EQ(core::firstHostOfList("a-b.example.org"), "a-b.example.org");
  EXPECT_EQ(core::firstHostOfList(""), "");
}

TEST(LaunchEnvMeeting, DerivedPortsAreStableInRangeAndDifferPerJob) {
  EXPECT_EQ(core::derivedPort("slurm/4242.0"), core::derivedPort("slurm/4242.0"));
  int distinct = 0;
  for (int job = 0; job < 100; ++job) {
    const int p = core::derivedPort("slurm/" + std::to_string(job) + ".0");
    EXPECT_GE(p, core::kDerivedPortBase);
    EXPECT_LT(p, core::kDerivedPortBase + core::kDerivedPortSpan);
    distinct += p != core::derivedPort("slurm/" + std::to_string(job) + ".1");
  }
  EXPECT_GE(distinct, 95);  // two steps of a job meet on different ports (a few hash collisions allowed)
}

TEST(LaunchEnvMeeting, SlurmStepsMeetOnTheFirstNodeOrOnLoopback) {
  ScopedEnv job("SLURM_JOB_ID", "4242"), step("SLURM_STEP_ID", "3");
  std::string from, why;
  {
    ScopedEnv nodes("SLURM_STEP_NODELIST", "cn[017-020]"), n("SLURM_STEP_NUM_NODES", "4"),
        me("SLURMD_NODENAME", "cn018");
    EXPECT_EQ(core::meetingPointOfLauncher("Slurm", 1, 4, &from, &why),
              "cn017:" + std::to_string(core::derivedPort("slurm/4242.3")));
    EXPECT_NE(from.find("cn[017-020]"), std::string::npos) << from;
    // Rank 0 elsewhere than the first node (an arbitrary distribution): no meeting point, and why.
    EXPECT_EQ(core::meetingPointOfLauncher("Slurm", 0, 4, &from, &why), "");
    EXPECT_NE(why.find("rank 0 runs on cn018, not on the step's first node cn017"), std::string::npos) << why;
  }
  {
    ScopedEnv nodes("SLURM_STEP_NODELIST", "cn017"), n("SLURM_STEP_NUM_NODES", "1");
    EXPECT_EQ(core::meetingPointOfLauncher("Slurm", 0, 2, &from, &why),
              "127.0.0.1:" + std::to_string(core::derivedPort("slurm/4242.3")));
  }
}

TEST(LaunchEnvMeeting, OpenMpiAcrossHostsWithoutAnAddressSaysWhatToPass) {
  ScopedEnv rank("OMPI_COMM_WORLD_RANK", "1"), size("OMPI_COMM_WORLD_SIZE", "4"),
      local("OMPI_COMM_WORLD_LOCAL_SIZE", "2"), job("OMPI_MCA_ess_base_jobid", "77");
  std::string message;
  try {
    Communicator::createFromEnv();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
    message = e.what();
  }
  EXPECT_NE(message.find("Open MPI gave rank 1 of 4 but no meeting point"), std::string::npos) << message;
  EXPECT_NE(message.find("mpirun -x MASTER_ADDR="), std::string::npos) << message;
  std::string from, why;
  ScopedEnv one("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  EXPECT_EQ(core::meetingPointOfLauncher("Open MPI", 1, 4, &from, &why),
            "127.0.0.1:" + std::to_string(core::derivedPort("ompi/77")));
}

// srun --mpi=pmi2 (or MpiDefault=pmi2) sets PMI_RANK/PMI_SIZE beside SLURM_PROCID: the step's variables still say
// where to meet. Rank 0 placed off the step's first node proves the Slurm derivation ran (and fails at once).
TEST(LaunchEnvMeeting, PmiRanksInsideAnSrunStepMeetWhereTheStepSays) {
  ScopedEnv rank("PMI_RANK", "0"), size("PMI_SIZE", "4"), job("SLURM_JOB_ID", "4242"), step("SLURM_STEP_ID", "3"),
      nodes("SLURM_STEP_NODELIST", "cn[017-020]"), n("SLURM_STEP_NUM_NODES", "4"), me("SLURMD_NODENAME", "cn018");
  std::string message;
  try {
    Communicator::createFromEnv();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
    message = e.what();
  }
  EXPECT_NE(message.find("PMI gave rank 0 of 4 but no meeting point"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0 runs on cn018, not on the step's first node cn017"), std::string::npos) << message;
}

// A program run in the batch script itself (no srun) sees SLURM_PROCID=0 and SLURM_NTASKS=N but is alone: it
// must fail at once rather than host a root and wait COLLIE_TIMEOUT for ranks that never come. One rank is fine.
TEST(LaunchEnvMeeting, SlurmBatchScriptWithoutAStepFailsAtOnce) {
  ScopedEnv rank("SLURM_PROCID", "0"), size("SLURM_NTASKS", "2"), job("SLURM_JOB_ID", "4242"),
      jobNodes("SLURM_JOB_NODELIST", "cn017"), nn("SLURM_NNODES", "1"), timeout("COLLIE_TIMEOUT", "20000");
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    Communicator::createFromEnv();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << e.what();
    message = e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_NE(message.find("Slurm gave rank 0 of 2 but no meeting point"), std::string::npos) << message;
  EXPECT_NE(message.find("not inside an srun step"), std::string::npos) << message;
  std::string from, why;
  EXPECT_EQ(core::meetingPointOfLauncher("Slurm", 0, 1, &from, &why),
            "127.0.0.1:" + std::to_string(core::derivedPort("slurm/4242.batch")));
}

// Open MPI 5 sets only PMIX_NAMESPACE, from which the port is derived: two one-host jobs whose ports collide
// must still hold different secrets (strays from the other job are refused).
TEST(LaunchEnvMeeting, DerivedSecretsDifferWhereTheJobIdsDiffer) {
  const std::string root = "127.0.0.1:21234";
  std::array<uint8_t, 16> a{}, a2{}, b{};
  {
    ScopedEnv ns("PMIX_NAMESPACE", "prterun-host-1111@1");
    a = core::secretFromEnv(root, 4);
    a2 = core::secretFromEnv(root, 4);
  }
  {
    ScopedEnv ns("PMIX_NAMESPACE", "prterun-host-2222@1");
    b = core::secretFromEnv(root, 4);
  }
  EXPECT_EQ(a, a2);
  EXPECT_NE(a, b);
  for (const char* var : {"OMPI_MCA_ess_base_jobid", "SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID"}) {
    ScopedEnv v(var, "7");
    EXPECT_NE(core::secretFromEnv(root, 4), core::secretFromEnv(root + "0", 4)) << var;
    std::array<uint8_t, 16> with = core::secretFromEnv(root, 4);
    ScopedEnv other(var, "8");
    EXPECT_NE(core::secretFromEnv(root, 4), with) << var;
  }
}

}  // namespace
}  // namespace collie
