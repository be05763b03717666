// The collectives under each forced algorithm, with every rank a thread of this process (ThreadLauncher):
// COLLIE_ALGO=tree for AllReduce, Broadcast and Reduce, COLLIE_ALGO=rhd for AllReduce, AllGather and
// ReduceScatter, COLLIE_ALGO=direct for AllReduce (the one-exchange algorithm for tiny messages; forced here at
// every size) (forced through core::setAlgoOverride, which is what COLLIE_ALGO sets for a whole process), for
// 2..8 ranks (powers of two and not: halving-doubling folds the extra ranks), three types x three ops x counts
// from 0 to 300001 (several slices per step), in place and out of place, checked element by element; plus
// async calls and groups under each algorithm.
#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/bodies.hpp"
#include "common/launcher.hpp"
#include "core/tuner.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

// Forces an algorithm for the communicators created while it lives.
class ForcedAlgorithm {
 public:
  explicit ForcedAlgorithm(const std::string& spec) { core::setAlgoOverride(spec); }
  ~ForcedAlgorithm() { core::setAlgoOverride(std::nullopt); }
  ForcedAlgorithm(const ForcedAlgorithm&) = delete;
  ForcedAlgorithm& operator=(const ForcedAlgorithm&) = delete;
};

Options testOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "algorithms";
  return o;
}

struct Case {
  std::string algo;
  Coll coll;
};

std::vector<Case> cases() {
  return {{"tree", Coll::AllReduce},    {"tree", Coll::Broadcast}, {"tree", Coll::Reduce},     {"rhd", Coll::AllReduce},
          {"rhd", Coll::ReduceScatter}, {"rhd", Coll::AllGather},  {"direct", Coll::AllReduce}};
}

class AlgorithmMatrix : public ::testing::TestWithParam<std::tuple<Case, int>> {};

TEST_P(AlgorithmMatrix, TypesOpsCountsAndPlacement) {
  const auto [c, nranks] = GetParam();
  ForcedAlgorithm forced(c.algo);
  Matrix m;
  m.types = {DataType::Float32, DataType::Int64, DataType::Bfloat16};
  m.ops = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Avg};
  m.counts = {0, 1, 7, static_cast<size_t>(nranks - 1), static_cast<size_t>(nranks + 1), 4097, 300001};
  ThreadLauncher::run(
      nranks, [&](Communicator& comm) { runMatrix(comm, c.coll, m); }, testOptions());
}

std::string matrixName(const ::testing::TestParamInfo<std::tuple<Case, int>>& info) {
  const Case& c = std::get<0>(info.param);
  return c.algo + "_" + collName(c.coll) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Forced, AlgorithmMatrix,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::Values(2, 3, 4, 5, 6, 7, 8)),
                         matrixName);

class AlgorithmBodies : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AlgorithmBodies, AsyncCalls) {
  ForcedAlgorithm forced(std::get<0>(GetParam()));
  ThreadLauncher::run(std::get<1>(GetParam()), asyncBody, testOptions());
}

TEST_P(AlgorithmBodies, Groups) {
  ForcedAlgorithm forced(std::get<0>(GetParam()));
  ThreadLauncher::run(std::get<1>(GetParam()), groupBody, testOptions());
}

TEST_P(AlgorithmBodies, Split) {
  ForcedAlgorithm forced(std::get<0>(GetParam()));
  ThreadLauncher::run(std::get<1>(GetParam()), splitBody, testOptions());
}

std::string bodyName(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  const std::string& spec = std::get<0>(info.param);
  return (spec.find(':') != std::string::npos ? "mixed" : spec) + "_" + std::to_string(std::get<1>(info.param)) +
         "ranks";
}

INSTANTIATE_TEST_SUITE_P(Forced, AlgorithmBodies,
                         ::testing::Combine(::testing::Values("tree", "rhd", "direct",
                                                              "allreduce:rhd;broadcast:tree;reduce:tree"),
                                            ::testing::Values(3, 4, 6)),
                         bodyName);

TEST(AlgorithmSelection, BadCollieAlgoFailsCommunicatorCreation) {
  EXPECT_THROW(core::setAlgoOverride(std::string("trees")), Error);
  EXPECT_THROW(core::setAlgoOverride(std::string("allreduce:tree;gather:ring")), Error);
}

}  // namespace
}  // namespace collie::test
