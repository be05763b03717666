// Communicator::lastCall() across processes: with COLLIE_SHM_DISABLE=1 same-host ranks are linked by tcp and the
// report says "tcp"; without it, "shm". Each algorithm is forced through COLLIE_ALGO in the children's
// environment (set before the fork, read by each child at its communicator's creation).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <string>
#include <tuple>
#include <vector>

#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

class LastCallProc : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(LastCallProc, NamesTheAlgorithmAndTheTransport) {
  const auto [tcp, algo] = GetParam();
  ScopedEnv shm(tcp ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  ScopedEnv forced("COLLIE_ALGO", algo.c_str());
  Options o;
  o.timeout = 60s;
  o.name = "last-call-proc";
  auto exits = ProcessLauncher::run(
      3,
      [tcp = tcp, algo = algo](Communicator& c) {
        std::vector<float> v(1000, 1.0f);
        c.allReduce(std::span<float>(v), ReduceOp::Sum);
        EXPECT_EQ(v[999], 3.0f);
        CallInfo info = c.lastCall();
        EXPECT_EQ(info.collective, "allreduce");
        EXPECT_EQ(info.algorithm, algo);
        EXPECT_EQ(info.transport, tcp ? "tcp" : "shm");
        EXPECT_EQ(info.bytes, 4000u);
      },
      o, 120s);
  EXPECT_TRUE(allRanksSucceeded(exits));
}

INSTANTIATE_TEST_SUITE_P(Transports, LastCallProc,
                         ::testing::Combine(::testing::Bool(), ::testing::Values("ring", "tree", "rhd", "direct")),
                         [](const ::testing::TestParamInfo<std::tuple<bool, std::string>>& info) {
                           return std::string(std::get<0>(info.param) ? "tcp_" : "shm_") + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace collie::test
