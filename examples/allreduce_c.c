/*
 * allreduce_c: the C API in one short program. One process per rank, started by a launcher:
 *
 *   collierun -n 4 ./allreduce_c
 *
 * (or torchrun, mpirun, srun: collieCommInitFromEnv reads their variables). Each rank contributes rank + 1 to
 * every element of a float32 AllReduce (Sum), checks that every element holds n(n+1)/2, and prints
 * "allreduce_c: rank R of N: sum X (expected X): ok". Any failure is reported on stderr with
 * collieGetErrorString and collieGetLastError, and the exit code is 1; run without a launcher, it says so.
 */
#include <collie/collie.h>
#include <stdio.h>

enum { kCount = 1024 };

int main(void) {
  collieComm_t comm = NULL;
  collieResult_t r = collieCommInitFromEnv(&comm, NULL);
  if (r != collieSuccess) {
    /* No communicator: the reason is kept per thread, read with a NULL handle. */
    fprintf(stderr, "allreduce_c: collieCommInitFromEnv failed: %s: %s\n", collieGetErrorString(r),
            collieGetLastError(NULL));
    return 1;
  }
  int rank = -1, nranks = 0;
  collieCommUserRank(comm, &rank);
  collieCommCount(comm, &nranks);

  static float data[kCount];
  for (int i = 0; i < kCount; ++i) data[i] = (float)(rank + 1);
  r = collieAllReduce(data, data, kCount, collieFloat32, collieSum, comm, NULL);
  if (r != collieSuccess) {
    fprintf(stderr, "allreduce_c: rank %d: collieAllReduce failed: %s: %s\n", rank, collieGetErrorString(r),
            collieGetLastError(comm));
    collieCommDestroy(comm);
    return 1;
  }
  const float expected = (float)nranks * (float)(nranks + 1) / 2.0f;
  int wrong = 0;
  for (int i = 0; i < kCount; ++i) wrong += data[i] != expected;
  printf("allreduce_c: rank %d of %d: sum %g (expected %g): %s\n", rank, nranks, data[0], expected,
         wrong ? "WRONG" : "ok");
  collieCommDestroy(comm);
  return wrong ? 1 : 0;
}
