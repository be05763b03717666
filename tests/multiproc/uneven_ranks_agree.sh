#!/bin/sh
# Ranks whose own view of their host differs must still choose the same algorithm for every call: rank 0 alone on
# one host (COLLIE_HOST_ID) and pinned to one CPU, ranks 1-3 on another host. Before 2026-11-29 each rank priced
# its CPU share from its own host and CPUs, ranks ran different algorithms for one call, and an AllReduce failed
# or returned wrong sums (1 in 3 sweeps here). all_reduce_perf -c 1 checks every element of every size from 8 B to
# 1 MiB; three sweeps must all pass. Usage: uneven_ranks_agree.sh COLLIERUN PERF_DIR
set -u
collierun=$1
perf=$2/all_reduce_perf
command -v taskset > /dev/null || { echo "taskset not found: skipped"; exit 77; }
for sweep in 1 2 3; do
  out=$("$collierun" -n 4 --timeout 120 sh -c 'if [ "$COLLIE_RANK" = 0 ]; then export COLLIE_HOST_ID=a;
      exec taskset -c 0 "$@"; else export COLLIE_HOST_ID=b; exec "$@"; fi' sh "$perf" -b 8 -e 1M -f 4 -c 1 -n 3 -w 1 2>&1)
  rc=$?
  if [ $rc -ne 0 ] || ! printf '%s\n' "$out" | grep -q "Out of bounds values : 0 OK"; then
    printf '%s\n' "$out"
    echo "sweep $sweep: exit $rc, or some value was wrong"
    exit 1
  fi
done
echo "3 sweeps of 8 B to 1 MiB, every value right, on ranks with uneven hosts and CPUs"
