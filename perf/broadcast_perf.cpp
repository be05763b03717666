/*
 * broadcast_perf.cpp: Broadcast bandwidth from root -r; busbw = algbw.
 * Usage (nccl-tests CLI, see perf_common.hpp or -h): collierun -n 4 ./broadcast_perf -b 8 -e 64M -f 2
 */
#include "perf_common.hpp"

namespace {

using collie_perf::CheckContext;
using collie_perf::Counts;

Counts GetCounts(size_t count, int nranks) {
  (void)nranks;
  return {count, count, count, 0, 0};
}

double BusFactor(int nranks) {
  (void)nranks;
  return 1.0;
}

collieResult_t Run(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t type, collieRedOp_t op,
                   int root, collieComm_t comm, collieStream_t stream) {
  (void)op;
  return collieBroadcast(sendbuff, recvbuff, count, type, root, comm, stream);
}

double Expected(const CheckContext& ctx, size_t j) { return ctx.Input(ctx.root(), j); }

}  // namespace

int main(int argc, char** argv) {
  const collie_perf::Collective coll{"Broadcast", false, true, true, GetCounts, BusFactor, Run, Expected};
  return collie_perf::RunPerf(argc, argv, coll);
}
