// The prepared path of a repeated blocking call (src/core/prepared_call.hpp), with every rank a thread (shm between
// them): repeated calls give the right result element by element, past the re-classification every
// PreparedCall::kUses calls, through the C++ and the C API, and are counted like any call; a bad argument after a
// run of prepared calls still gets its error and touches no buffer; a repeated call inside a group waits for the
// group's end; and a peer that calls something else while a rank repeats its prepared call is caught as a mismatch
// on both ranks.
#include <collie/collie.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

constexpr int kCalls = 600;  // more than twice PreparedCall::kUses

Options testOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "prepared";
  return o;
}

// The input of `rank` in call `call`, element i: small integers, exact in float.
float input(int rank, int call, size_t i) {
  return static_cast<float>((rank + 1) * 3 + call % 17 + static_cast<int>(i));
}

float sumOf(int nranks, int call, size_t i) {
  float s = 0;
  for (int r = 0; r < nranks; ++r) s += input(r, call, i);
  return s;
}

TEST(PreparedCall, RepeatedAllReducesAreRightEveryTimeAndCounted) {
  for (size_t count : {size_t{2}, size_t{32}, size_t{1000}}) {  // 8 B, 128 B, 4000 B
    SCOPED_TRACE(std::to_string(count) + " floats");
    ThreadLauncher::run(
        3,
        [&](Communicator& c) {
          std::vector<float> send(count), recv(count);
          for (int call = 0; call < kCalls; ++call) {
            const bool inPlace = call >= kCalls / 2;  // the second half on one buffer: a second prepared call
            float* in = inPlace ? recv.data() : send.data();
            for (size_t i = 0; i < count; ++i) in[i] = input(c.rank(), call, i);
            c.allReduce(in, recv.data(), count, DataType::Float32, ReduceOp::Sum);
            for (size_t i = 0; i < count; ++i) {
              if (recv[i] != sumOf(c.size(), call, i)) {
                ADD_FAILURE() << "call " << call << " element " << i << ": " << recv[i] << ", expected "
                              << sumOf(c.size(), call, i);
                return;
              }
            }
          }
          const CommStats stats = c.stats();
          ASSERT_EQ(stats.rows.size(), 1u) << stats.summary;
          EXPECT_EQ(stats.rows[0].collective, "AllReduce");
          EXPECT_EQ(stats.rows[0].calls, static_cast<uint64_t>(kCalls));
          EXPECT_EQ(stats.rows[0].bytes, static_cast<uint64_t>(kCalls) * count * sizeof(float));
          EXPECT_EQ(c.lastCall().bytes, count * sizeof(float));
        },
        testOptions());
  }
}

TEST(PreparedCall, RepeatedCApiCallsAreRight) {
  constexpr int n = 2;
  onCApiThreads(n, [](int r, collieComm_t comm) {
    std::vector<int32_t> send(8), recv(8);
    for (int call = 0; call < kCalls; ++call) {
      for (size_t i = 0; i < send.size(); ++i) send[i] = r * 1000 + call + static_cast<int32_t>(i);
      ASSERT_EQ(collieAllReduce(send.data(), recv.data(), send.size(), collieInt32, collieMax, comm, nullptr),
                collieSuccess)
          << collieGetLastError(comm);
      for (size_t i = 0; i < recv.size(); ++i)
        ASSERT_EQ(recv[i], (n - 1) * 1000 + call + static_cast<int32_t>(i)) << "call " << call << " element " << i;
    }
  });
}

// Each bad call differs from the prepared one in one argument, so it takes the general path's checks: the same
// error as ever, nothing written, and the communicator goes on.
TEST(PreparedCall, BadArgumentsAfterPreparedCallsAreRefusedAndTouchNothing) {
  ThreadLauncher::run(
      2,
      [](Communicator& c) {
        constexpr size_t count = 4;
        std::vector<float> buf(3 * count, -1.0f);
        float* send = buf.data();
        float* recv = buf.data() + count;
        auto good = [&](int call) {
          for (size_t i = 0; i < count; ++i) send[i] = input(c.rank(), call, i);
          c.allReduce(send, recv, count, DataType::Float32, ReduceOp::Sum);
          for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[i], sumOf(c.size(), call, i)) << "call " << call;
        };
        for (int call = 0; call < 5; ++call) good(call);
        const std::vector<float> before = buf;
        auto refused = [&](const char* what, ErrorCode code, const std::string& words, auto&& call) {
          SCOPED_TRACE(what);
          try {
            call();
            ADD_FAILURE() << "no error";
          } catch (const Error& e) {
            EXPECT_EQ(e.code(), code) << e.what();
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
          }
          EXPECT_EQ(buf, before) << "a refused call wrote a buffer";
        };
        refused("a datatype that is none", ErrorCode::InvalidArgument, "datatype=42",
                [&] { c.allReduce(send, recv, count, static_cast<DataType>(42), ReduceOp::Sum); });
        refused("an op that is none", ErrorCode::InvalidArgument, "op=77",
                [&] { c.allReduce(send, recv, count, DataType::Float32, static_cast<ReduceOp>(77)); });
        refused("overlapping buffers", ErrorCode::InvalidArgument, "overlaps",
                [&] { c.allReduce(send, send + 1, count, DataType::Float32, ReduceOp::Sum); });
        refused("a count that overflows", ErrorCode::InvalidArgument, "overflows",
                [&] { c.allReduce(send, recv, SIZE_MAX / 2, DataType::Float32, ReduceOp::Sum); });
        refused("a null receive buffer", ErrorCode::InvalidArgument, "recvbuff is NULL",
                [&] { c.allReduce(send, nullptr, count, DataType::Float32, ReduceOp::Sum); });
        for (int call = 5; call < 10; ++call) good(call);
      },
      testOptions());
}

TEST(PreparedCall, ARepeatedCallInsideAGroupWaitsForTheGroupEnd) {
  ThreadLauncher::run(
      2,
      [](Communicator& c) {
        std::vector<double> send(3), recv(3);
        for (int call = 0; call < 4; ++call) {
          for (size_t i = 0; i < send.size(); ++i) send[i] = c.rank() + call + static_cast<double>(i);
          std::fill(recv.begin(), recv.end(), -7.0);
          const bool grouped = call == 3;
          if (grouped) groupStart();
          c.allReduce(send.data(), recv.data(), send.size(), DataType::Float64, ReduceOp::Sum);
          if (grouped) {
            for (double v : recv) EXPECT_EQ(v, -7.0) << "a call inside a group ran before the group's end";
            groupEnd();
          }
          for (size_t i = 0; i < recv.size(); ++i) EXPECT_EQ(recv[i], 1 + 2.0 * (call + static_cast<double>(i)));
        }
      },
      testOptions());
}

TEST(PreparedCall, APeerCallingSomethingElseIsCaughtOnThePreparedPath) {
  Options o = testOptions();
  o.timeout = 20s;
  ThreadLauncher::run(
      2,
      [](Communicator& c) {
        std::vector<float> x(16, 1.0f);
        for (int call = 0; call < 4; ++call)
          c.allReduce(x.data(), x.data(), x.size(), DataType::Float32, ReduceOp::Sum);
        const auto start = std::chrono::steady_clock::now();
        try {
          if (c.rank() == 0) {
            c.allReduce(x.data(), x.data(), x.size(), DataType::Float32, ReduceOp::Sum);  // the prepared call again
          } else {
            c.broadcast(x.data(), x.data(), x.size(), DataType::Float32, 0);
          }
          ADD_FAILURE() << "no error";
        } catch (const Error& e) {
          const std::string what = e.what();
          EXPECT_EQ(e.code(), ErrorCode::InvalidUsage) << what;
          EXPECT_NE(what.find("AllReduce(float32, sum, 16) as call #4"), std::string::npos) << what;
          EXPECT_NE(what.find("Broadcast(float32, 16, root 0) as call #4"), std::string::npos) << what;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 10s) << "caught by the timeout, not the fingerprint";
        EXPECT_THROW(c.allReduce(x.data(), x.data(), x.size(), DataType::Float32, ReduceOp::Sum), Error);
      },
      o);
}

}  // namespace
}  // namespace collie::test
