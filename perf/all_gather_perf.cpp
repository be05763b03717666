/*
 * all_gather_perf.cpp: AllGather bandwidth; size = nranks * per-rank bytes, busbw = algbw * (n-1)/n.
 * Usage (nccl-tests CLI, see perf_common.hpp or -h): collierun -n 4 ./all_gather_perf -b 8 -e 64M -f 2
 */
#include "perf_common.hpp"

namespace {

using collie_perf::CheckContext;
using collie_perf::Counts;

Counts GetCounts(size_t count, int nranks) {
  const size_t per = count / nranks;  // the size column is the gathered buffer, the count column per rank
  return {per, per * nranks, per, per, 0};
}

double BusFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

collieResult_t Run(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t type, collieRedOp_t op,
                   int root, collieComm_t comm, collieStream_t stream) {
  (void)op;
  (void)root;
  return collieAllGather(sendbuff, recvbuff, count, type, comm, stream);
}

double Expected(const CheckContext& ctx, size_t j) {
  const size_t per = ctx.counts().param;
  return ctx.Input(static_cast<int>(j / per), j % per);
}

}  // namespace

int main(int argc, char** argv) {
  const collie_perf::Collective coll{"AllGather", false, false, true, GetCounts, BusFactor, Run, Expected};
  return collie_perf::RunPerf(argc, argv, coll);
}
