// The C API's one config parser (src/capi/capi.cpp, parseConfig), through every entry point that takes a config:
// a bad magic is refused by collieCommSplit as by collieCommInitRankConfig, naming the magic; a config whose size
// ends before a field is never read past its size (a short struct followed by garbage works, with defaults).
#include <collie/collie.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

bool mentions(const char* text, const char* word) { return text && std::string(text).find(word) != std::string::npos; }

// nranks communicators made with collieCommInitRankConfig(config), one thread per rank.
std::vector<collieComm_t> initAll(int nranks, const collieConfig_t* config) {
  collieUniqueId id;
  EXPECT_EQ(collieGetUniqueId(&id), collieSuccess);
  std::vector<collieComm_t> comms(static_cast<size_t>(nranks), nullptr);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      collieConfig_t copy;  // each rank its own, as a C caller would have
      memcpy(&copy, config, sizeof copy);
      EXPECT_EQ(collieCommInitRankConfig(&comms[static_cast<size_t>(r)], nranks, id, r, &copy), collieSuccess)
          << collieGetLastError(nullptr);
    });
  }
  for (auto& t : threads) t.join();
  return comms;
}

TEST(CApiConfig, SplitWithABadMagicIsRefusedNamingTheMagic) {
  collieConfig_t good = COLLIE_CONFIG_INITIALIZER;
  good.timeoutMs = 30000;
  auto comms = initAll(2, &good);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      collieConfig_t bad = COLLIE_CONFIG_INITIALIZER;
      bad.magic = 0xdeadbeef;
      bad.commName = "must-not-be-used";
      collieComm_t sub = reinterpret_cast<collieComm_t>(0x1);
      EXPECT_EQ(collieCommSplit(comms[static_cast<size_t>(r)], 0, r, &sub, &bad), collieInvalidArgument);
      EXPECT_EQ(sub, nullptr);
      EXPECT_PRED2(mentions, collieGetLastError(nullptr), "magic");
      EXPECT_PRED2(mentions, collieGetLastError(nullptr), "0xdeadbeef");
    });
  }
  for (auto& t : threads) t.join();
  // The communicator is still usable: the refused split never started.
  threads.clear();
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      float x = 1.0f + static_cast<float>(r);
      EXPECT_EQ(collieAllReduce(&x, &x, 1, collieFloat32, collieSum, comms[static_cast<size_t>(r)], nullptr),
                collieSuccess);
      EXPECT_EQ(x, 3.0f);
    });
  }
  for (auto& t : threads) t.join();
  for (collieComm_t c : comms) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
}

TEST(CApiConfig, InitWithABadMagicOrVersionOrSizeIsRefused) {
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess);
  collieComm_t comm = nullptr;
  collieConfig_t bad = COLLIE_CONFIG_INITIALIZER;
  bad.magic = 0x1234;
  EXPECT_EQ(collieCommInitRankConfig(&comm, 1, id, 0, &bad), collieInvalidArgument);
  EXPECT_PRED2(mentions, collieGetLastError(nullptr), "magic");
  EXPECT_PRED2(mentions, collieGetLastError(nullptr), "COLLIE_CONFIG_INITIALIZER");
  bad = COLLIE_CONFIG_INITIALIZER;
  bad.version = 0;
  EXPECT_EQ(collieCommInitRankConfig(&comm, 1, id, 0, &bad), collieInvalidArgument);
  EXPECT_PRED2(mentions, collieGetLastError(nullptr), "version");
  bad = COLLIE_CONFIG_INITIALIZER;
  bad.size = 4;  // not even the header
  EXPECT_EQ(collieCommInitRankConfig(&comm, 1, id, 0, &bad), collieInvalidArgument);
  EXPECT_PRED2(mentions, collieGetLastError(nullptr), "size");
  bad = COLLIE_CONFIG_INITIALIZER;
  bad.timeoutMs = -5;
  EXPECT_EQ(collieCommInitRankConfig(&comm, 1, id, 0, &bad), collieInvalidArgument);
  EXPECT_PRED2(mentions, collieGetLastError(nullptr), "timeoutMs");
  EXPECT_EQ(comm, nullptr);
}

// A config from a header whose struct ended before commName: the bytes after it are garbage (here a pointer
// that would crash if read) and must not be read, by init or by split.
TEST(CApiConfig, FieldsPastTheSizeAreNotRead) {
  collieConfig_t shortConfig = COLLIE_CONFIG_INITIALIZER;
  shortConfig.size = offsetof(collieConfig_t, commName);
  shortConfig.timeoutMs = 30000;
  shortConfig.commName = reinterpret_cast<const char*>(0x8);  // garbage: reading it would crash
  auto comms = initAll(2, &shortConfig);
  for (collieComm_t c : comms) ASSERT_NE(c, nullptr);
  std::vector<std::thread> threads;
  std::vector<collieComm_t> subs(2, nullptr);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      collieConfig_t cfg;
      memcpy(&cfg, &shortConfig, sizeof cfg);
      EXPECT_EQ(collieCommSplit(comms[static_cast<size_t>(r)], 0, -r, &subs[static_cast<size_t>(r)], &cfg),
                collieSuccess)
          << collieGetLastError(nullptr);
      int rank = -1;
      EXPECT_EQ(collieCommUserRank(subs[static_cast<size_t>(r)], &rank), collieSuccess);
      EXPECT_EQ(rank, 1 - r);  // ordered by key
    });
  }
  for (auto& t : threads) t.join();
  for (collieComm_t c : subs) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
  for (collieComm_t c : comms) EXPECT_EQ(collieCommDestroy(c), collieSuccess);
  // A size that covers only the header: every field takes its default (a blocking init).
  collieConfig_t headerOnly = COLLIE_CONFIG_INITIALIZER;
  headerOnly.size = offsetof(collieConfig_t, blocking);
  headerOnly.blocking = 0;  // past the size: must be ignored, so the init blocks and succeeds at once
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess);
  collieComm_t one = nullptr;
  EXPECT_EQ(collieCommInitRankConfig(&one, 1, id, 0, &headerOnly), collieSuccess) << collieGetLastError(nullptr);
  EXPECT_EQ(collieCommDestroy(one), collieSuccess);
}

}  // namespace
