/* mpi_allreduce: Open MPI's MPI_Allreduce (float, sum) timed the way perf/all_reduce_perf times collie, for the
 * side-by-side figures in perf/RESULTS.md. One process per rank under mpirun:
 *
 *   mpirun -n 4 --mca pml ucx -x UCX_TLS=tcp perf/peers/mpi_allreduce [minbytes] [maxbytes] [factor] [iters]
 *
 * For each size: `warmup` untimed calls, then `iters` timed ones between barriers; the time is the mean per call on
 * rank 0 (the max over ranks); the result is checked (every element must equal nranks). busbw = algbw * 2(n-1)/n,
 * as NCCL and all_reduce_perf report it. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  size_t minBytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 8;
  size_t maxBytes = argc > 2 ? strtoull(argv[2], NULL, 10) : (size_t)128 << 20;
  size_t factor = argc > 3 ? strtoull(argv[3], NULL, 10) : 4;
  int iters = argc > 4 ? atoi(argv[4]) : 5;
  const int warmup = 1;
  float* buf = malloc(maxBytes > 4 ? maxBytes : 4);
  if (rank == 0)
    printf("# MPI_Allreduce float sum, %d ranks, %d iterations per size\n#%12s %12s %10s %10s %6s\n", nranks, iters,
           "size (B)", "time (us)", "algbw", "busbw", "wrong");
  int failures = 0;
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= factor) {
    size_t count = bytes / sizeof(float);
    if (count == 0) count = 1;
    for (int i = 0; i < warmup; ++i) {
      for (size_t k = 0; k < count; ++k) buf[k] = 1.0f;
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    double total = 0;
    long wrong = 0;
    for (int i = 0; i < iters; ++i) {
      for (size_t k = 0; k < count; ++k) buf[k] = 1.0f;
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      total += MPI_Wtime() - t0;
      for (size_t k = 0; k < count; ++k) wrong += buf[k] != (float)nranks;
    }
    double mine = total / iters, worst = 0;
    MPI_Reduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    long allWrong = 0;
    MPI_Reduce(&wrong, &allWrong, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)(count * sizeof(float)) / worst / 1e9;
      printf(" %12zu %12.1f %10.3f %10.3f %6ld\n", count * sizeof(float), worst * 1e6, algbw,
             algbw * 2.0 * (nranks - 1) / nranks, allWrong);
      failures += allWrong != 0;
    }
  }
  free(buf);
  MPI_Finalize();
  return failures ? 1 : 0;
}
