// collieCommShrink through the C API with every rank a thread: the survivors get a communicator of their own
// (sizes, ranks in the old order, an AllReduce and an AllGather checked element by element), an excluded rank
// that calls it gets collieInvalidUsage with a message, bad arguments are refused without touching anything,
// and the parent keeps working. Shrink after a SIGKILLed rank is in tests/multiproc/test_shrink_proc.cpp.
#include <collie/collie.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace collie::test {
namespace {

#define EXPECT_OK(call) EXPECT_EQ((call), collieSuccess) << #call << ": " << collieGetLastError(nullptr)

TEST(CApiShrink, SurvivorsGetACommunicatorAndTheParentKeepsWorking) {
  constexpr int n = 4;
  const int exclude[] = {2, 0};  // any order
  std::vector<collieComm_t> comms(n, nullptr);
  ASSERT_EQ(collieCommInitAll(comms.data(), n, nullptr), collieSuccess) << collieGetLastError(nullptr);
  std::atomic<int> shrunk{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ::testing::ScopedTrace trace(__FILE__, __LINE__, "rank " + std::to_string(r));
      collieComm_t comm = comms[static_cast<size_t>(r)];
      collieComm_t small = reinterpret_cast<collieComm_t>(&shrunk);  // must be set to NULL on failure
      if (r == 0 || r == 2) {
        EXPECT_EQ(collieCommShrink(comm, exclude, 2, &small), collieInvalidUsage);
        EXPECT_EQ(small, nullptr);
        EXPECT_NE(std::string(collieGetLastError(comm)).find("exclude list"), std::string::npos)
            << collieGetLastError(comm);
        while (shrunk.load() < 2) std::this_thread::yield();
      } else {
        EXPECT_OK(collieCommShrink(comm, exclude, 2, &small));
        ASSERT_NE(small, nullptr);
        int size = 0, rank = -1;
        EXPECT_OK(collieCommCount(small, &size));
        EXPECT_OK(collieCommUserRank(small, &rank));
        EXPECT_EQ(size, 2);
        EXPECT_EQ(rank, r == 1 ? 0 : 1);
        std::vector<double> v(1001);
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(i) * (r + 1);
        EXPECT_OK(collieAllReduce(v.data(), v.data(), v.size(), collieFloat64, collieSum, small, nullptr));
        for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<double>(i) * (2 + 4)) << "element " << i;
        std::vector<int32_t> all(2, -1);
        int32_t mine = 100 + r;
        EXPECT_OK(collieAllGather(&mine, all.data(), 1, collieInt32, small, nullptr));
        EXPECT_EQ(all[0], 101);
        EXPECT_EQ(all[1], 103);
        EXPECT_OK(collieCommDestroy(small));
        shrunk.fetch_add(1);
      }
      int64_t x = r;
      EXPECT_OK(collieAllReduce(&x, &x, 1, collieInt64, collieSum, comm, nullptr));
      EXPECT_EQ(x, 0 + 1 + 2 + 3);
    });
  }
  for (auto& t : threads) t.join();
  for (collieComm_t c : comms) EXPECT_OK(collieCommDestroy(c));
}

TEST(CApiShrink, ShrinkOfASplitOutlivesItsParents) {
  // 6 ranks split in two halves (old ranks 0,2,4 and 1,3,5); each half drops its rank 1 (old ranks 2 and 3, which
  // take no part), and both parents are destroyed before the shrunk communicators are used and shrunk again: the
  // listeners they connect through belong to them.
  constexpr int n = 6;
  std::vector<collieComm_t> comms(n, nullptr), halves(n, nullptr), shrunk(n, nullptr);
  ASSERT_EQ(collieCommInitAll(comms.data(), n, nullptr), collieSuccess) << collieGetLastError(nullptr);
  auto onRanks = [&](const std::vector<int>& ranks, const std::function<void(size_t)>& fn) {
    std::vector<std::thread> threads;
    for (int r : ranks) threads.emplace_back([&fn, r] { fn(static_cast<size_t>(r)); });
    for (auto& t : threads) t.join();
  };
  const std::vector<int> all = {0, 1, 2, 3, 4, 5}, survivors = {0, 1, 4, 5};
  onRanks(all,
          [&](size_t r) { EXPECT_OK(collieCommSplit(comms[r], static_cast<int>(r % 2), 0, &halves[r], nullptr)); });
  const int dropOne[] = {1};
  onRanks(survivors, [&](size_t r) { EXPECT_OK(collieCommShrink(halves[r], dropOne, 1, &shrunk[r])); });
  for (int r : all) EXPECT_OK(collieCommDestroy(halves[static_cast<size_t>(r)]));
  for (int r : all) EXPECT_OK(collieCommDestroy(comms[static_cast<size_t>(r)]));
  onRanks(survivors, [&](size_t r) {
    ASSERT_NE(shrunk[r], nullptr);
    int size = 0, rank = -1;
    EXPECT_OK(collieCommCount(shrunk[r], &size));
    EXPECT_OK(collieCommUserRank(shrunk[r], &rank));
    EXPECT_EQ(size, 2);
    EXPECT_EQ(rank, r < 2 ? 0 : 1);
    collieComm_t again = nullptr;  // excluding nobody: connects afresh through the shrunk communicator's listeners
    EXPECT_OK(collieCommShrink(shrunk[r], nullptr, 0, &again));
    ASSERT_NE(again, nullptr);
    std::vector<int32_t> v(4099, static_cast<int32_t>(r));
    EXPECT_OK(collieAllReduce(v.data(), v.data(), v.size(), collieInt32, collieSum, again, nullptr));
    const int32_t want = r % 2 == 0 ? 0 + 4 : 1 + 5;
    for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], want) << "element " << i;
    EXPECT_OK(collieCommDestroy(again));
    EXPECT_OK(collieCommDestroy(shrunk[r]));
  });
}

TEST(CApiShrink, BadArgumentsAreRefused) {
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess) << collieGetLastError(nullptr);
  collieComm_t out = nullptr;
  const int one[] = {1};
  EXPECT_EQ(collieCommShrink(nullptr, nullptr, 0, &out), collieInvalidArgument);
  EXPECT_EQ(collieCommShrink(comm, nullptr, 0, nullptr), collieInvalidArgument);
  EXPECT_EQ(collieCommShrink(comm, nullptr, -1, &out), collieInvalidArgument);
  EXPECT_EQ(collieCommShrink(comm, nullptr, 1, &out), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError(nullptr)).find("excludeRanks is NULL"), std::string::npos);
  EXPECT_EQ(collieCommShrink(comm, one, 1, &out), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError(comm)).find("excludeRanks[0]=1"), std::string::npos)
      << collieGetLastError(comm);
  EXPECT_EQ(out, nullptr);
  // Excluding nobody: a copy of the communicator on fresh connections.
  EXPECT_OK(collieCommShrink(comm, nullptr, 0, &out));
  ASSERT_NE(out, nullptr);
  float f = 2.5f;
  EXPECT_OK(collieAllReduce(&f, &f, 1, collieFloat32, collieSum, out, nullptr));
  EXPECT_EQ(f, 2.5f);
  EXPECT_OK(collieCommDestroy(out));
  EXPECT_OK(collieCommDestroy(comm));
}

// collieCommRevoke: a call blocked on another thread (its peer never calls) returns an error at once, later calls
// fail, the state says so, and the communicator is kept: the ranks shrink it (excluding nobody) and go on.
TEST(CApiShrink, ARevokedCommunicatorFailsItsCallsAndCanBeShrunk) {
  constexpr int n = 2;
  std::vector<collieComm_t> comms(n, nullptr);
  ASSERT_EQ(collieCommInitAll(comms.data(), n, nullptr), collieSuccess) << collieGetLastError(nullptr);
  EXPECT_EQ(collieCommRevoke(nullptr), collieInvalidArgument);
  std::atomic<bool> blocked{false};
  collieResult_t blockedResult = collieSuccess;
  double blockedSeconds = 0;
  std::thread waiter([&] {
    int32_t v = 1;
    blocked = true;
    const auto t0 = std::chrono::steady_clock::now();
    blockedResult = collieAllReduce(&v, &v, 1, collieInt32, collieSum, comms[0], nullptr);  // rank 1 never calls
    blockedSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
  while (!blocked) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_OK(collieCommRevoke(comms[0]));
  waiter.join();
  EXPECT_EQ(blockedResult, collieInvalidUsage);
  EXPECT_GT(blockedSeconds, 0.1) << "the AllReduce did not wait for the revoke";
  EXPECT_LT(blockedSeconds, 5.0);
  int32_t v = 1;
  EXPECT_EQ(collieAllReduce(&v, &v, 1, collieInt32, collieSum, comms[0], nullptr), collieInvalidUsage);
  EXPECT_NE(std::string(collieGetLastError(comms[0])).find("aborted"), std::string::npos)
      << collieGetLastError(comms[0]);
  collieResult_t state = collieSuccess;
  EXPECT_OK(collieCommGetAsyncError(comms[0], &state));
  EXPECT_EQ(state, collieInvalidUsage);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collieComm_t again = nullptr;
      ASSERT_EQ(collieCommShrink(comms[static_cast<size_t>(r)], nullptr, 0, &again), collieSuccess)
          << "rank " << r << ": " << collieGetLastError(comms[static_cast<size_t>(r)]);
      int32_t x = r + 1;
      EXPECT_OK(collieAllReduce(&x, &x, 1, collieInt32, collieSum, again, nullptr));
      EXPECT_EQ(x, 1 + 2);
      EXPECT_OK(collieCommDestroy(again));
    });
  }
  for (auto& t : threads) t.join();
  for (collieComm_t c : comms) EXPECT_OK(collieCommDestroy(c));
}

// collieCommShrinkConfig: a bad config is refused before anything is made (no communicator, a message naming the
// field); a good one's commName names the new communicator (its errors say so) and its timeoutMs is taken.
TEST(CApiShrink, AConfigNamesTheNewCommunicatorAndABadOneIsRefused) {
  constexpr int n = 2;
  std::vector<collieComm_t> comms(n, nullptr);
  ASSERT_EQ(collieCommInitAll(comms.data(), n, nullptr), collieSuccess) << collieGetLastError(nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ::testing::ScopedTrace trace(__FILE__, __LINE__, "rank " + std::to_string(r));
      collieComm_t comm = comms[static_cast<size_t>(r)];
      collieComm_t out = nullptr;
      collieConfig_t shares = COLLIE_CONFIG_INITIALIZER;
      shares.splitShare = 1;
      EXPECT_EQ(collieCommShrinkConfig(comm, nullptr, 0, &out, &shares), collieInvalidArgument);
      EXPECT_NE(std::string(collieGetLastError(nullptr)).find("config->splitShare=1"), std::string::npos)
          << collieGetLastError(nullptr);
      collieConfig_t badTimeout = COLLIE_CONFIG_INITIALIZER;
      badTimeout.timeoutMs = 0;
      EXPECT_EQ(collieCommShrinkConfig(comm, nullptr, 0, &out, &badTimeout), collieInvalidArgument);
      EXPECT_NE(std::string(collieGetLastError(nullptr)).find("config->timeoutMs=0"), std::string::npos)
          << collieGetLastError(nullptr);
      EXPECT_EQ(out, nullptr);
      collieConfig_t config = COLLIE_CONFIG_INITIALIZER;
      config.commName = "survivors";
      config.timeoutMs = 7000;
      ASSERT_EQ(collieCommShrinkConfig(comm, nullptr, 0, &out, &config), collieSuccess) << collieGetLastError(nullptr);
      ASSERT_NE(out, nullptr);
      collieComm_t none = nullptr;  // a refusal by the communicator itself, which names it
      EXPECT_EQ(collieCommSplit(out, -5, 0, &none, nullptr), collieInvalidArgument);
      EXPECT_NE(std::string(collieGetLastError(out)).find("survivors rank " + std::to_string(r) + ": split color=-5"),
                std::string::npos)
          << collieGetLastError(out);
      int32_t v[4] = {r, r, r, r};
      EXPECT_OK(collieAllReduce(v, v, 4, collieInt32, collieSum, out, nullptr));
      for (int32_t x : v) EXPECT_EQ(x, 0 + 1);
      EXPECT_OK(collieCommDestroy(out));
    });
  }
  for (auto& t : threads) t.join();
  for (collieComm_t c : comms) EXPECT_OK(collieCommDestroy(c));
}

}  // namespace
}  // namespace collie::test
