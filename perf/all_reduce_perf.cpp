/*
 * all_reduce_perf.cpp: AllReduce bandwidth; busbw = algbw * 2(n-1)/n, the bytes each rank must send and receive per
 * byte reduced. Usage (nccl-tests CLI, see perf_common.hpp or -h): collierun -n 4 ./all_reduce_perf -b 8 -e 64M -f 2
 */
#include "perf_common.hpp"

namespace {

using collie_perf::CheckContext;
using collie_perf::Counts;

Counts GetCounts(size_t count, int nranks) {
  (void)nranks;
  return {count, count, count, 0, 0};
}

double BusFactor(int nranks) { return 2.0 * (nranks - 1) / nranks; }

collieResult_t Run(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t type, collieRedOp_t op,
                   int root, collieComm_t comm, collieStream_t stream) {
  (void)root;
  return collieAllReduce(sendbuff, recvbuff, count, type, op, comm, stream);
}

double Expected(const CheckContext& ctx, size_t j) { return ctx.Reduced(j); }

}  // namespace

int main(int argc, char** argv) {
  const collie_perf::Collective coll{"AllReduce", true, false, true, GetCounts, BusFactor, Run, Expected};
  return collie_perf::RunPerf(argc, argv, coll);
}
