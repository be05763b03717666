// The collectives under each forced algorithm, with every rank a thread of this process (ThreadLauncher):
// COLLIE_ALGO=tree for AllReduce, Broadcast and Reduce, COLLIE_ALGO=rhd for AllReduce, AllGather and
// ReduceScatter, COLLIE_ALGO=direct for AllReduce (the one-exchange algorithm for tiny messages; forced here at
// every size), COLLIE_ALGO=hier for AllReduce, Broadcast, Reduce, AllGather and ReduceScatter (all ranks on one host
// here; test_hierarchical.cpp puts them on several) (forced through core::setAlgoOverride, which is what COLLIE_ALGO
// sets for a whole process), for 2..8 ranks (powers of two and not: halving-doubling folds the extra ranks), three
// types x three ops x counts from 0 to 300001 (several slices per step), in place and out of place, checked element by
// element; plus async calls, groups and split under each algorithm. After every call the bodies check with
// Communicator::lastCall() that the forced algorithm is what ran (ranWhatIsForced). A bad COLLIE_ALGO fails
// communicator creation.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "algorithms/algorithms.hpp"
#include "base/datatypes.hpp"
#include "common/bodies.hpp"
#include "common/data.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"
#include "core/tuner.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options testOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "algorithms";
  return o;
}

// After each call the bodies make (checkLastCall): what ran is what `spec` forces. The algorithm lastCall() names
// implements the collective, and is the forced one (one of the forced ones) wherever the forced algorithms
// implement it; elsewhere the tuner falls back to a supported one (as NCCL does for NCCL_ALGO).
CallCheck ranWhatIsForced(const std::string& spec) {
  return [spec, sel = core::AlgoSelection::parse(spec)](const CallInfo& ran) {
    algorithms::Collective coll;
    ASSERT_TRUE(algorithms::parseCollective(ran.collective, &coll)) << "collective '" << ran.collective << "'";
    algorithms::Algorithm algo;
    ASSERT_TRUE(algorithms::parseAlgorithm(ran.algorithm, &algo)) << "algorithm '" << ran.algorithm << "'";
    EXPECT_TRUE(algorithms::supports(algo, coll)) << ran.algorithm << " ran " << ran.collective;
    std::string forced;
    for (algorithms::Algorithm a : algorithms::kAllAlgorithms) {
      if (sel.allowed(coll, a) && algorithms::supports(a, coll))
        forced += std::string(" ") + algorithms::algorithmName(a) + " ";
    }
    if (!forced.empty()) {
      EXPECT_NE(forced.find(" " + ran.algorithm + " "), std::string::npos)
          << "COLLIE_ALGO='" << spec << "' forces {" << forced << "} for " << ran.collective << ", but "
          << ran.algorithm << " ran";
    }
  };
}

struct Case {
  std::string algo;
  Coll coll;
};

std::vector<Case> cases() {
  return {{"tree", Coll::AllReduce},   {"tree", Coll::Broadcast},    {"tree", Coll::Reduce},
          {"rhd", Coll::AllReduce},    {"rhd", Coll::ReduceScatter}, {"rhd", Coll::AllGather},
          {"direct", Coll::AllReduce}, {"hier", Coll::AllReduce},    {"hier", Coll::Broadcast},
          {"hier", Coll::Reduce},      {"hier", Coll::AllGather},    {"hier", Coll::ReduceScatter}};
}

class AlgorithmMatrix : public ::testing::TestWithParam<std::tuple<Case, int>> {};

TEST_P(AlgorithmMatrix, TypesOpsCountsAndPlacement) {
  const auto [c, nranks] = GetParam();
  ForcedAlgorithm forced(c.algo);
  CheckEachCall check(ranWhatIsForced(c.algo));
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

// A test name from an (algorithm, ranks) parameter: "ring_3ranks".
std::string algoRanksName(const ::testing::TestParamInfo<std::tuple<std::string, int>>& info) {
  return std::get<0>(info.param) + "_" + std::to_string(std::get<1>(info.param)) + "ranks";
}

// Every rank must end an AllReduce with the same bits, also where compare-equal values differ in bits (+0 and -0)
// and for NaNs with different payloads: direct and recursive doubling have two ranks each fold the other's value
// into their own, so Max and Min must not depend on the operands' order, and a pair must fold in one order (x86's
// addition of two NaNs gives the first one's bits). Counts: 64 floats (recursive doubling's
// range) and 1000 (the halving form).
class SameBitsOnEveryRank : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(SameBitsOnEveryRank, SignedZerosAndNans) {
  const auto [algo, nranks] = GetParam();
  ForcedAlgorithm forced("allreduce:" + algo);
  const uint32_t specials[] = {0x00000000u, 0x80000000u, 0x7FC00000u, 0xFFC00000u, 0x7FC00001u, 0x3F800000u};
  constexpr size_t kSpecials = sizeof(specials) / sizeof(specials[0]);
  for (size_t count : {size_t{64}, size_t{1000}}) {
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min, ReduceOp::Sum, ReduceOp::Prod}) {
      std::vector<std::vector<uint32_t>> results(static_cast<size_t>(nranks));
      ThreadLauncher::run(
          nranks,
          [&](Communicator& comm) {
            std::vector<uint32_t> in(count), out(count);
            const size_t r = static_cast<size_t>(comm.rank());
            for (size_t i = 0; i < count; ++i) in[i] = specials[(i / kSpecials + i * r) % kSpecials];
            comm.allReduce(in.data(), out.data(), count, DataType::Float32, op);
            EXPECT_EQ(comm.lastCall().algorithm, algo);
            results[r] = out;
          },
          testOptions());
      for (int r = 1; r < nranks; ++r)
        for (size_t i = 0; i < count; ++i)
          ASSERT_EQ(results[0][i], results[static_cast<size_t>(r)][i])
              << "op " << static_cast<int>(op) << " count " << count << ": rank " << r
              << " differs from rank 0 at element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Forced, SameBitsOnEveryRank,
                         ::testing::Combine(::testing::Values("direct", "rhd", "ring", "tree"),
                                            ::testing::Values(2, 3, 4, 5, 8)),
                         algoRanksName);

// An Avg over a floating type must not overflow where the average itself is representable. Every rank holds values
// near the type's largest power of two, so a sum of two of them overflows: before 2026-11-29 collie summed and then
// divided, and fp16 gradients of 30000 averaged over 4 ranks came out inf (NCCL multiplies each input by 1/nranks
// first; collie divides each by a power of two, which is exact). Each element is checked against the exact sum
// divided by nranks, rounded as the library rounds (in float for fp16, bf16 and fp32), for AllReduce, Reduce (to
// the last rank) and ReduceScatter, in place and out of place.
// Makes the reducing call `coll` (Reduce to the last rank; ReduceScatter gives this rank block `rank`) of `count`
// elements of `in`, in place or into a buffer of its own, and checks, element by element, what this rank gets
// against `expected` (the whole reduced input) and, out of place, that `in` is as it was. One report per case: the
// calls go on, as on the other ranks.
void reduceAndCheck(Communicator& comm, Coll coll, DataType type, const Reduction& op, size_t count, bool inPlace,
                    std::vector<uint8_t>& in, const std::vector<uint8_t>& expected) {
  const int rank = comm.rank(), nranks = comm.size();
  const size_t es = base::dataTypeSize(type);
  const size_t block = coll == Coll::ReduceScatter ? static_cast<size_t>(rank) * count * es : 0;
  std::vector<uint8_t> out(in.size(), 0xA5);
  void* recv = inPlace ? in.data() + block : out.data();
  const std::vector<uint8_t> sent = in;
  if (coll == Coll::AllReduce) comm.allReduce(in.data(), recv, count, type, op);
  if (coll == Coll::Reduce) comm.reduce(in.data(), recv, count, type, op, nranks - 1);
  if (coll == Coll::ReduceScatter) comm.reduceScatter(in.data(), recv, count, type, op);
  const std::string what = std::string(base::dataTypeName(type)) + " " + collName(coll) + " count " +
                           std::to_string(count) + (inPlace ? " in place" : "") + ": rank " + std::to_string(rank);
  if (!inPlace && in != sent) ADD_FAILURE() << what << ": the send buffer changed";
  if (coll == Coll::Reduce && rank != nranks - 1) return;
  const uint8_t* got = static_cast<const uint8_t*>(recv);
  const uint8_t* want = expected.data() + block;
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * es, want + i * es, es) == 0) continue;
    ADD_FAILURE() << what << " element " << i << ": " << show(got + i * es, type) << ", expected "
                  << show(want + i * es, type);
    return;
  }
}

double avgInput(int rank, size_t i, int topExponent) {
  return (i % 3 == 0 ? -1.0 : 1.0) * std::ldexp(1.0, topExponent - static_cast<int>((i + rank) % 4));
}

class AvgDoesNotOverflow : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AvgDoesNotOverflow, ValuesNearTheLargest) {
  const auto [algo, nranks] = GetParam();
  ForcedAlgorithm forced(algo);
  const std::pair<DataType, int> types[] = {
      {DataType::Float16, 15}, {DataType::Bfloat16, 127}, {DataType::Float32, 127}, {DataType::Float64, 1023}};
  ThreadLauncher::run(  // one communicator per rank for every case: each rank makes the same calls in the same order
      nranks,
      [&](Communicator& comm) {
        const int rank = comm.rank();
        for (const auto& [type, top] : types) {
          const size_t es = base::dataTypeSize(type);
          for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter}) {
            for (size_t count : {size_t{1}, size_t{1000}}) {
              for (bool inPlace : {false, true}) {
                const size_t inCount = coll == Coll::ReduceScatter ? count * static_cast<size_t>(nranks) : count;
                std::vector<uint8_t> in(inCount * es), expected(inCount * es);
                for (size_t i = 0; i < inCount; ++i) {
                  encode(in.data() + i * es, type, avgInput(rank, i, top));
                  double sum = 0;  // exact, scaled by 2^-top so that float64's does not overflow either
                  for (int r = 0; r < nranks; ++r) sum += std::ldexp(avgInput(r, i, top), -top);
                  const double avg = type == DataType::Float64 ? sum / nranks : static_cast<float>(sum / nranks);
                  encode(expected.data() + i * es, type, std::ldexp(avg, top));
                }
                reduceAndCheck(comm, coll, type, ReduceOp::Avg, count, inPlace, in, expected);
              }
            }
          }
        }
      },
      testOptions());
}

INSTANTIATE_TEST_SUITE_P(Forced, AvgDoesNotOverflow,
                         ::testing::Combine(::testing::Values("ring", "tree", "rhd", "direct", "hier"),
                                            ::testing::Values(2, 3, 5, 8)),
                         algoRanksName);

// PreMulSum (NCCL's ncclRedOpCreatePreMulSum): every rank's input times that rank's own factor, summed. Factors and
// inputs are chosen so that every product and sum is exact in the type (integers wrap: uint8 factors above 200, an
// int64 factor above 2^60, beyond what a double carries), so each element must equal the exact expected bits
// whatever order an algorithm sums in; AllReduce, Reduce (to the last rank) and ReduceScatter, in place and out of
// place, every type.
struct PreMulCase {
  DataType type;
  bool integer;
};

// This rank's factor as the bits of one element of `type` in the word's first bytes (integers: the whole word is
// the factor, so the expected sums can wrap in 64 bits and be cut to the type's width).
uint64_t preMulFactorBits(DataType type, int rank) {
  uint8_t bytes[8] = {0};
  switch (type) {
    case DataType::Uint8:
      return static_cast<uint64_t>(200 + rank);
    case DataType::Int32:
      return static_cast<uint64_t>(static_cast<int64_t>(rank - 2));  // sign-extended: its first 4 bytes are the int32
    case DataType::Int64:
      return (uint64_t{1} << 60) + static_cast<uint64_t>(rank);
    default:
      encode(bytes, type, 0.5 * (rank % 3 + 1));
      uint64_t bits;
      std::memcpy(&bits, bytes, 8);
      return bits;
  }
}

int64_t preMulInput(int rank, size_t i) { return static_cast<int64_t>((i + static_cast<size_t>(rank) * 3) % 7) - 3; }

class PreMulSumMatrix : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(PreMulSumMatrix, EveryRanksOwnFactorExactly) {
  const auto [algo, nranks] = GetParam();
  ForcedAlgorithm forced(algo);
  const PreMulCase types[] = {{DataType::Float32, false}, {DataType::Float16, false}, {DataType::Bfloat16, false},
                              {DataType::Float64, false}, {DataType::Int32, true},    {DataType::Uint8, true},
                              {DataType::Int64, true}};
  ThreadLauncher::run(
      nranks,
      [&](Communicator& comm) {
        const int rank = comm.rank();
        for (const PreMulCase& t : types) {
          const size_t es = base::dataTypeSize(t.type);
          const uint64_t factor = preMulFactorBits(t.type, rank);
          const Reduction op = Reduction::preMulSum(&factor, t.type);
          for (Coll coll : {Coll::AllReduce, Coll::Reduce, Coll::ReduceScatter}) {
            for (size_t count : {size_t{1}, size_t{1000}, size_t{70001}}) {
              for (bool inPlace : {false, true}) {
                const size_t inCount = coll == Coll::ReduceScatter ? count * static_cast<size_t>(nranks) : count;
                std::vector<uint8_t> in(inCount * es), expected(inCount * es);
                for (size_t i = 0; i < inCount; ++i) {
                  uint64_t sum = 0;  // integers: wrapping in 64 bits, then cut to the type's width
                  double fsum = 0;   // floating: exact for these values
                  for (int r = 0; r < nranks; ++r) {
                    const uint64_t f = preMulFactorBits(t.type, r);
                    if (t.integer) {
                      sum += static_cast<uint64_t>(preMulInput(r, i)) * f;
                    } else {
                      fsum += static_cast<double>(preMulInput(r, i)) * 0.5 * (r % 3 + 1);
                    }
                  }
                  if (t.integer) {
                    const uint64_t mine = static_cast<uint64_t>(preMulInput(rank, i));
                    std::memcpy(in.data() + i * es, &mine, es);
                    std::memcpy(expected.data() + i * es, &sum, es);
                  } else {
                    encode(in.data() + i * es, t.type, static_cast<double>(preMulInput(rank, i)));
                    encode(expected.data() + i * es, t.type, fsum);
                  }
                }
                reduceAndCheck(comm, coll, t.type, op, count, inPlace, in, expected);
              }
            }
          }
        }
      },
      testOptions());
}

INSTANTIATE_TEST_SUITE_P(Forced, PreMulSumMatrix,
                         ::testing::Combine(::testing::Values("ring", "tree", "rhd", "direct", "hier"),
                                            ::testing::Values(2, 3, 5, 8)),
                         algoRanksName);

class AlgorithmBodies : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(AlgorithmBodies, AsyncCalls) {
  ForcedAlgorithm forced(std::get<0>(GetParam()));
  CheckEachCall check(ranWhatIsForced(std::get<0>(GetParam())));
  ThreadLauncher::run(std::get<1>(GetParam()), asyncBody, testOptions());
}

TEST_P(AlgorithmBodies, Groups) {
  ForcedAlgorithm forced(std::get<0>(GetParam()));
  CheckEachCall check(ranWhatIsForced(std::get<0>(GetParam())));
  ThreadLauncher::run(std::get<1>(GetParam()), groupBody, testOptions());
}

TEST_P(AlgorithmBodies, Split) {
  ForcedAlgorithm forced(std::get<0>(GetParam()));
  CheckEachCall check(ranWhatIsForced(std::get<0>(GetParam())));
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

// A COLLIE_ALGO that names an unknown algorithm or collective fails Communicator creation with InvalidArgument
// naming the variable and the bad part. COLLIE_ALGO is read once per process, so the test runs itself in a child
// process with the bad value set (and the test override, which is parsed when set, refuses it too).
TEST(AlgorithmSelection, BadCollieAlgoFailsCommunicatorCreation) {
  const char* spec = std::getenv("COLLIE_ALGO");
  if (spec == nullptr || std::string(spec).empty()) {
    EXPECT_THROW(core::setAlgoOverride(std::string("trees")), Error);
    const int status = rerunCurrentTestWith({"COLLIE_ALGO=broadcast:tree;allreduce:trees"});
    ASSERT_TRUE(WIFEXITED(status)) << "the child run with a bad COLLIE_ALGO did not exit (status " << status << ")";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run with a bad COLLIE_ALGO failed (its output is above)";
    return;
  }
  try {
    auto comms = Communicator::createAll(2, testOptions());
    ADD_FAILURE() << "COLLIE_ALGO='" << spec << "': " << comms.size() << " communicators were created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("COLLIE_ALGO"), std::string::npos) << msg;
    EXPECT_NE(msg.find("'trees'"), std::string::npos) << "the message must name the bad part: " << msg;
    EXPECT_NE(msg.find(spec), std::string::npos) << "the message must quote the value: " << msg;
  }
}

}  // namespace
}  // namespace collie::test
