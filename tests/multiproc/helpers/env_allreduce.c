/*
 * env_allreduce: a plain C program against collie.h, meant to run under collierun (or torchrun, mpirun, srun).
 * Creates its communicator from the launcher's environment, checks rank and size against COLLIE_RANK and
 * COLLIE_NRANKS when they are set, runs a float64 Sum AllReduce and an int8 Max AllReduce, checks every element,
 * and prints "env_allreduce ok: rank R of N". Exits non-zero, saying why on stderr, on any failure.
 */
#include <collie/collie.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    collieResult_t r_ = (call);                                                              \
    if (r_ != collieSuccess) {                                                               \
      fprintf(stderr, "env_allreduce: %s failed: %s: %s\n", #call, collieGetErrorString(r_), \
              collieGetLastError(comm));                                                     \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

enum { kCount = 100003 };

static int envInt(const char* name, int fallback) {
  const char* v = getenv(name);
  return (v && *v) ? atoi(v) : fallback;
}

int main(void) {
  collieComm_t comm = NULL;
  collieConfig_t config = COLLIE_CONFIG_INITIALIZER;
  config.timeoutMs = 60000;
  config.commName = "env_allreduce";
  CHECK(collieCommInitFromEnv(&comm, &config));
  int rank = -1, nranks = -1;
  CHECK(collieCommUserRank(comm, &rank));
  CHECK(collieCommCount(comm, &nranks));
  if (rank != envInt("COLLIE_RANK", rank) || nranks != envInt("COLLIE_NRANKS", nranks)) {
    fprintf(stderr, "env_allreduce: got rank %d of %d, the environment says %d of %d\n", rank, nranks,
            envInt("COLLIE_RANK", -1), envInt("COLLIE_NRANKS", -1));
    return 1;
  }

  double* sums = malloc(kCount * sizeof(double));
  int8_t* maxes = malloc(kCount);
  if (!sums || !maxes) return 1;
  for (int i = 0; i < kCount; ++i) {
    sums[i] = rank + 1 + i % 7;
    maxes[i] = (int8_t)((rank * 5 + i) % 11 - 5);
  }
  CHECK(collieAllReduce(sums, sums, kCount, collieFloat64, collieSum, comm, NULL));
  CHECK(collieAllReduce(maxes, maxes, kCount, collieInt8, collieMax, comm, NULL));
  int bad = 0;
  for (int i = 0; i < kCount; ++i) {
    double want = nranks * (nranks + 1) / 2.0 + (double)nranks * (i % 7);
    int wantMax = -128;
    for (int r = 0; r < nranks; ++r) {
      int v = (r * 5 + i) % 11 - 5;
      if (v > wantMax) wantMax = v;
    }
    if (sums[i] != want || maxes[i] != wantMax) {
      if (bad < 5) {
        fprintf(stderr, "env_allreduce: rank %d element %d: sum %g (want %g), max %d (want %d)\n", rank, i, sums[i],
                want, maxes[i], wantMax);
      }
      ++bad;
    }
  }
  free(sums);
  free(maxes);
  CHECK(collieCommDestroy(comm));
  if (bad) {
    fprintf(stderr, "env_allreduce: rank %d: %d wrong elements\n", rank, bad);
    return 1;
  }
  printf("env_allreduce ok: rank %d of %d\n", rank, nranks);
  return 0;
}
