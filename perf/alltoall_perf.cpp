/*
 * alltoall_perf.cpp: AlltoAll bandwidth (out of place only: collieAllToAll has no in-place form); busbw = algbw *
 * (n-1)/n. Usage (nccl-tests CLI, see perf_common.hpp or -h): collierun -n 4 ./alltoall_perf -b 8 -e 64M -f 2
 */
#include "perf_common.hpp"

namespace {

using collie_perf::CheckContext;
using collie_perf::Counts;

Counts GetCounts(size_t count, int nranks) {
  const size_t per = count / nranks;  // per peer; the size column is the whole send (= receive) buffer
  return {per * nranks, per * nranks, per, 0, 0};
}

double BusFactor(int nranks) { return static_cast<double>(nranks - 1) / nranks; }

collieResult_t Run(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t type, collieRedOp_t op,
                   int root, collieComm_t comm, collieStream_t stream) {
  (void)op;
  (void)root;
  return collieAllToAll(sendbuff, recvbuff, count, type, comm, stream);
}

double Expected(const CheckContext& ctx, size_t j) {
  const size_t per = ctx.counts().param;  // block p comes from rank p: its block number ctx.rank()
  return ctx.Input(static_cast<int>(j / per), static_cast<size_t>(ctx.rank()) * per + j % per);
}

}  // namespace

int main(int argc, char** argv) {
  const collie_perf::Collective coll{"AlltoAll", false, false, false, GetCounts, BusFactor, Run, Expected};
  return collie_perf::RunPerf(argc, argv, coll);
}
