// Topology discovery (hwloc when built with it, else sysfs): a consistent picture of this machine, the same
// answer from both sources, and thread binding / memory placement that do no harm on any machine.
#include <collie/config.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <set>
#include <thread>

#include "base/topology.hpp"

namespace collie::base {
namespace {

TEST(Topology, DescribesThisMachineConsistently) {
  const Topology& t = localTopology();
  EXPECT_FALSE(t.source.empty());
  EXPECT_GE(t.packages, 1);
  EXPECT_GE(t.cores, 1);
  EXPECT_GE(t.pus, t.cores);
  ASSERT_FALSE(t.numaNodes.empty());
  std::set<int> cpus;
  for (const NumaNodeInfo& n : t.numaNodes) {
    EXPECT_GE(n.id, 0);
    EXPECT_GT(n.memBytes, 0u) << "node " << n.id;
    for (int c : n.cpus) EXPECT_TRUE(cpus.insert(c).second) << "CPU " << c << " in two nodes";
  }
  EXPECT_EQ(static_cast<int>(cpus.size()), t.pus) << "every hardware thread belongs to exactly one node";
  for (const auto* list : {&t.gpus, &t.nics})
    for (const PciDeviceInfo& d : *list) EXPECT_EQ(d.busId.size(), 12u) << d.busId;
  std::string text = base::describeTopology(t);
  EXPECT_NE(text.find("NUMA node " + std::to_string(t.numaNodes[0].id)), std::string::npos) << text;
  EXPECT_NE(text.find(t.source), std::string::npos) << text;
}

TEST(Topology, HwlocAndSysfsAgree) {
  const Topology& t = localTopology();
  base::Topology s = base::discoverTopologySysfs();
  if (!COLLIE_WITH_HWLOC) GTEST_SKIP() << "built without hwloc: both are sysfs";
  EXPECT_EQ(t.source.rfind("hwloc", 0), 0u) << t.source;
  EXPECT_EQ(t.pus, s.pus);
  EXPECT_EQ(t.cores, s.cores);
  ASSERT_EQ(t.numaNodes.size(), s.numaNodes.size());
  for (size_t i = 0; i < t.numaNodes.size(); ++i) {
    EXPECT_EQ(t.numaNodes[i].id, s.numaNodes[i].id);
    EXPECT_EQ(t.numaNodes[i].cpus, s.numaNodes[i].cpus);
  }
  auto ids = [](const std::vector<base::PciDeviceInfo>& v) {
    std::set<std::string> out;
    for (const PciDeviceInfo& d : v) out.insert(d.busId);
    return out;
  };
  EXPECT_EQ(ids(t.nics), ids(s.nics));
  EXPECT_EQ(ids(t.gpus), ids(s.gpus));
}

TEST(Topology, CurrentNodeAndBinding) {
  int node = base::currentNumaNode();
  ASSERT_GE(node, 0);
  EXPECT_EQ(base::numaNodeOfCpu(sched_getcpu()) >= 0, true);
  // Binding happens on a thread of its own, so the test process keeps its affinity.
  std::thread([node] {
    EXPECT_TRUE(base::bindThreadToNode(node));
    cpu_set_t set;
    CPU_ZERO(&set);
    ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) {
        EXPECT_EQ(base::numaNodeOfCpu(c), node) << "CPU " << c;
      }
    EXPECT_EQ(base::currentNumaNode(), node);
  }).join();
  EXPECT_FALSE(base::bindThreadToNode(1 << 20)) << "an unknown node binds nothing";
}

TEST(Topology, PlacementIsANoOpOnOneNodeAndWorksOnSeveral) {
  size_t bytes = 1 << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  bool placed = base::placeOnNode(p, bytes, base::currentNumaNode());
  EXPECT_EQ(placed, base::localTopology().numaNodes.size() > 1);
  static_cast<char*>(p)[0] = 1;
  munmap(p, bytes);
}

}  // namespace
}  // namespace collie::base
