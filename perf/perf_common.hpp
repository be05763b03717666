/*
 * perf_common.hpp: the shared driver of the nccl-tests-style benchmarks (all_reduce_perf and friends).
 *
 * Each *_perf.cpp describes one collective in a `Collective` (buffer sizes, bus-bandwidth factor, how to call
 * it, what every received element must hold) and hands it to RunPerf, which does the rest: the nccl-tests CLI
 * (-b -e -f -i -n -w -c -o -d -a -z -r -t -g -J -h), the communicator (collieCommInitFromEnv, so run the tools
 * under collierun, mpirun, srun or torchrun), the size sweep, the data check, timing and the nccl-tests table.
 * Only the public C API (<collie/collie.h>) is used. Buffers are host memory, or with -g 1 device memory on GPU
 * (local rank % device count), the calls then enqueued on a stream of the rank's own (perf_cuda.hpp).
 *
 * Size semantics follow nccl-tests: for a sweep size S of T-typed elements, count = S / sizeof(T); the table's
 * size column is the larger of the send and receive buffers in bytes and its count column is the count passed
 * to the call (per rank for AllGather / ReduceScatter / AlltoAll).
 */
#ifndef COLLIE_PERF_PERF_COMMON_HPP_
#define COLLIE_PERF_PERF_COMMON_HPP_

#include <collie/collie.h>

#include <cstddef>

namespace collie_perf {

/** Element counts of one call, derived from the sweep's count (as nccl-tests' GetCollByteCount). */
struct Counts {
  size_t send = 0;            ///< elements in the send buffer
  size_t recv = 0;            ///< elements in the receive buffer
  size_t param = 0;           ///< the count argument of the call
  size_t sendInplaceOff = 0;  ///< in place: sendbuff = recvbase + rank * sendInplaceOff elements
  size_t recvInplaceOff = 0;  ///< in place: recvbuff = recvbase + rank * recvInplaceOff elements
};

/** What the data check knows: this rank, the call's arguments, and the inputs every rank was given. */
class CheckContext {
 public:
  CheckContext(int rank, int nranks, int root, collieRedOp_t op, bool reduction, const Counts& counts)
      : rank_(rank), nranks_(nranks), root_(root), op_(op), reduction_(reduction), counts_(counts) {}
  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int root() const { return root_; }
  const Counts& counts() const { return counts_; }
  /** Element idx of rank r's send buffer. */
  double Input(int r, size_t idx) const;
  /** Element idx of the send buffers of all ranks, reduced with the op. */
  double Reduced(size_t idx) const;
  /** Returned by an expectation for an element that has no defined value (e.g. Reduce off the root). */
  static double Unchecked();

 private:
  int SizingRanks() const;
  int rank_, nranks_, root_;
  collieRedOp_t op_;
  bool reduction_;
  Counts counts_;
};

/** One collective, as the driver needs it. */
struct Collective {
  const char* name;  ///< "AllReduce"
  bool hasOp;        ///< takes a reduction op (-o)
  bool hasRoot;      ///< takes a root (-r)
  bool inPlace;      ///< has an in-place form; without one the in-place columns read N/A
  Counts (*counts)(size_t count, int nranks);
  double (*busFactor)(int nranks);  ///< busbw = algbw * busFactor
  /** Makes the call; stream is NULL for host buffers, the rank's stream for device buffers (-g 1). */
  collieResult_t (*run)(const void* sendbuff, void* recvbuff, size_t count, collieDataType_t type, collieRedOp_t op,
                        int root, collieComm_t comm, collieStream_t stream);
  /** The value element j of this rank's receive buffer must hold after the call. */
  double (*expected)(const CheckContext& ctx, size_t j);
};

/** Parses the command line, runs the sweep, prints the table; returns the process exit code. */
int RunPerf(int argc, char** argv, const Collective& coll);

}  // namespace collie_perf

#endif  // COLLIE_PERF_PERF_COMMON_HPP_
