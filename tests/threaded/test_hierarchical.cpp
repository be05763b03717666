// The hierarchical algorithm with real ranks: every rank a thread of one process, the ranks put on different
// hosts by COLLIE_HOST_ID (rank%K: host r mod K, interleaved as on the test bed; rank/K: host r / K, the last host
// short when K does not divide the ranks: uneven). Ranks of one host talk over shm, hosts over TCP, as on a
// cluster. COLLIE_HOST_ID is read once per process, so each test runs itself again in a child process with it set.
// Forced with COLLIE_ALGO=hier for AllReduce, Broadcast, Reduce, AllGather and ReduceScatter, for 2..8 ranks, two
// types x two ops x counts from 0 to 300001 (several slices per step; 65537 per rank for AllGather and ReduceScatter),
// in place and out of place, checked element by element; after every call the algorithm that ran is checked to be
// hier. Plus: the hosts are what COLLIE_HOST_ID says (shm inside, tcp
// between), and a bad COLLIE_HOST_ID fails communicator creation naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

Options testOptions() {
  Options o;
  o.timeout = 60s;
  o.name = "hier";
  return o;
}

bool inChild() {
  const char* id = std::getenv("COLLIE_HOST_ID");
  return id != nullptr && *id != '\0';
}

// Runs the current test again in a child process with COLLIE_HOST_ID=`hostId`; true in that child.
bool runAsChild(const std::string& hostId) {
  if (inChild()) return true;
  const int status = rerunCurrentTestWith({"COLLIE_HOST_ID=" + hostId});
  EXPECT_TRUE(WIFEXITED(status)) << "the child run with COLLIE_HOST_ID=" << hostId << " did not exit (" << status
                                 << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child run with COLLIE_HOST_ID=" << hostId << " failed (output above)";
  return false;
}

struct Case {
  std::string hostId;
  int nranks;
  Coll coll;
};

class HierarchicalMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(HierarchicalMatrix, TypesOpsCountsAndPlacement) {
  const Case c = GetParam();
  if (!runAsChild(c.hostId)) return;
  ForcedAlgorithm forced("hier");
  CheckEachCall check([](const CallInfo& ran) { EXPECT_EQ(ran.algorithm, "hier") << ran.collective; });
  Matrix m;
  m.types = {DataType::Float32, DataType::Int64};
  m.ops = {ReduceOp::Sum, ReduceOp::Avg};
  const bool perRank = c.coll == Coll::AllGather || c.coll == Coll::ReduceScatter;  // counts per rank
  m.counts = {0, 1, 7, static_cast<size_t>(c.nranks + 1), 4097, perRank ? size_t{65537} : size_t{300001}};
  ThreadLauncher::run(
      c.nranks, [&](Communicator& comm) { runMatrix(comm, c.coll, m); }, testOptions());
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Coll coll : {Coll::AllReduce, Coll::Broadcast, Coll::Reduce}) {
    for (int n : {2, 3, 4, 5, 6, 7, 8}) out.push_back({"rank%2", n, coll});  // 2 hosts, interleaved (uneven if odd)
    for (int n : {4, 7, 8}) out.push_back({"rank/3", n, coll});              // hosts of 3, 3, and 1 or 2
  }
  for (Coll coll : {Coll::AllGather, Coll::ReduceScatter}) {
    for (int n : {2, 3, 4, 5, 8}) out.push_back({"rank%2", n, coll});
    for (int n : {4, 7}) out.push_back({"rank/3", n, coll});
    out.push_back({"rank/2", 6, coll});  // hosts of consecutive ranks: a shard's blocks are not adjacent
    out.push_back({"rank%3", 8, coll});  // 3, 3, 2
  }
  out.push_back({"rank%4", 8, Coll::AllReduce});  // the test bed's 4 hosts x 2 ranks
  out.push_back({"rank%4", 8, Coll::AllGather});
  out.push_back({"rank%4", 8, Coll::ReduceScatter});
  out.push_back({"rank%3", 8, Coll::Broadcast});  // 3, 3, 2
  return out;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string id = info.param.hostId;
  for (char& ch : id)
    if (ch == '%')
      ch = 'm';
    else if (ch == '/')
      ch = 'd';
  return collName(info.param.coll) + "_" + id + "_" + std::to_string(info.param.nranks) + "ranks";
}

INSTANTIATE_TEST_SUITE_P(Hosts, HierarchicalMatrix, ::testing::ValuesIn(cases()), caseName);

// 4 ranks on 2 hosts (rank%2): the hierarchical AllReduce reaches the rank of its own host over shm and the other
// host over tcp; the flat ring, whose neighbours are all on the other host, over tcp only.
TEST(HierarchicalHosts, ShmInsideAHostTcpBetween) {
  if (!runAsChild("rank%2")) return;
  for (const char* algo : {"hier", "ring"}) {
    ForcedAlgorithm forced(algo);
    ThreadLauncher::run(
        4,
        [&](Communicator& comm) {
          std::vector<float> data(1 << 16, 1.0f);
          comm.allReduce(data.data(), data.data(), data.size(), DataType::Float32, ReduceOp::Sum);
          for (float v : data) ASSERT_EQ(v, 4.0f);
          const CallInfo ran = comm.lastCall();
          EXPECT_EQ(ran.algorithm, algo);
          EXPECT_EQ(ran.transport, std::string(algo) == "hier" ? "shm+tcp" : "tcp") << "rank " << comm.rank();
        },
        testOptions());
  }
}

// COLLIE_HOST_ID=rank/0 (and rank%x) cannot place a rank: creation fails naming the variable.
TEST(HierarchicalHosts, BadHostIdFailsCommunicatorCreation) {
  if (!runAsChild("rank/0")) return;
  try {
    auto comms = Communicator::createAll(2, testOptions());
    ADD_FAILURE() << "COLLIE_HOST_ID=rank/0: " << comms.size() << " communicators were created";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find("COLLIE_HOST_ID=rank/0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace collie::test
