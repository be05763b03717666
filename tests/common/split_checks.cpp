// Checks shared by the split tests (split_checks.hpp).
#include "common/split_checks.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/bodies.hpp"

namespace collie::test {

std::vector<int> membersOf(int n, int me, const std::function<int(int)>& color, const std::function<int(int)>& key) {
  std::vector<int> members;
  for (int q = 0; q < n; ++q)
    if (color(q) == color(me)) members.push_back(q);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return key(a) < key(b); });
  return members;
}

void expectMembers(Communicator& comm, const std::vector<int>& members, int me) {
  ASSERT_EQ(comm.size(), static_cast<int>(members.size()));
  const int rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  EXPECT_EQ(comm.rank(), rank) << "old rank " << me;
  int32_t mine = me;
  std::vector<int32_t> got(members.size(), -1);
  comm.allGather(&mine, got.data(), 1, DataType::Int32);
  for (size_t i = 0; i < members.size(); ++i)
    EXPECT_EQ(got[i], members[i]) << "new rank " << i << " (old rank " << me << ")";
}

void everyCollectiveChecked(Communicator& comm) {
  Matrix m;
  m.types = {DataType::Float32, DataType::Int32};
  m.ops = {ReduceOp::Sum, ReduceOp::Max};
  m.counts = {1, 4097};
  for (Coll coll : kAllColls) runMatrix(comm, coll, m);
}

std::string expectedTransport() {
  if (std::getenv("COLLIE_SHM_DISABLE") == nullptr) return "shm";
  const char* net = std::getenv("COLLIE_NET");
  return net != nullptr && std::string(net) == "ucx" ? "ucx" : "tcp";
}

}  // namespace collie::test
