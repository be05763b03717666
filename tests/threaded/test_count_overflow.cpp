// Counts near SIZE_MAX / element size: for every collective, every rank gets InvalidArgument naming the count
// (count x size x nranks overflow, a buffer larger than PTRDIFF_MAX, or pointer + extent past the address space)
// before any buffer is touched, and the communicator still works afterwards.
#include <gtest/gtest.h>

#include <collie/collie.hpp>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "base/datatypes.hpp"
#include "common/bodies.hpp"
#include "common/launcher.hpp"

namespace collie::test {
namespace {

void issue(Communicator& comm, Coll c, const void* send, void* recv, size_t count, DataType type) {
  const int peer = 1 - comm.rank();
  switch (c) {
    case Coll::AllReduce:
      return comm.allReduce(send, recv, count, type, ReduceOp::Sum);
    case Coll::Broadcast:
      return comm.broadcast(send, recv, count, type, 0);
    case Coll::Reduce:
      return comm.reduce(send, recv, count, type, ReduceOp::Sum, 0);
    case Coll::AllGather:
      return comm.allGather(send, recv, count, type);
    case Coll::ReduceScatter:
      return comm.reduceScatter(send, recv, count, type, ReduceOp::Sum);
    case Coll::AllToAll:
      return comm.allToAll(send, recv, count, type);
    case Coll::SendRecv:
      if (comm.rank() == 0) return comm.send(send, count, type, peer);
      return comm.recv(recv, count, type, peer);
  }
}

/// A correct AllReduce after the rejected calls, checked element by element.
void checkStillWorks(Communicator& comm) {
  const int n = comm.size();
  std::vector<double> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<double>(i) + comm.rank();
  comm.allReduce(data.data(), data.data(), data.size(), DataType::Float64, ReduceOp::Sum);
  for (size_t i = 0; i < data.size(); ++i) {
    const double want = static_cast<double>(i) * n + n * (n - 1) / 2.0;
    ASSERT_EQ(data[i], want) << "element " << i << " on rank " << comm.rank();
  }
}

class CountOverflow : public ::testing::TestWithParam<std::tuple<Coll, DataType>> {};

TEST_P(CountOverflow, EveryRankGetsInvalidArgumentAndTheCommunicatorStillWorks) {
  const auto [coll, type] = GetParam();
  ThreadLauncher::run(2, [coll, type](Communicator& comm) {
    const size_t es = base::dataTypeSize(type);
    const size_t nranks = static_cast<size_t>(comm.size());
    const size_t counts[] = {SIZE_MAX / es, SIZE_MAX / es - 1, SIZE_MAX / (es * nranks) + 1};
    // Real, distinct buffers: only the count is wrong.
    std::vector<uint8_t> send(4096), recv(4096);
    for (size_t count : counts) {
      try {
        issue(comm, coll, send.data(), recv.data(), count, type);
        ADD_FAILURE() << collName(coll) << " count=" << count << " was accepted on rank " << comm.rank();
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        const std::string what = e.what();
        EXPECT_NE(what.find(std::to_string(count)), std::string::npos) << what;
        EXPECT_NE(what.find("overflows the address space"), std::string::npos) << what;
      }
    }
    checkStillWorks(comm);
  });
}

std::string comboName(const ::testing::TestParamInfo<std::tuple<Coll, DataType>>& info) {
  static const char* types[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                "uint64", "float16", "float32", "float64", "bfloat16"};
  return collName(std::get<0>(info.param)) + "_" + types[static_cast<int>(std::get<1>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(
    AllCollectives, CountOverflow,
    ::testing::Combine(::testing::Values(Coll::AllReduce, Coll::Broadcast, Coll::Reduce, Coll::AllGather,
                                         Coll::ReduceScatter, Coll::AllToAll, Coll::SendRecv),
                       ::testing::Values(DataType::Int8, DataType::Float16, DataType::Float32, DataType::Float64)),
    comboName);

}  // namespace
}  // namespace collie::test
