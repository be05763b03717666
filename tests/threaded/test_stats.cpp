// Communicator::stats() and collieCommGetStats(): after a known sequence of calls, every collective's count and
// bytes, the algorithm mix (the rows' algorithms are those the executor ran, lastCall() among them), and untimed
// rows (no COLLIE_STATS, COLLIE_TRACE or COLLIE_FLIGHT_RECORDER in this process) saying so with seconds = -1.
#include <collie/collie.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/launcher.hpp"

namespace collie::test {
namespace {

TEST(Stats, CountsEveryCollectiveItsBytesAndItsAlgorithms) {
  constexpr int kRanks = 3;
  ThreadLauncher::run(kRanks, [](Communicator& comm) {
    const int r = comm.rank(), n = comm.size();
    EXPECT_TRUE(comm.stats().rows.empty()) << "init's own calls are not the user's";
    std::vector<float> f(300, 1.0f), g(300, 0.0f);
    std::vector<int32_t> a(64, r), b(64, 0);
    for (int i = 0; i < 4; ++i) comm.allReduce(f.data(), f.data(), 100, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(f[0], 81.0f);
    const std::string lastAlgo = comm.lastCall().algorithm;
    for (int i = 0; i < 2; ++i) comm.broadcast(a.data(), a.data(), 10, DataType::Int32, 1);
    comm.allGather(a.data(), b.data(), 5, DataType::Int32);
    comm.reduceScatter(f.data(), g.data(), 3, DataType::Float32, ReduceOp::Sum);
    comm.allToAll(a.data(), b.data(), 2, DataType::Int32);
    groupStart();
    comm.send(a.data(), 7, DataType::Int32, (r + 1) % n);
    comm.recv(b.data(), 7, DataType::Int32, (r + n - 1) % n);
    groupEnd();
    comm.barrier();  // an AllReduce of one byte per rank

    const CommStats s = comm.stats();
    EXPECT_FALSE(s.timed);
    std::map<std::string, std::pair<uint64_t, uint64_t>> by;  // collective -> calls, bytes
    bool sawLastAlgo = false;
    for (const CollectiveStats& row : s.rows) {
      EXPECT_EQ(row.seconds, -1.0) << row.collective;
      EXPECT_GT(row.calls, 0u);
      by[row.collective].first += row.calls;
      by[row.collective].second += row.bytes;
      sawLastAlgo = sawLastAlgo || (row.collective == "AllReduce" && row.algorithm == lastAlgo);
    }
    EXPECT_TRUE(sawLastAlgo) << "no AllReduce row for " << lastAlgo << ":\n" << s.summary;
    using P = std::pair<uint64_t, uint64_t>;
    EXPECT_EQ(by["AllReduce"], P(5, 4 * 400 + kRanks)) << s.summary;
    EXPECT_EQ(by["Broadcast"], P(2, 2 * 40)) << s.summary;
    EXPECT_EQ(by["AllGather"], P(1, 20)) << s.summary;
    EXPECT_EQ(by["ReduceScatter"], P(1, 12)) << s.summary;
    EXPECT_EQ(by["AllToAll"], P(1, 8)) << s.summary;
    EXPECT_EQ(by["Send"], P(1, 28)) << s.summary;
    EXPECT_EQ(by["Recv"], P(1, 28)) << s.summary;
    EXPECT_EQ(by.size(), 7u) << s.summary;
    EXPECT_NE(s.summary.find("total"), std::string::npos) << s.summary;
    EXPECT_NE(s.summary.find("12 call(s)"), std::string::npos) << s.summary;
  });
}

TEST(Stats, TheCFunctionReportsTheSameRowsAndRefusesBadArguments) {
  collieComm_t comm = nullptr;
  ASSERT_EQ(collieCommInitAll(&comm, 1, nullptr), collieSuccess) << collieGetLastError(nullptr);
  std::vector<double> v(16, 2.0);
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(collieAllReduce(v.data(), v.data(), v.size(), collieFloat64, collieSum, comm, nullptr), collieSuccess);
  int count = -1;
  EXPECT_EQ(collieCommGetStats(comm, nullptr, sizeof(collieCollStats_t), 0, &count), collieSuccess);
  ASSERT_EQ(count, 1);
  collieCollStats_t rows[2];
  std::memset(rows, 0x7f, sizeof(rows));
  EXPECT_EQ(collieCommGetStats(comm, rows, sizeof(rows[0]), 2, &count), collieSuccess);
  ASSERT_EQ(count, 1);
  EXPECT_STREQ(rows[0].collective, "AllReduce");
  EXPECT_STRNE(rows[0].algorithm, "");
  EXPECT_EQ(rows[0].calls, 3u);
  EXPECT_EQ(rows[0].bytes, 3u * 16 * 8);
  EXPECT_EQ(rows[0].seconds, -1.0);
  EXPECT_EQ(rows[1].calls, 0x7f7f7f7f7f7f7f7full) << "a row past count was written";

  EXPECT_EQ(collieCommGetStats(comm, rows, sizeof(rows[0]), 2, nullptr), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError(nullptr)).find("count"), std::string::npos);
  EXPECT_EQ(collieCommGetStats(comm, rows, sizeof(rows[0]), -1, &count), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError(nullptr)).find("capacity=-1"), std::string::npos);
  EXPECT_EQ(collieCommGetStats(comm, nullptr, sizeof(rows[0]), 1, &count), collieInvalidArgument);
  EXPECT_EQ(collieCommGetStats(nullptr, rows, sizeof(rows[0]), 2, &count), collieInvalidArgument);
  // A caller built against a smaller row (or passing a count as the size) is refused, no row touched.
  std::memset(rows, 0x7f, sizeof(rows));
  EXPECT_EQ(collieCommGetStats(comm, rows, sizeof(rows[0]) - 8, 2, &count), collieInvalidArgument);
  EXPECT_NE(std::string(collieGetLastError(nullptr)).find("rowSize="), std::string::npos)
      << collieGetLastError(nullptr);
  EXPECT_EQ(rows[0].calls, 0x7f7f7f7f7f7f7f7full);
  // A later header's bigger row: ours at the front of each, the rest zeroed, rows that size apart.
  struct Bigger {
    collieCollStats_t row;
    unsigned long long later;
  } big[2];
  std::memset(big, 0x7f, sizeof(big));
  EXPECT_EQ(collieCommGetStats(comm, &big[0].row, sizeof(Bigger), 2, &count), collieSuccess);
  ASSERT_EQ(count, 1);
  EXPECT_STREQ(big[0].row.collective, "AllReduce");
  EXPECT_EQ(big[0].row.calls, 3u);
  EXPECT_EQ(big[0].later, 0u);
  EXPECT_EQ(big[1].row.calls, 0x7f7f7f7f7f7f7f7full) << "a row past count was written";
  EXPECT_EQ(collieCommDestroy(comm), collieSuccess);
}

}  // namespace
}  // namespace collie::test
