// The C API (include/collie/collie.h) with every rank a thread: version and ids, init (InitAll, InitRank with a
// config), every collective (blocking and async), groups, split, barrier, queries. Results are checked element
// by element with tests/common/data.hpp. Bad arguments through the C API are in test_failures.cpp.
#include <collie/collie.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "common/data.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

collieDataType_t cType(DataType t) { return static_cast<collieDataType_t>(t); }
collieRedOp_t cOp(ReduceOp o) { return static_cast<collieRedOp_t>(o); }

#define EXPECT_OK(call) EXPECT_EQ((call), collieSuccess) << #call << ": " << collieGetLastError(nullptr)

TEST(CApi, VersionAndUniqueIdStrings) {
  int v = 0;
  EXPECT_OK(collieGetVersion(&v));
  EXPECT_EQ(v, COLLIE_VERSION);
  EXPECT_EQ(COLLIE_VERSION, COLLIE_MAJOR * 10000 + COLLIE_MINOR * 100 + COLLIE_PATCH);
  collieUniqueId id, back;
  EXPECT_OK(collieGetUniqueId(&id));
  char text[2 * COLLIE_UNIQUE_ID_BYTES + 1];
  EXPECT_OK(collieUniqueIdToString(&id, text, sizeof text));
  EXPECT_EQ(strlen(text), 2u * COLLIE_UNIQUE_ID_BYTES);
  EXPECT_OK(collieUniqueIdFromString(text, &back));
  EXPECT_EQ(memcmp(&id, &back, sizeof id), 0);
  EXPECT_EQ(collieUniqueIdToString(&id, text, sizeof text - 1), collieInvalidArgument);
  EXPECT_EQ(collieUniqueIdFromString("abc", &back), collieInvalidArgument);
  std::string bad(text);
  bad[7] = 'g';
  EXPECT_EQ(collieUniqueIdFromString(bad.c_str(), &back), collieInvalidArgument);
}

TEST(CApi, InitRankWithConfigFromThreads) {
  constexpr int n = 3;
  collieUniqueId id;
  ASSERT_EQ(collieGetUniqueId(&id), collieSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      collieConfig_t config = COLLIE_CONFIG_INITIALIZER;
      EXPECT_EQ(config.size, sizeof(collieConfig_t));
      EXPECT_EQ(config.magic, COLLIE_CONFIG_MAGIC);
      config.timeoutMs = 20000;
      config.commName = "capi-config";
      collieComm_t comm = nullptr;
      ASSERT_EQ(collieCommInitRankConfig(&comm, n, id, r, &config), collieSuccess) << collieGetLastError(nullptr);
      int rank = -1, count = -1;
      EXPECT_OK(collieCommUserRank(comm, &rank));
      EXPECT_OK(collieCommCount(comm, &count));
      EXPECT_EQ(rank, r);
      EXPECT_EQ(count, n);
      int64_t x = r + 1, sum = 0;
      EXPECT_OK(collieAllReduce(&x, &sum, 1, collieInt64, collieSum, comm, nullptr));
      EXPECT_EQ(sum, n * (n + 1) / 2);
      collieResult_t async = collieInternalError;
      EXPECT_OK(collieCommGetAsyncError(comm, &async));
      EXPECT_EQ(async, collieSuccess);
      EXPECT_OK(collieCommDestroy(comm));
    });
  }
  for (auto& t : threads) t.join();
}

class CApiCollectives : public ::testing::TestWithParam<int> {};

TEST_P(CApiCollectives, EveryCollectiveChecked) {
  const int n = GetParam();
  onCApiThreads(n, [n](int rank, collieComm_t comm) {
    const size_t nr = static_cast<size_t>(n), me = static_cast<size_t>(rank);
    for (DataType t : {DataType::Int8, DataType::Float16, DataType::Float32, DataType::Uint64}) {
      for (size_t c : {size_t{0}, size_t{7}, size_t{100003}}) {
        SCOPED_TRACE(typeName(t) + " count=" + std::to_string(c));
        const collieDataType_t ct = cType(t);
        for (ReduceOp op : kAllOps) {
          Buffer in(t, c), out(t, c);
          in.fillInput(0, c, op, rank, 0);
          EXPECT_OK(collieAllReduce(in.data(), out.data(), c, ct, cOp(op), comm, nullptr));
          EXPECT_TRUE(matchesReduced(out.data(), c, t, op, n, 0)) << "allReduce " << opName(op);
          Buffer red(t, c);
          EXPECT_OK(collieReduce(in.data(), red.data(), c, ct, cOp(op), n - 1, comm, nullptr));
          if (rank == n - 1) {
            EXPECT_TRUE(matchesReduced(red.data(), c, t, op, n, 0)) << "reduce " << opName(op);
          }
          if (rank != n - 1) {
            EXPECT_TRUE(isSentinel(red.data(), c, t)) << "reduce, non-root";
          }
          Buffer rsIn(t, nr * c), rs(t, c);
          rsIn.fillInput(0, nr * c, op, rank, 0);
          EXPECT_OK(collieReduceScatter(rsIn.data(), rs.data(), c, ct, cOp(op), comm, nullptr));
          EXPECT_TRUE(matchesReduced(rs.data(), c, t, op, n, me * c)) << "reduceScatter " << opName(op);
        }
        Buffer bc(t, c);
        if (rank == 0) bc.fillInput(0, c, kNoReduction, 0, 0);
        EXPECT_OK(collieBroadcast(bc.data(), bc.data(), c, ct, 0, comm, nullptr));
        EXPECT_TRUE(matchesInput(bc.data(), c, t, kNoReduction, 0, 0)) << "broadcast";
        Buffer ag(t, nr * c), aaIn(t, nr * c), aa(t, nr * c);
        ag.fillInput(me * c, c, kNoReduction, rank, 0);
        EXPECT_OK(collieAllGather(ag.at(me * c), ag.data(), c, ct, comm, nullptr));  // in place
        aaIn.fillInput(0, nr * c, kNoReduction, rank, 0);
        EXPECT_OK(collieAllToAll(aaIn.data(), aa.data(), c, ct, comm, nullptr));
        for (int p = 0; p < n; ++p) {
          const size_t pb = static_cast<size_t>(p) * c;
          EXPECT_TRUE(matchesInput(ag.at(pb), c, t, kNoReduction, p, 0)) << "allGather block " << p;
          EXPECT_TRUE(matchesInput(aa.at(pb), c, t, kNoReduction, p, me * c)) << "allToAll block " << p;
        }
        // Ring exchange in a group.
        const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
        Buffer sendBuf(t, c), recvBuf(t, c);
        sendBuf.fillInput(0, c, kNoReduction, rank, 0);
        EXPECT_OK(collieGroupStart());
        EXPECT_OK(collieSend(sendBuf.data(), c, ct, next, comm, nullptr));
        EXPECT_OK(collieRecv(recvBuf.data(), c, ct, prev, comm, nullptr));
        EXPECT_OK(collieGroupEnd());
        EXPECT_TRUE(matchesInput(recvBuf.data(), c, t, kNoReduction, prev, 0)) << "send/recv";
      }
    }
    EXPECT_OK(collieBarrier(comm));
  });
}

TEST_P(CApiCollectives, AsyncRequests) {
  const int n = GetParam();
  onCApiThreads(n, [n](int rank, collieComm_t comm) {
    const size_t c = 50001, nr = static_cast<size_t>(n), me = static_cast<size_t>(rank);
    const DataType t = DataType::Float32;
    Buffer a(t, c), b(t, c), bc(t, c), red(t, c), agIn(t, c), ag(t, nr * c), rsIn(t, nr * c), rs(t, c), aaIn(t, nr * c),
        aa(t, nr * c);
    a.fillInput(0, c, ReduceOp::Sum, rank, 0);
    b.fillInput(0, c, ReduceOp::Min, rank, 0);
    if (rank == 0) bc.fillInput(0, c, kNoReduction, 0, 0);
    red.fillInput(0, c, ReduceOp::Prod, rank, 0);
    agIn.fillInput(0, c, kNoReduction, rank, 0);
    rsIn.fillInput(0, nr * c, ReduceOp::Avg, rank, 0);
    aaIn.fillInput(0, nr * c, kNoReduction, rank, 0);
    std::vector<collieRequest_t> reqs(7, nullptr);
    EXPECT_OK(collieAllReduceAsync(a.data(), a.data(), c, collieFloat32, collieSum, comm, &reqs[0]));
    EXPECT_OK(collieAllReduceAsync(b.data(), b.data(), c, collieFloat32, collieMin, comm, &reqs[1]));
    EXPECT_OK(collieBroadcastAsync(bc.data(), bc.data(), c, collieFloat32, 0, comm, &reqs[2]));
    EXPECT_OK(collieReduceAsync(red.data(), red.data(), c, collieFloat32, collieProd, 0, comm, &reqs[3]));
    EXPECT_OK(collieAllGatherAsync(agIn.data(), ag.data(), c, collieFloat32, comm, &reqs[4]));
    EXPECT_OK(collieReduceScatterAsync(rsIn.data(), rs.data(), c, collieFloat32, collieAvg, comm, &reqs[5]));
    EXPECT_OK(collieAllToAllAsync(aaIn.data(), aa.data(), c, collieFloat32, comm, &reqs[6]));
    for (collieRequest_t r : reqs) ASSERT_NE(r, nullptr);
    // The last one polled with collieTest, the first waited for, the rest freed without a wait.
    int done = 0;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!done && std::chrono::steady_clock::now() < deadline) {
      EXPECT_OK(collieTest(reqs[6], &done));
      if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(done, 1);
    EXPECT_OK(collieWait(reqs[0]));
    EXPECT_OK(collieWait(reqs[0]));  // again: still its result
    for (collieRequest_t r : reqs) EXPECT_OK(collieRequestFree(r));
    EXPECT_TRUE(matchesReduced(a.data(), c, t, ReduceOp::Sum, n, 0)) << "allReduceAsync sum";
    EXPECT_TRUE(matchesReduced(b.data(), c, t, ReduceOp::Min, n, 0)) << "allReduceAsync min";
    EXPECT_TRUE(matchesInput(bc.data(), c, t, kNoReduction, 0, 0)) << "broadcastAsync";
    if (rank == 0) {
      EXPECT_TRUE(matchesReduced(red.data(), c, t, ReduceOp::Prod, n, 0)) << "reduceAsync";
    }
    EXPECT_TRUE(matchesReduced(rs.data(), c, t, ReduceOp::Avg, n, me * c)) << "reduceScatterAsync";
    for (int p = 0; p < n; ++p) {
      const size_t pb = static_cast<size_t>(p) * c;
      EXPECT_TRUE(matchesInput(ag.at(pb), c, t, kNoReduction, p, 0)) << "allGatherAsync block " << p;
      EXPECT_TRUE(matchesInput(aa.at(pb), c, t, kNoReduction, p, me * c)) << "allToAllAsync block " << p;
    }
  });
}

TEST_P(CApiCollectives, SplitByParity) {
  const int n = GetParam();
  onCApiThreads(n, [n](int rank, collieComm_t comm) {
    collieComm_t sub = nullptr;
    collieConfig_t config = COLLIE_CONFIG_INITIALIZER;
    config.commName = "parity";
    EXPECT_OK(collieCommSplit(comm, rank % 2, n - rank, &sub, &config));
    ASSERT_NE(sub, nullptr);
    int subRank = -1, subSize = -1;
    EXPECT_OK(collieCommUserRank(sub, &subRank));
    EXPECT_OK(collieCommCount(sub, &subSize));
    int members = 0, higher = 0;
    for (int r = 0; r < n; ++r) {
      if (r % 2 != rank % 2) continue;
      ++members;
      if (r > rank) ++higher;
    }
    EXPECT_EQ(subSize, members);
    EXPECT_EQ(subRank, higher) << "keys n - rank reverse the order";
    int32_t mine = rank, maxRank = -1;
    EXPECT_OK(collieAllReduce(&mine, &maxRank, 1, collieInt32, collieMax, sub, nullptr));
    EXPECT_EQ(maxRank, rank % 2 == 0 ? (n - 1) / 2 * 2 : (n % 2 == 0 ? n - 1 : n - 2));
    EXPECT_OK(collieCommDestroy(sub));
    collieComm_t none = reinterpret_cast<collieComm_t>(0x1);
    EXPECT_OK(collieCommSplit(comm, COLLIE_SPLIT_NOCOLOR, 0, &none, nullptr));
    EXPECT_EQ(none, nullptr);
  });
}

INSTANTIATE_TEST_SUITE_P(Threads, CApiCollectives, ::testing::Values(1, 2, 3, 4));

// A call that fails inside a group fails the group (collieGroupEnd issues none of it and returns the error), as a
// collieGroupFail does; the next group runs.
TEST(CApiGroups, AFailedCallOrCollieGroupFailIssuesNoneOfTheGroup) {
  onCApiThreads(2, [](int rank, collieComm_t comm) {
    const int peer = 1 - rank;
    std::vector<int32_t> a(32, 40 + rank), b(32, -1);
    EXPECT_OK(collieGroupStart());
    EXPECT_OK(collieSend(a.data(), a.size(), collieInt32, peer, comm, nullptr));
    EXPECT_EQ(collieRecv(b.data(), b.size(), collieInt32, 9, comm, nullptr), collieInvalidArgument);  // no rank 9
    EXPECT_EQ(collieGroupEnd(), collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(nullptr)).find("none of the group's 1 calls"), std::string::npos)
        << collieGetLastError(nullptr);
    EXPECT_OK(collieGroupStart());
    EXPECT_OK(collieSend(a.data(), a.size(), collieInt32, peer, comm, nullptr));
    EXPECT_OK(collieGroupFail(collieInternalError, "checked here and gave up"));
    EXPECT_EQ(collieGroupEnd(), collieInternalError);
    EXPECT_NE(std::string(collieGetLastError(nullptr)).find("checked here and gave up"), std::string::npos);
    EXPECT_EQ(collieGroupFail(collieInternalError, "no group"), collieInvalidUsage);
    EXPECT_OK(collieGroupStart());
    for (const int code : {0, 7, 9, 42, -1})
      EXPECT_EQ(collieGroupFail(static_cast<collieResult_t>(code), "no failure"), collieInvalidUsage) << code;
    EXPECT_OK(collieGroupEnd());
    EXPECT_EQ(b, std::vector<int32_t>(32, -1));
    EXPECT_OK(collieGroupStart());
    EXPECT_OK(collieSend(a.data(), a.size(), collieInt32, peer, comm, nullptr));
    EXPECT_OK(collieRecv(b.data(), b.size(), collieInt32, peer, comm, nullptr));
    EXPECT_OK(collieGroupEnd());
    EXPECT_EQ(b, std::vector<int32_t>(32, 40 + peer));
  });
}

// collieRedOpCreatePreMulSum: an op per communicator, each rank's own factor, read once (HostImmediate) or at every
// call (Device: a host pointer here), in blocking, async and grouped calls; a mistyped op, destroyed ops, values
// never made, built-in ops and bad arguments refused with the reason, touching no buffer.
TEST(CApiPreMulSum, EachRanksFactorImmediateOrReadAtEachCall) {
  onCApiThreads(3, [](int rank, collieComm_t comm) {
    const double mine = rank + 1;  // inputs 1, 2, 3
    double immediate = 0.5 * (rank + 1);
    collieRedOp_t now = collieSum, later = collieSum;
    EXPECT_OK(collieRedOpCreatePreMulSum(&now, &immediate, collieFloat64, collieScalarHostImmediate, comm));
    double live = 2;
    EXPECT_OK(collieRedOpCreatePreMulSum(&later, &live, collieFloat64, collieScalarDevice, comm));
    EXPECT_GE(static_cast<int>(now), static_cast<int>(collieNumOps));
    EXPECT_NE(now, later);
    immediate = 100;  // read when the op was made: no effect
    std::vector<double> in(1000, mine), out(1000, 0);
    EXPECT_OK(collieAllReduce(in.data(), out.data(), in.size(), collieFloat64, now, comm, nullptr));
    EXPECT_EQ(out, std::vector<double>(1000, 0.5 * (1 + 4 + 9)));
    EXPECT_OK(collieAllReduce(in.data(), out.data(), in.size(), collieFloat64, later, comm, nullptr));
    EXPECT_EQ(out, std::vector<double>(1000, 2.0 * 6));
    live = rank;  // read at each call
    std::vector<double> rs(2, 0);
    EXPECT_OK(collieReduceScatter(in.data(), rs.data(), 2, collieFloat64, later, comm, nullptr));
    EXPECT_EQ(rs, std::vector<double>(2, 0 * 1 + 1 * 2 + 2 * 3));
    collieRequest_t req = nullptr;
    EXPECT_OK(collieReduceAsync(in.data(), out.data(), 10, collieFloat64, now, 0, comm, &req));
    EXPECT_OK(collieWait(req));
    EXPECT_OK(collieRequestFree(req));
    if (rank == 0) {
      EXPECT_EQ(std::vector<double>(out.begin(), out.begin() + 10), std::vector<double>(10, 7.0));
    }
    std::vector<int32_t> ints(5, rank + 1), intsOut(5, 0);
    int32_t f = -(rank + 1);
    collieRedOp_t intOp = collieSum;
    EXPECT_OK(collieRedOpCreatePreMulSum(&intOp, &f, collieInt32, collieScalarHostImmediate, comm));
    EXPECT_OK(collieGroupStart());
    EXPECT_OK(collieAllReduce(ints.data(), intsOut.data(), ints.size(), collieInt32, intOp, comm, nullptr));
    EXPECT_OK(collieGroupEnd());
    EXPECT_EQ(intsOut, std::vector<int32_t>(5, -(1 + 4 + 9)));
    // Refusals, each with its reason; no buffer touched.
    std::vector<double> untouched(4, -7);
    EXPECT_EQ(collieAllReduce(in.data(), untouched.data(), 4, collieFloat32, now, comm, nullptr),
              collieInvalidArgument);  // a float64 op on float32 data
    EXPECT_NE(std::string(collieGetLastError(comm)).find("factor is float64"), std::string::npos)
        << collieGetLastError(comm);
    EXPECT_OK(collieRedOpDestroy(now, comm));
    EXPECT_EQ(collieAllReduce(in.data(), untouched.data(), 4, collieFloat64, now, comm, nullptr),
              collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("destroyed by collieRedOpDestroy"), std::string::npos)
        << collieGetLastError(comm);
    EXPECT_EQ(collieRedOpDestroy(now, comm), collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("destroyed already"), std::string::npos);
    EXPECT_EQ(collieRedOpDestroy(collieAvg, comm), collieInvalidArgument);
    const collieRedOp_t never = static_cast<collieRedOp_t>(collieNumOps + 40);
    EXPECT_EQ(collieAllReduce(in.data(), untouched.data(), 4, collieFloat64, never, comm, nullptr),
              collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("not made by collieRedOpCreatePreMulSum"), std::string::npos)
        << collieGetLastError(comm);
    EXPECT_EQ(untouched, std::vector<double>(4, -7));
    collieRedOp_t bad = collieSum;
    EXPECT_EQ(collieRedOpCreatePreMulSum(nullptr, &live, collieFloat64, collieScalarDevice, comm),
              collieInvalidArgument);
    EXPECT_EQ(collieRedOpCreatePreMulSum(&bad, nullptr, collieFloat64, collieScalarDevice, comm),
              collieInvalidArgument);
    EXPECT_EQ(collieRedOpCreatePreMulSum(&bad, &live, static_cast<collieDataType_t>(42), collieScalarDevice, comm),
              collieInvalidArgument);
    collieScalarResidence_t residence2;  // a value outside the enum, as a C caller may pass it
    const int two = 2;
    std::memcpy(&residence2, &two, sizeof two);
    EXPECT_EQ(collieRedOpCreatePreMulSum(&bad, &live, collieFloat64, residence2, comm), collieInvalidArgument);
    EXPECT_NE(std::string(collieGetLastError(comm)).find("residence=2"), std::string::npos);
    EXPECT_EQ(bad, collieSum);
    EXPECT_OK(collieRedOpDestroy(later, comm));
    EXPECT_OK(collieRedOpDestroy(intOp, comm));
    // A destroyed op's value is made again (as NCCL's): a program that makes and destroys one per call, as PyTorch's
    // NCCL backend does for PREMUL_SUM, keeps a table of one.
    for (int k = 0; k < 100; ++k) {
      double f = k;
      collieRedOp_t made = collieSum;
      EXPECT_OK(collieRedOpCreatePreMulSum(&made, &f, collieFloat64, collieScalarHostImmediate, comm));
      EXPECT_EQ(made, intOp) << "make " << k;
      double one = 1, sum = 0;
      EXPECT_OK(collieAllReduce(&one, &sum, 1, collieFloat64, made, comm, nullptr));
      EXPECT_EQ(sum, 3.0 * k);
      EXPECT_OK(collieRedOpDestroy(made, comm));
    }
    EXPECT_OK(collieBarrier(comm));
  });
}

}  // namespace
}  // namespace collie::test
