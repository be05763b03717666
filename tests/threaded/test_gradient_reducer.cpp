// GradientReducer (include/collie/ddp.hpp) without any ML framework: gradients are plain host arrays, every rank
// a thread (ThreadLauncher). Bucket assignment (caps, reverse order, per type), exact averages for 1-4 ranks with
// gradients marked in a different order on every rank, the rebuild from rank 0's order, overlap (buckets launched
// before finalize), no_sync, gradient-as-bucket-view, unused parameters (error, find-unused mode), fp16/bf16
// compression and user hooks, the initial broadcast, and caller mistakes. A few seconds in all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <collie/ddp.hpp>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;
using ddp::GradientReducer;
using ddp::Parameter;
using ddp::ReducerOptions;

Options opts() {
  Options o;
  o.timeout = 60s;
  o.name = "ddp";
  return o;
}

constexpr size_t kKiB = 1024;

// A model of float32 parameters with these element counts, named p0, p1, ...
std::vector<Parameter> model(const std::vector<size_t>& counts, DataType type = DataType::Float32) {
  std::vector<Parameter> ps;
  for (size_t i = 0; i < counts.size(); ++i) ps.push_back({"p" + std::to_string(i), counts[i], type, {}, nullptr});
  return ps;
}

// Gradient element j of parameter i on rank r: small integers, so every sum is exact.
float gradValue(int r, size_t i, size_t j) {
  return static_cast<float>(static_cast<int>((r + 1) * 3 + i * 5 + j % 11) % 17 - 8);
}

// The exact mean: the sum over ranks (exact) divided by nranks, rounded once.
float meanValue(int n, size_t i, size_t j) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += gradValue(r, i, j);
  return s / static_cast<float>(n);
}

// A permutation of 0..n-1 that depends on the rank (and differs from registration order and its reverse).
std::vector<size_t> rankOrder(size_t n, int rank) {
  std::vector<size_t> o(n);
  std::iota(o.begin(), o.end(), size_t{0});
  std::mt19937 rng(1234u + static_cast<unsigned>(rank));
  std::shuffle(o.begin(), o.end(), rng);
  return o;
}

TEST(ReducerBuckets, ReverseOrderFirstBucketSmallThenCap) {
  // 10 parameters of 100 KiB (float32): first bucket closes at >= 256 KiB (3 params), then >= 1 MiB... here
  // cap 400 KiB (4 params each), in reverse registration order.
  auto ps = model(std::vector<size_t>(10, 25600));
  std::vector<size_t> order(10);
  std::iota(order.rbegin(), order.rend(), size_t{0});
  auto b = GradientReducer::computeBuckets(ps, order, 256 * kKiB, 400 * kKiB);
  std::vector<std::vector<size_t>> want = {{9, 8, 7}, {6, 5, 4, 3}, {2, 1, 0}};
  EXPECT_EQ(b, want);
}

TEST(ReducerBuckets, DefaultsAreOneMiBThenTwentyFiveMiB) {
  // 40 parameters of 1 MiB each (float32): 1 + 25 + 14.
  auto ps = model(std::vector<size_t>(40, 262144));
  std::vector<size_t> order(40);
  std::iota(order.rbegin(), order.rend(), size_t{0});
  ReducerOptions o;
  auto b = GradientReducer::computeBuckets(ps, order, o.firstBucketCapBytes, o.bucketCapBytes);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].size(), 1u);
  EXPECT_EQ(b[1].size(), 25u);
  EXPECT_EQ(b[2].size(), 14u);
  EXPECT_EQ(b[0][0], 39u);
}

TEST(ReducerBuckets, TypesAndDevicesNeverShareABucket) {
  auto ps = model({10, 10, 10, 10});
  ps[1].type = DataType::Float64;
  ps[3].device = {ddp::DeviceType::Cuda, 0};
  std::vector<size_t> order = {3, 2, 1, 0};
  auto b = GradientReducer::computeBuckets(ps, order, 1 << 20, 1 << 20);
  // Ordered by the position of their first member: {3} (cuda), {2, 0} (float32 cpu), {1} (float64).
  std::vector<std::vector<size_t>> want = {{3}, {2, 0}, {1}};
  EXPECT_EQ(b, want);
}

// Runs `iterations` synchronised iterations on every rank, each marking gradients in the rank's own order, and
// checks every written-back gradient against the exact mean. Returns the final bucket assignment of each rank.
void averageBody(Communicator& comm, const std::vector<size_t>& counts, ReducerOptions ro, int iterations,
                 std::vector<std::vector<std::vector<size_t>>>* assignments, std::mutex* mu) {
  const int n = comm.size(), r = comm.rank();
  auto ps = model(counts);
  GradientReducer red(comm, ps, ro);
  std::vector<std::vector<float>> grads(counts.size());
  for (int it = 0; it < iterations; ++it) {
    for (size_t i = 0; i < counts.size(); ++i) {
      grads[i].resize(counts[i]);
      for (size_t j = 0; j < counts[i]; ++j) grads[i][j] = gradValue(r, i, j) * static_cast<float>(it + 1);
    }
    for (size_t i : rankOrder(counts.size(), r + it)) red.markReady(i, grads[i].data());
    EXPECT_TRUE(red.inIteration());
    red.finalize();
    EXPECT_FALSE(red.inIteration());
    // The built-in mean divides each gradient by n, then sums: exact when n is a power of two, otherwise within
    // a few roundings of the exact mean.
    const bool exact = (n & (n - 1)) == 0;
    for (size_t i = 0; i < counts.size(); ++i)
      for (size_t j = 0; j < counts[i]; ++j) {
        const float want = meanValue(n, i, j) * static_cast<float>(it + 1);
        if (exact)
          ASSERT_EQ(grads[i][j], want) << "iteration " << it << " parameter " << i << " element " << j;
        else
          ASSERT_NEAR(grads[i][j], want, std::ldexp(std::max(1.0f, std::abs(want)), -20))
              << "iteration " << it << " parameter " << i << " element " << j;
      }
  }
  EXPECT_EQ(red.stats().iterations, static_cast<uint64_t>(iterations));
  if (assignments) {
    std::lock_guard<std::mutex> lock(*mu);
    (*assignments)[static_cast<size_t>(r)] = red.bucketAssignment();
  }
}

class Reducer : public ::testing::TestWithParam<int> {};

TEST_P(Reducer, AveragesExactlyWhateverTheOrderOfReadiness) {
  const int n = GetParam();
  ReducerOptions ro;
  ro.firstBucketCapBytes = 4 * kKiB;
  ro.bucketCapBytes = 16 * kKiB;
  std::vector<size_t> counts = {1000, 3, 5000, 1, 2048, 700, 4096, 33, 0, 1500};
  ThreadLauncher::run(
      n, [&](Communicator& c) { averageBody(c, counts, ro, 3, nullptr, nullptr); }, opts());
}

TEST_P(Reducer, RebuiltBucketsFollowRankZerosOrderOnEveryRank) {
  const int n = GetParam();
  ReducerOptions ro;
  ro.firstBucketCapBytes = 4 * kKiB;
  ro.bucketCapBytes = 12 * kKiB;
  std::vector<size_t> counts = {1000, 300, 2000, 100, 2048, 700, 1024, 33, 900, 1500, 64, 512};
  std::vector<std::vector<std::vector<size_t>>> got(static_cast<size_t>(n));
  std::mutex mu;
  ThreadLauncher::run(
      n, [&](Communicator& c) { averageBody(c, counts, ro, 2, &got, &mu); }, opts());
  // Rank 0 marked in rankOrder(n, 0) in the first iteration: that order decides, on every rank.
  auto want = GradientReducer::computeBuckets(model(counts), rankOrder(counts.size(), 0), ro.firstBucketCapBytes,
                                              ro.bucketCapBytes);
  for (int r = 0; r < n; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Threads, Reducer, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST(ReducerThreads, FullBucketsLaunchAtOnceAndInBucketOrder) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        ReducerOptions ro;
        ro.firstBucketCapBytes = 4 * kKiB;
        ro.bucketCapBytes = 4 * kKiB;
        ro.rebuildBuckets = false;
        std::vector<size_t> counts(8, 1024);  // one 4 KiB parameter per bucket: bucket k holds parameter 7-k
        GradientReducer red(comm, model(counts), ro);
        ASSERT_EQ(red.bucketAssignment().size(), 8u);
        std::vector<size_t> launched;
        ddp::CommHook mean = ddp::hooks::allReduceMean();
        red.registerCommHook([&](Communicator& c, ddp::GradBucket& b) {
          launched.push_back(b.index());
          return mean(c, b);
        });
        std::vector<std::vector<float>> g(8, std::vector<float>(1024, static_cast<float>(comm.rank())));
        for (size_t i = 7; i >= 4; --i) red.markReady(i, g[i].data());
        EXPECT_EQ(launched, (std::vector<size_t>{0, 1, 2, 3}));  // launched before finalize
        red.markReady(0, g[0].data());                           // bucket 7 is full but waits for buckets 4..6
        EXPECT_EQ(launched.size(), 4u);
        red.markReady(2, g[2].data());
        red.markReady(1, g[1].data());
        EXPECT_EQ(launched.size(), 4u);
        red.markReady(3, g[3].data());
        EXPECT_EQ(launched, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
        red.finalize();
        EXPECT_EQ(red.stats().launchedEarly, 8u);
        for (auto& v : g) EXPECT_EQ(v[0], 0.5f);
      },
      opts());
}

TEST(ReducerThreads, NoSyncLeavesGradientsLocalThenAveragesTheAccumulation) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        const int r = comm.rank();
        std::vector<size_t> counts = {100, 50};
        GradientReducer red(comm, model(counts));
        std::vector<std::vector<float>> g = {std::vector<float>(100, 0.f), std::vector<float>(50, 0.f)};
        for (int micro = 0; micro < 3; ++micro) {  // accumulate 3 micro-batches, the last one synchronised
          for (auto& v : g)
            for (float& x : v) x += static_cast<float>(r + micro);
          if (micro < 2) {
            auto guard = red.noSync();
            EXPECT_FALSE(red.requireSync());
            red.markReady(1, g[1].data());
            red.markReady(0, g[0].data());
            red.finalize();
            EXPECT_FALSE(red.inIteration());
            EXPECT_EQ(g[0][0], static_cast<float>((micro + 1) * r + micro * (micro + 1) / 2));  // untouched
          } else {
            EXPECT_TRUE(red.requireSync());
            red.markReady(1, g[1].data());
            red.markReady(0, g[0].data());
            red.finalize();
          }
        }
        // Rank r accumulated 3r + 3 (3, 6, 9): each divided by 3 exactly, summed: 6.
        for (auto& v : g)
          for (float x : v) ASSERT_EQ(x, 6.0f);
      },
      opts());
}

TEST(ReducerThreads, GradientAsBucketViewCopiesNothingAndSurvivesTheRebuild) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        const int r = comm.rank();
        ReducerOptions ro;
        ro.gradientAsBucketView = true;
        ro.firstBucketCapBytes = 1 * kKiB;
        ro.bucketCapBytes = 2 * kKiB;
        std::vector<size_t> counts = {256, 256, 256, 256, 256};
        GradientReducer red(comm, model(counts), ro);
        EXPECT_EQ(red.layoutVersion(), 0u);
        // Iteration 1: gradients written straight into the bucket views, ready in registration order (the
        // reverse of the initial buckets), so the rebuild changes the layout.
        for (size_t i = 0; i < counts.size(); ++i) {
          auto* v = static_cast<float*>(red.bucketView(i));
          for (size_t j = 0; j < counts[i]; ++j) v[j] = static_cast<float>(r * 10 + i);
          red.markReady(i);
        }
        red.finalize();
        EXPECT_TRUE(red.bucketsRebuilt());
        EXPECT_EQ(red.layoutVersion(), 1u);
        for (size_t i = 0; i < counts.size(); ++i) {  // the averages moved with the views
          auto* v = static_cast<float*>(red.bucketView(i));
          for (size_t j = 0; j < counts[i]; ++j) ASSERT_EQ(v[j], 5.0f + static_cast<float>(i));
        }
        // Iteration 2: accumulate in place (like autograd into a view), then reduce again.
        for (size_t i = 0; i < counts.size(); ++i) {
          auto* v = static_cast<float*>(red.bucketView(i));
          for (size_t j = 0; j < counts[i]; ++j) v[j] += static_cast<float>(r);
          red.markReady(i);
        }
        red.finalize();
        EXPECT_EQ(red.layoutVersion(), 1u);
        for (size_t i = 0; i < counts.size(); ++i)
          ASSERT_EQ(static_cast<float*>(red.bucketView(i))[7], 5.5f + static_cast<float>(i));
      },
      opts());
}

TEST(ReducerThreads, UnusedParametersAreAnErrorNamingThem) {
  ThreadLauncher::run(
      2,
      [](Communicator& comm) {
        std::vector<size_t> counts(6, 64);
        ReducerOptions ro;
        ro.firstBucketCapBytes = 256;
        ro.bucketCapBytes = 512;
        GradientReducer red(comm, model(counts), ro);
        std::vector<std::vector<float>> g(6, std::vector<float>(64, 1.0f));
        for (size_t i : {0, 1, 3, 4}) red.markReady(i, g[i].data());
        try {
          red.finalize();
          ADD_FAILURE() << "finalize did not throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
          std::string m = e.what();
          EXPECT_NE(m.find("p2"), std::string::npos) << m;
          EXPECT_NE(m.find("p5"), std::string::npos) << m;
          EXPECT_EQ(m.find("p1,"), std::string::npos) << m;
          EXPECT_NE(m.find("findUnusedParameters"), std::string::npos) << m;
        }
        EXPECT_FALSE(red.inIteration());
        // The reducer is usable again.
        for (size_t i = 0; i < 6; ++i) red.markReady(i, g[i].data());
        red.finalize();
        EXPECT_EQ(g[5][0], 1.0f);
      },
      opts());
}

TEST(ReducerThreads, FindUnusedReducesZerosAndLeavesGloballyUnusedAlone) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        const int r = comm.rank();
        std::vector<size_t> counts(5, 32);
        ReducerOptions ro;
        ro.findUnusedParameters = true;
        ro.firstBucketCapBytes = 128;
        ro.bucketCapBytes = 256;
        GradientReducer red(comm, model(counts), ro);
        for (int it = 0; it < 2; ++it) {
          std::vector<std::vector<float>> g(5, std::vector<float>(32, static_cast<float>(r + 1)));
          g[4].assign(32, -7.0f);  // never used anywhere: must stay -7
          // Parameter 2 is used on rank 0 only; 1 is marked unused explicitly on rank 1 (with a gradient to fill).
          for (size_t i : {0, 3}) red.markReady(i, g[i].data());
          if (r == 0) red.markReady(2, g[2].data());
          if (r == 1)
            red.markUnused(1, g[1].data());
          else
            red.markReady(1, g[1].data());
          red.finalize();
          EXPECT_TRUE(red.globallyUsed(0));
          EXPECT_TRUE(red.globallyUsed(2));
          EXPECT_FALSE(red.globallyUsed(4));
          EXPECT_EQ(red.locallyUsed(2), r == 0);
          EXPECT_FLOAT_EQ(g[0][0], 2.0f);         // (1 + 2 + 3) / 3
          EXPECT_FLOAT_EQ(g[1][0], 4.0f / 3.0f);  // (1 + 0 + 3) / 3, written to rank 1's buffer too
          if (r == 0) {
            EXPECT_FLOAT_EQ(g[2][0], 1.0f / 3.0f);
          }  // (1 + 0 + 0) / 3
          EXPECT_EQ(g[4][0], -7.0f);
        }
        EXPECT_FALSE(red.bucketsRebuilt());  // the gradient order is not stable with unused parameters
      },
      opts());
}

// A float in [-3, 3) from a hash of k (splitmix64).
float noise(uint64_t k) {
  k += 0x9e3779b97f4a7c15ull;
  k = (k ^ (k >> 30)) * 0xbf58476d1ce4e5b9ull;
  k = (k ^ (k >> 27)) * 0x94d049bb133111ebull;
  k ^= k >> 31;
  return static_cast<float>(static_cast<double>(k >> 11) * 0x1.0p-53 * 6.0 - 3.0);
}

void compressionBody(Communicator& comm, ddp::CommHook hook, float relTol) {
  const int n = comm.size(), r = comm.rank();
  std::vector<size_t> counts = {5000, 1234, 20000};
  ReducerOptions ro;
  ro.firstBucketCapBytes = 8 * kKiB;
  GradientReducer red(comm, model(counts), ro);
  red.registerCommHook(hook);
  for (int it = 0; it < 3; ++it) {
    std::vector<std::vector<float>> g(counts.size());
    std::vector<std::vector<double>> exact(counts.size());
    for (size_t i = 0; i < counts.size(); ++i) {
      g[i].resize(counts[i]);
      exact[i].assign(counts[i], 0.0);
      for (size_t j = 0; j < counts[i]; ++j) {
        for (int q = 0; q < n; ++q) {
          float v = noise(static_cast<uint64_t>(q) * 1000003u + i * 7919u + j * 31u + static_cast<uint64_t>(it));
          exact[i][j] += v / n;
          if (q == r) g[i][j] = v;
        }
      }
    }
    for (size_t i = counts.size(); i-- > 0;) red.markReady(i, g[i].data());
    red.finalize();
    double worst = 0;
    for (size_t i = 0; i < counts.size(); ++i)
      for (size_t j = 0; j < counts[i]; ++j)
        worst = std::max(worst, std::abs(g[i][j] - exact[i][j]) / std::max(1.0, std::abs(exact[i][j])));
    EXPECT_LE(worst, relTol) << "iteration " << it;
    EXPECT_GT(worst, 0.0) << "compression changed nothing: was the hook used?";
  }
}

TEST(ReducerHooks, Fp16CompressionWithinHalfPrecision) {
  // fp16: 11-bit significand; the rounding of each of the n values and of each of the n-1 partial sums (|sum| < 4)
  // costs at most half an ulp of 4, 2^-10: within 2n * 2^-10 of the exact mean.
  ThreadLauncher::run(
      4, [](Communicator& c) { compressionBody(c, ddp::hooks::fp16Compress(), 8 * std::ldexp(1.0, -10)); }, opts());
}

TEST(ReducerHooks, Bf16CompressionWithinBfloat16Precision) {
  ThreadLauncher::run(
      3, [](Communicator& c) { compressionBody(c, ddp::hooks::bf16Compress(), 6 * std::ldexp(1.0, -7)); }, opts());
}

TEST(ReducerHooks, UserHookSeesEveryBucketInOrderOnEveryRank) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        std::vector<size_t> counts(6, 100);
        ReducerOptions ro;
        ro.firstBucketCapBytes = 400;
        ro.bucketCapBytes = 800;
        ro.rebuildBuckets = false;
        GradientReducer red(comm, model(counts), ro);
        std::vector<size_t> seen;
        size_t lastSeen = 0;
        // A hook that sums, then divides by hand in `then` (PyTorch's allreduce hook, split in two).
        red.registerCommHook([&](Communicator& c, ddp::GradBucket& b) -> ddp::PendingReduction {
          seen.push_back(b.index());
          if (b.isLast()) lastSeen = b.index();
          EXPECT_EQ(b.type(), DataType::Float32);
          EXPECT_EQ(b.bytes(), b.count() * 4);
          Work w = c.allReduceAsync(b.data(), b.data(), b.count(), b.type(), ReduceOp::Sum);
          return {w, [&b, &c] {
                    auto* f = static_cast<float*>(b.data());
                    for (size_t k = 0; k < b.count(); ++k) f[k] /= static_cast<float>(c.size());
                  }};
        });
        std::vector<std::vector<float>> g(6, std::vector<float>(100, static_cast<float>(comm.rank())));
        for (size_t i = 0; i < 6; ++i) red.markReady(i, g[i].data());  // registration order: all wait for bucket 0
        red.finalize();
        EXPECT_EQ(seen, (std::vector<size_t>{0, 1, 2, 3}));  // {5} {4, 3} {2, 1} {0}
        EXPECT_EQ(lastSeen, 3u);
        for (auto& v : g) EXPECT_EQ(v[0], 1.0f);
      },
      opts());
}

TEST(ReducerThreads, ParametersBroadcastFromRankZeroAtConstruction) {
  ThreadLauncher::run(
      4,
      [](Communicator& comm) {
        const int r = comm.rank();
        std::vector<float> a(1000, static_cast<float>(r + 1));
        std::vector<double> b(10, static_cast<double>(-r));
        std::vector<float> c(5, 9.0f + static_cast<float>(r));
        std::vector<Parameter> ps = {{"a", a.size(), DataType::Float32, {}, a.data()},
                                     {"b", b.size(), DataType::Float64, {}, b.data()},
                                     {"c", c.size(), DataType::Float32, {}, c.data()}};
        GradientReducer red(comm, ps);
        EXPECT_EQ(a[999], 1.0f);
        EXPECT_EQ(b[3], 0.0);
        EXPECT_EQ(c[4], 9.0f);
      },
      opts());
}

TEST(ReducerThreads, BroadcastCoalescedPacksManyBuffers) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        const int r = comm.rank();
        std::vector<std::vector<int32_t>> ints(20);
        std::vector<std::vector<float>> floats(7);
        std::vector<ddp::HostBuffer> bufs;
        for (size_t k = 0; k < ints.size(); ++k) {
          ints[k].assign(k * 13 + 1, static_cast<int32_t>(r * 100 + k));
          bufs.push_back({ints[k].data(), ints[k].size(), DataType::Int32});
        }
        for (size_t k = 0; k < floats.size(); ++k) {
          floats[k].assign(1000 * k + 3, static_cast<float>(r) + 0.5f);
          bufs.push_back({floats[k].data(), floats[k].size(), DataType::Float32});
        }
        ddp::broadcastCoalesced(comm, bufs, 1, /*chunkBytes=*/4096);
        for (size_t k = 0; k < ints.size(); ++k)
          for (int32_t v : ints[k]) ASSERT_EQ(v, static_cast<int32_t>(100 + k));
        for (auto& f : floats)
          for (float v : f) ASSERT_EQ(v, 1.5f);
      },
      opts());
}

TEST(ReducerThreads, DifferentParameterListsFailOnEveryRank) {
  ThreadLauncher::run(
      3,
      [](Communicator& comm) {
        std::vector<size_t> counts = {10, 20, 30};
        if (comm.rank() == 2) counts[1] = 21;
        try {
          GradientReducer red(comm, model(counts));
          ADD_FAILURE() << "constructor did not throw";
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
          if (comm.rank() == 2) {
            EXPECT_NE(std::string(e.what()).find("p1"), std::string::npos) << e.what();
          }
        }
      },
      opts());
}

TEST(ReducerThreads, MarkingTwiceOrOutOfRangeIsACallerMistake) {
  ThreadLauncher::run(
      1,
      [](Communicator& comm) {
        GradientReducer red(comm, model({4, 4}));
        std::vector<float> g(4, 1.0f);
        EXPECT_THROW(red.markReady(7, g.data()), Error);
        red.markReady(0, g.data());
        try {
          red.markReady(0, g.data());
          ADD_FAILURE();
        } catch (const Error& e) {
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage);
        }
        EXPECT_THROW(red.markUnused(1), Error);          // needs findUnusedParameters
        EXPECT_THROW(red.setRequireSync(false), Error);  // not during an iteration
        red.markReady(1, g.data());
        red.finalize();
      },
      opts());
}

}  // namespace
}  // namespace collie::test
