#!/usr/bin/env bash
# collie over UCX's tcp, collie's own TCP transport, and Open MPI with its UCX layer (pml ucx, UCX_TLS=tcp), all
# AllReduce (float sum) over loopback TCP, 2 and 4 ranks, 8 B to 128 MiB (x4 steps), in one run; plus the limit
# (one TCP stream: bench_transport Stream/tcp/4 MiB) and the load average. Same-host peers are forced off shared
# memory everywhere (COLLIE_SHM_DISABLE=1; Open MPI: btl self only, UCX_TLS=tcp), so all three use loopback TCP.
#   perf/run_ucx_compare.sh BUILD_DIR [ITERS]      (prints a report on stdout)
set -euo pipefail
build=${1:?usage: run_ucx_compare.sh BUILD_DIR [ITERS]}
iters=${2:-5}
source "$(dirname "$0")/compare_lib.sh"
ensure_open_mpi "$build"  # Open MPI (with its UCX layer) installed on first use, perf/peers/mpi_allreduce built
print_machine
echo "# UCX: $(ucx_info -v | head -1); Open MPI: $(ompi_info --parsable | grep -m1 '^ompi:version:full' | cut -d: -f4)"
echo "## limit: one TCP stream (collie's bench_transport Stream/tcp, 4 MiB messages)"
"$build/perf/bench_transport" --benchmark_filter='Stream/tcp/4194304' --benchmark_min_time=0.5 2>/dev/null | grep Stream
for n in 2 4; do
  echo "## collie over UCX (COLLIE_NET=ucx, UCX_TLS=tcp), $n ranks"
  COLLIE_NET=ucx COLLIE_SHM_DISABLE=1 UCX_TLS=tcp "$build/tools/collierun" -n "$n" --timeout 600 \
    "$build/perf/all_reduce_perf" -b 8 -e 128M -f 4 -n "$iters" -w 1 | grep -v '^\[0\] #' | grep -v '^\[[1-9]'
  echo "## collie TCP (COLLIE_NET=tcp), $n ranks"
  COLLIE_NET=tcp COLLIE_SHM_DISABLE=1 "$build/tools/collierun" -n "$n" --timeout 600 \
    "$build/perf/all_reduce_perf" -b 8 -e 128M -f 4 -n "$iters" -w 1 | grep -v '^\[0\] #' | grep -v '^\[[1-9]'
  echo "## Open MPI (mpirun --mca pml ucx, UCX_TLS=tcp), $n ranks"
  UCX_TLS=tcp mpirun --allow-run-as-root --oversubscribe -n "$n" --mca pml ucx --mca pml_ucx_tls any \
    --mca pml_ucx_devices any --mca btl self -x UCX_TLS "$build/perf/mpi_allreduce" -b 8 -e 128M -f 4 -n "$iters" -w 1
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
