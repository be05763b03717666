/* mpi_allreduce: Open MPI's MPI_Allreduce (float sum) timed and printed the way perf/all_reduce_perf times and
 * prints collie, for the side-by-side figures of perf/run_mpi_compare.sh and perf/run_ucx_compare.sh. One process
 * per rank under mpirun:
 *
 *   mpirun -n 4 --mca btl self,vader perf/mpi_allreduce -b 8 -e 128M -f 4 -n 20 -w 5
 *
 * Options (a subset of all_reduce_perf's, same meaning and defaults): -b minbytes, -e maxbytes (K/M/G suffix),
 * -f step factor, -n timed iterations, -w warmup iterations, -c 0/1 check, -a 0/1/2/3 combine per-rank times
 * (rank 0 / mean / min / max). For each size and variant (out of place, then MPI_IN_PLACE), as all_reduce_perf:
 * one checked call (every element compared with the exact sum over ranks, the wrong count summed over ranks),
 * `warmup` untimed calls, a barrier, then `iters` calls back to back; time = elapsed / iters, combined over ranks.
 * busbw = algbw * 2(n-1)/n; calls under 1 us print N/A bandwidths. The table has all_reduce_perf's columns; its algo
 * column reads "ompi" and its transport column the pml (when not ob1) or btl list Open MPI was given. */
#include <getopt.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { kMaxRows = 64 };
static const double kMinTimedSeconds = 1e-6; /* as all_reduce_perf: shorter calls get no bandwidth */

typedef struct {
  size_t minBytes, maxBytes, factor;
  int iters, warmup, check, average;
} Options;

typedef struct {
  double us, algbw, busbw;
  long wrong;
  int timed;
} Result;

/* "8", "64K", "128M", "1G" (an optional trailing B) -> bytes; 0 on a malformed value. */
static int parseBytes(const char* s, size_t* out) {
  char* end = NULL;
  double v = strtod(s, &end);
  if (end == s || v < 0) return 0;
  double unit = 1;
  if (*end == 'K' || *end == 'k')
    unit = 1024.0, ++end;
  else if (*end == 'M' || *end == 'm')
    unit = 1024.0 * 1024, ++end;
  else if (*end == 'G' || *end == 'g')
    unit = 1024.0 * 1024 * 1024, ++end;
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0') return 0;
  *out = (size_t)(v * unit);
  return 1;
}

static int parseArgs(int argc, char** argv, Options* o) {
  *o = (Options){32u << 20, 32u << 20, 2, 20, 5, 1, 1};
  int c;
  while ((c = getopt(argc, argv, "b:e:f:n:w:c:a:h")) != -1) {
    int ok = 1;
    switch (c) {
      case 'b':
        ok = parseBytes(optarg, &o->minBytes);
        break;
      case 'e':
        ok = parseBytes(optarg, &o->maxBytes);
        break;
      case 'f':
        ok = parseBytes(optarg, &o->factor) && o->factor >= 2;
        break;
      case 'n':
        o->iters = atoi(optarg), ok = o->iters > 0;
        break;
      case 'w':
        o->warmup = atoi(optarg), ok = o->warmup >= 0;
        break;
      case 'c':
        o->check = atoi(optarg);
        break;
      case 'a':
        o->average = atoi(optarg), ok = o->average >= 0 && o->average <= 3;
        break;
      default:
        ok = 0;
        break;
    }
    if (!ok) {
      fprintf(stderr,
              "usage: %s [-b minbytes] [-e maxbytes] [-f factor>=2] [-n iters>0] [-w warmup] [-c 0/1] "
              "[-a 0/1/2/3]\n",
              argv[0]);
      return 0;
    }
  }
  if (o->minBytes > o->maxBytes) {
    fprintf(stderr, "%s: invalid sizes: minbytes %zu > maxbytes %zu\n", argv[0], o->minBytes, o->maxBytes);
    return 0;
  }
  return 1;
}

/* Element i of rank r's input: small integers, so the float sum over ranks is exact. */
static float inputOf(int r, size_t i) { return (float)(r + 1 + (int)(i % 13)); }

static double combineTime(double sec, int average, int nranks) {
  double out = sec;
  switch (average) {
    case 0:
      MPI_Bcast(&out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      return out;
    case 2:
      MPI_Allreduce(&sec, &out, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
      return out;
    case 3:
      MPI_Allreduce(&sec, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      return out;
    default:
      MPI_Allreduce(&sec, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      return out / nranks;
  }
}

/* One size, one variant: the checked call, the warmup, the timed loop. */
static Result runOne(const Options* o, float* send, float* recv, size_t count, int inPlace, int rank, int nranks) {
  const void* src = inPlace ? MPI_IN_PLACE : (const void*)send;
  Result res = {0, 0, 0, -1, 0};
  if (o->check) {
    float* in = inPlace ? recv : send;
    for (size_t i = 0; i < count; ++i) in[i] = inputOf(rank, i);
    if (!inPlace) memset(recv, 0, count * sizeof(float));
    MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long wrong = 0;
    for (size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int r = 0; r < nranks; ++r) want += inputOf(r, i);
      wrong += recv[i] != want;
    }
    MPI_Allreduce(&wrong, &res.wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  }
  for (int i = 0; i < o->warmup; ++i) MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < o->iters; ++i) MPI_Allreduce(src, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  double sec = combineTime((MPI_Wtime() - t0) / o->iters, o->average, nranks);
  res.us = sec * 1e6;
  res.timed = sec >= kMinTimedSeconds;
  res.algbw = res.timed ? (double)(count * sizeof(float)) / 1e9 / sec : 0;
  res.busbw = res.algbw * 2.0 * (nranks - 1) / nranks;
  return res;
}

static void printResult(const Result* r) {
  char time[32], wrong[32];
  snprintf(time, sizeof time, r->us >= 10000.0 ? "%7.0f" : r->us >= 100.0 ? "%7.1f" : "%7.2f", r->us);
  if (r->wrong < 0)
    snprintf(wrong, sizeof wrong, "%5s", "N/A");
  else
    snprintf(wrong, sizeof wrong, "%5ld", r->wrong);
  if (r->timed)
    printf("  %7s  %6.2f  %6.2f  %5s", time, r->algbw, r->busbw, wrong);
  else
    printf("  %7s  %6s  %6s  %5s", time, "N/A", "N/A", wrong);
}

/* What carried the data: the pml Open MPI was given when not ob1 (mpirun --mca pml ucx passes OMPI_MCA_pml=ucx),
 * else the btl list (OMPI_MCA_btl) less "self"; "default" when neither was chosen. */
static void transportName(char* out, size_t size) {
  const char* pml = getenv("OMPI_MCA_pml");
  const char* btl = getenv("OMPI_MCA_btl");
  snprintf(out, size, "%s", "default");
  if (pml && *pml && strcmp(pml, "ob1") != 0) {
    snprintf(out, size, "%s", pml);
    return;
  }
  if (!btl || !*btl) return;
  char copy[128];
  snprintf(copy, sizeof copy, "%s", btl);
  out[0] = '\0';
  for (char* tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
    if (strcmp(tok, "self") == 0) continue;
    if (out[0]) strncat(out, "+", size - strlen(out) - 1);
    strncat(out, tok, size - strlen(out) - 1);
  }
  if (!out[0]) snprintf(out, size, "%s", "self");
}

static void printHeader(const Options* o, int rank, int nranks) {
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  int pid = (int)getpid();
  int* pids = rank == 0 ? malloc(sizeof(int) * (size_t)nranks) : NULL;
  MPI_Gather(&pid, 1, MPI_INT, pids, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  printf(
      "# nThread 1 nGpus 0 minBytes %zu maxBytes %zu step: %zu(factor) warmup iters: %d iters: %d agg iters: 1 "
      "validation: %d graph: 0\n# Algorithm: ompi\n#\n# Using devices\n",
      o->minBytes, o->maxBytes, o->factor, o->warmup, o->iters, o->check);
  for (int r = 0; r < nranks && pids; ++r)
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu] Open MPI\n", r, 0, pids[r], host, 0);
  free(pids);
  printf("#\n# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
         "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s  %8s  %9s\n", "size", "count", "type",
         "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "algo", "transport");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s  %8s  %9s\n", "(B)", "(elements)", "", "",
         "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "(as ran)", "(rank 0)");
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  MPI_Init(&argc, &argv);
  int rank = 0, nranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  Options o;
  if (!parseArgs(argc, argv, &o)) {
    MPI_Finalize();
    return 2;
  }
  size_t bufBytes = o.maxBytes > sizeof(float) ? o.maxBytes : sizeof(float);
  float* send = malloc(bufBytes);
  float* recv = malloc(bufBytes);
  if (!send || !recv) {
    fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes\n", argv[0], rank, bufBytes);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  char transport[64];
  transportName(transport, sizeof transport);
  printHeader(&o, rank, nranks);
  long failures = 0;
  double bwSum = 0;
  int bwCount = 0, untimed = 0;
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes; bytes *= o.factor) {
    size_t count = bytes / sizeof(float);
    Result oop = runOne(&o, send, recv, count, 0, rank, nranks);
    Result ip = runOne(&o, send, recv, count, 1, rank, nranks);
    failures += (oop.wrong > 0) + (ip.wrong > 0);
    const Result* both[2] = {&oop, &ip};
    for (int k = 0; k < 2; ++k) {
      if (both[k]->timed)
        bwSum += both[k]->busbw, ++bwCount;
      else
        ++untimed;
    }
    if (rank == 0) {
      printf("%12zu  %12zu  %8s  %6s  %6d", count * sizeof(float), count, "float", "sum", -1);
      printResult(&oop);
      printResult(&ip);
      printf("  %8s  %9s\n", "ompi", transport);
    }
    if (bytes == 0) break;
  }
  if (rank == 0) {
    printf("# Out of bounds values : %ld %s\n", failures, failures ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g GB/s\n", bwCount ? bwSum / bwCount : 0.0);
    if (untimed) printf("# N/A algbw/busbw:  the call took under 1 us, too short to time\n");
    printf("#\n\n");
  }
  free(send);
  free(recv);
  MPI_Finalize();
  return failures ? 1 : 0;
}
