// Send/Recv under connections on first use with every rank a forked process, over tcp (COLLIE_SHM_DISABLE=1) and
// shm: a ring shift of send(r + 1) then recv(r - 1) outside a group (2, 4 and 8 ranks), send then barrier against
// barrier then recv, every pair dialled from both ends at once, and a sender that connects, sends and exits before
// its receiver has taken the connection (the handshake's last message and the data wait for it; seen in CI as
// "rank 3 has exited before connecting"). Every element received is checked; a rank that waited for its timeout
// would fail the test (the timeout is longer than the test's deadline). The same patterns with thread ranks, and
// why they need the dial rule, are in tests/threaded/test_lazy_sendrecv.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"
#include "common/scoped_env.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

enum class Pattern { RingShift, SendBarrier, BothEnds, SendThenExit };

std::vector<int32_t> payload(int from, int to) {
  std::vector<int32_t> v(301);
  for (size_t i = 0; i < v.size(); ++i) v[i] = from * 100000 + to * 1000 + static_cast<int32_t>(i);
  return v;
}

void expectFrom(const std::vector<int32_t>& got, int from, int to) {
  const std::vector<int32_t> want = payload(from, to);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "rank " << to << " from " << from << " [" << i << "]";
}

void body(Communicator& comm, Pattern pattern) {
  const int r = comm.rank(), n = comm.size();
  std::vector<int32_t> in(301, -1);
  switch (pattern) {
    case Pattern::RingShift: {
      const int next = (r + 1) % n, prev = (r + n - 1) % n;
      std::vector<int32_t> out = payload(r, next);
      comm.send(out.data(), out.size(), DataType::Int32, next);
      comm.recv(in.data(), in.size(), DataType::Int32, prev);
      expectFrom(in, prev, r);
      break;
    }
    case Pattern::SendBarrier:  // ranks 2 and 0: no link of the barrier's ring (one ordered channel per pair)
      if (r == 2) {
        std::vector<int32_t> out = payload(r, 0);
        comm.send(out.data(), out.size(), DataType::Int32, 0);
        comm.barrier();
      } else if (r == 0) {
        comm.barrier();
        comm.recv(in.data(), in.size(), DataType::Int32, 2);
        expectFrom(in, 2, 0);
      } else {
        comm.barrier();
      }
      break;
    case Pattern::BothEnds:
      for (int k = 1; k < n; ++k) {
        std::vector<int32_t> out = payload(r, (r + k) % n);
        comm.send(out.data(), out.size(), DataType::Int32, (r + k) % n);
      }
      for (int k = 1; k < n; ++k) {
        const int from = (r + n - k) % n;
        comm.recv(in.data(), in.size(), DataType::Int32, from);
        expectFrom(in, from, r);
      }
      EXPECT_EQ(comm.connectedPeers(), n - 1);
      break;
    case Pattern::SendThenExit:  // the last rank dials, is answered by rank 0's accept loop, sends and exits
      if (r == n - 1) {
        std::vector<int32_t> out = payload(r, 0);
        comm.send(out.data(), out.size(), DataType::Int32, 0);
      } else if (r == 0) {
        std::this_thread::sleep_for(500ms);  // the sender is gone by now (several liveness checks' worth)
        comm.recv(in.data(), in.size(), DataType::Int32, n - 1);
        expectFrom(in, n - 1, 0);
      }
      break;
  }
}

struct Case {
  Pattern pattern;
  int ranks;
  bool tcp;
};

class LazySendRecvProc : public ::testing::TestWithParam<Case> {};

TEST_P(LazySendRecvProc, CompletesWithEveryElement) {
  const Case c = GetParam();
  ScopedEnv shm(c.tcp ? "COLLIE_SHM_DISABLE" : nullptr, "1");
  // The timeout is longer than the deadline below: a rank waiting for its timeout fails the test.
  const Options options = lazyOptions("lazy-p2p", 120s);
  const Pattern pattern = c.pattern;
  ForcedAlgorithm ring("ring");  // inherited by the forked ranks
  auto exits = ProcessLauncher::run(
      c.ranks, [pattern](Communicator& comm) { body(comm, pattern); }, options, 60s);
  for (const RankExit& e : exits) {
    EXPECT_TRUE(e.ok()) << e.describe();
    EXPECT_FALSE(e.killedAtDeadline) << "rank " << e.rank << " hung";
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (bool tcp : {true, false}) {
    for (int n : {2, 4, 8}) out.push_back(Case{Pattern::RingShift, n, tcp});
    out.push_back(Case{Pattern::SendBarrier, 4, tcp});
    out.push_back(Case{Pattern::BothEnds, 4, tcp});
    out.push_back(Case{Pattern::SendThenExit, 4, tcp});
  }
  return out;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  const char* names[] = {"RingShift", "SendBarrier", "BothEnds", "SendThenExit"};
  return std::string(names[static_cast<int>(info.param.pattern)]) + "_" + std::to_string(info.param.ranks) +
         (info.param.tcp ? "_tcp" : "_shm");
}

INSTANTIATE_TEST_SUITE_P(Proc, LazySendRecvProc, ::testing::ValuesIn(cases()), caseName);

}  // namespace
}  // namespace collie::test
