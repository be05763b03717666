/*
 * sendrecv_perf.cpp: ring SendRecv bandwidth: each rank sends to rank+1 and receives from rank-1 in one group;
 * busbw = algbw. Out of place only (sending from and receiving into one buffer at once is a race).
 * Usage (nccl-tests CLI, see perf_common.hpp or -h): collierun -n 4 ./sendrecv_perf -b 8 -e 64M -f 2
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
  (void)root;
  int rank = 0, nranks = 1;
  if (collieResult_t r = collieCommUserRank(comm, &rank); r != collieSuccess) return r;
  if (collieResult_t r = collieCommCount(comm, &nranks); r != collieSuccess) return r;
  if (collieResult_t r = collieGroupStart(); r != collieSuccess) return r;
  const collieResult_t s = collieSend(sendbuff, count, type, (rank + 1) % nranks, comm, stream);
  const collieResult_t v = collieRecv(recvbuff, count, type, (rank + nranks - 1) % nranks, comm, stream);
  const collieResult_t e = collieGroupEnd();  // always closes the group
  return s != collieSuccess ? s : v != collieSuccess ? v : e;
}

double Expected(const CheckContext& ctx, size_t j) {
  return ctx.Input((ctx.rank() + ctx.nranks() - 1) % ctx.nranks(), j);  // from rank - 1
}

}  // namespace

int main(int argc, char** argv) {
  const collie_perf::Collective coll{"SendRecv", false, false, false, GetCounts, BusFactor, Run, Expected};
  return collie_perf::RunPerf(argc, argv, coll);
}
