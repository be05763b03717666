// The hierarchical AllGather and ReduceScatter with every rank a forked process (ProcessLauncher), the ranks put on
// different hosts by COLLIE_HOST_ID (rank%K: host r mod K; rank/K: host r / K, uneven when K does not divide the
// ranks), ranks of one host over shm and hosts over tcp, or every link over tcp (COLLIE_SHM_DISABLE=1). Forced with
// COLLIE_ALGO=hier: four types x two ops x counts per rank from 0 to 100003, in place and out of place, checked
// element by element; after every call the algorithm that ran is checked to be hier, and a last call checks the
// transports it used. COLLIE_HOST_ID and COLLIE_SHM_DISABLE are read once per process, so each test runs itself
// again in a child process with them set, whose forked ranks inherit them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/bodies.hpp"
#include "common/forced_algorithm.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

using namespace std::chrono_literals;

struct Case {
  std::string hostId;
  int nranks;
  Coll coll;
  bool tcpOnly;
};

class HierarchicalProcesses : public ::testing::TestWithParam<Case> {};

TEST_P(HierarchicalProcesses, TypesOpsCountsInAndOutOfPlace) {
  const Case c = GetParam();
  const char* id = std::getenv("COLLIE_HOST_ID");
  if (id == nullptr || *id == '\0') {  // the parent: run this test again with the hosts and transports of the case
    std::vector<std::string> env = {"COLLIE_HOST_ID=" + c.hostId};
    if (c.tcpOnly) env.push_back("COLLIE_SHM_DISABLE=1");
    const int status = rerunCurrentTestWith(env);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "the child run with COLLIE_HOST_ID=" << c.hostId << " failed (output above), status " << status;
    return;
  }
  ForcedAlgorithm forced("hier");
  CheckEachCall check([](const CallInfo& ran) { EXPECT_EQ(ran.algorithm, "hier") << ran.collective; });
  Matrix m;
  m.types = {DataType::Int8, DataType::Bfloat16, DataType::Float32, DataType::Int64};
  m.ops = {ReduceOp::Sum, ReduceOp::Max};
  m.counts = {0, 1, 7, static_cast<size_t>(c.nranks + 1), 100003};
  Options o;
  o.timeout = 60s;
  o.name = "hierproc";
  // A rank alone on its host reaches only other hosts.
  const int k = std::stoi(c.hostId.substr(5));
  auto hostOf = [&](int r) { return c.hostId[4] == '%' ? r % k : r / k; };
  auto transports = [&](int rank) {
    int here = 0;
    for (int r = 0; r < c.nranks; ++r) here += hostOf(r) == hostOf(rank);
    return c.tcpOnly || here == 1 ? "tcp" : "shm+tcp";
  };
  auto exits = ProcessLauncher::run(
      c.nranks,
      [&](Communicator& comm) {
        runMatrix(comm, c.coll, m);
        checkCase(comm, c.coll, DataType::Float32, ReduceOp::Sum, 4096, false, 0);
        EXPECT_EQ(comm.lastCall().transport, transports(comm.rank())) << "rank " << comm.rank();
      },
      o, 240s);
  EXPECT_TRUE(allRanksSucceeded(exits));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (Coll coll : {Coll::AllGather, Coll::ReduceScatter}) {
    out.push_back({"rank%2", 4, coll, false});  // 2 hosts x 2, interleaved
    out.push_back({"rank%2", 4, coll, true});
    out.push_back({"rank/2", 5, coll, false});  // 2, 2, 1: uneven
    out.push_back({"rank/2", 5, coll, true});
    out.push_back({"rank%3", 6, coll, false});  // 3 hosts x 2
  }
  return out;
}

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  std::string id = info.param.hostId;
  for (char& ch : id) ch = ch == '%' ? 'm' : ch == '/' ? 'd' : ch;
  return collName(info.param.coll) + "_" + id + "_" + std::to_string(info.param.nranks) + "ranks_" +
         (info.param.tcpOnly ? "tcp" : "shm_tcp");
}

INSTANTIATE_TEST_SUITE_P(Hosts, HierarchicalProcesses, ::testing::ValuesIn(cases()), caseName);

}  // namespace
}  // namespace collie::test
