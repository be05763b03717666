// Communicator::lastCall(): for each algorithm forced through COLLIE_ALGO (core::setAlgoOverride), the report of
// the last call names that algorithm, the collective, the bytes and the transport of the peers the schedule used
// ("shm" between threads of this process, "tcp" when COLLIE_SHM_DISABLE=1, "self" for one rank). The tcp case
// over processes is in tests/multiproc/test_last_call_proc.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options testOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "last_call";
  return o;
}

std::string expectedTransport() {
  const char* v = std::getenv("COLLIE_SHM_DISABLE");
  return v && *v && std::string(v) != "0" ? "tcp" : "shm";
}

TEST(LastCall, DescribesAnAllReduce) {
  ThreadLauncher::run(
      2,
      [](Communicator& c) {
        std::vector<float> v(1000, 1.0f);
        c.allReduce(std::span<float>(v), ReduceOp::Sum);
        CallInfo info = c.lastCall();
        EXPECT_EQ(info.collective, "allreduce");
        EXPECT_EQ(info.bytes, 4000u);
        EXPECT_FALSE(info.algorithm.empty());
        EXPECT_EQ(info.transport, expectedTransport());
      },
      testOptions());
}

TEST(LastCall, ReportsTheForcedAlgorithmAndTheTransport) {
  for (const char* algo : {"ring", "tree", "rhd", "direct"}) {
    SCOPED_TRACE(algo);
    ForcedAlgorithm forced(algo);
    ThreadLauncher::run(
        4,
        [&](Communicator& c) {
          std::vector<int32_t> v(4097, c.rank());
          c.allReduce(std::span<int32_t>(v), ReduceOp::Sum);
          EXPECT_EQ(v[0], 6);
          CallInfo info = c.lastCall();
          EXPECT_EQ(info.collective, "allreduce");
          EXPECT_EQ(info.algorithm, algo);
          EXPECT_EQ(info.transport, expectedTransport());
          EXPECT_EQ(info.bytes, 4097u * 4);
          EXPECT_GT(info.sliceBytes, 0u);
          // An async call is reported once it ran.
          std::vector<int32_t> small(4, 1);
          c.allReduceAsync(std::span<int32_t>(small), ReduceOp::Max).wait();
          EXPECT_EQ(c.lastCall().bytes, 16u);
          EXPECT_EQ(c.lastCall().algorithm, algo);
        },
        testOptions());
  }
}

TEST(LastCall, FollowsTheCollective) {
  ForcedAlgorithm forced("ring");
  ThreadLauncher::run(
      3,
      [](Communicator& c) {
        std::vector<double> send(5, 1.0), recv(15);
        c.allGather(send.data(), recv.data(), send.size(), DataType::Float64);
        CallInfo info = c.lastCall();
        EXPECT_EQ(info.collective, "allgather");
        EXPECT_EQ(info.algorithm, "ring");
        EXPECT_EQ(info.bytes, 40u);
        c.broadcast(std::span<double>(recv), 1);
        EXPECT_EQ(c.lastCall().collective, "broadcast");
      },
      testOptions());
}

TEST(LastCall, OneRankIsSelf) {
  ThreadLauncher::run(
      1,
      [](Communicator& c) {
        std::vector<float> v(16, 2.0f);
        c.allReduce(std::span<float>(v), ReduceOp::Sum);
        EXPECT_EQ(c.lastCall().transport, "self");
        EXPECT_EQ(c.lastCall().collective, "allreduce");
      },
      testOptions());
}

}  // namespace
}  // namespace collie::test
