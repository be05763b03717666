#!/usr/bin/env bash
# Runs perf/ddp_bench (collie DDP) and perf/ddp_bench_torch.py (PyTorch DDP + Gloo) on the same model, batch and
# bucket caps, 2 ranks each under collierun, and prints them side by side. The runs alternate --repeat times and
# each number is the median over the repeats, which keeps a busy machine's noise out of the comparison.
#
#   perf/run_ddp_bench.sh [--build DIR] [--repeat R] [--tcp] [-- args for both benchmarks]
#   e.g. perf/run_ddp_bench.sh --build build-rel --repeat 3 -- --bucket-mb 1,5,25,50 --rounds 7 --bucket-view 0
# (both benchmarks take --layers --batch --rounds --steps --warmup --bucket-mb --threads --bucket-view).
#
# --tcp runs collie with COLLIE_SHM_DISABLE=1, so that both frameworks move the bytes over loopback TCP.
# Columns (medians): compute = step under no_sync; ddp = synchronised step; overhead = ddp - compute (paired by
# round inside each run, so it is not exactly the difference of the two medians shown); allreduce =
# the gradients' AllReduce alone in cap-sized messages; hidden = 1 - overhead / allreduce (share of the
# communication hidden behind backward); ratio = collie overhead / PyTorch overhead (target: <= 0.5).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
repeat=1
tcp=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --tcp) tcp=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "run_ddp_bench: unknown option $1" >&2; exit 2 ;;
  esac
done
args=("$@")
python=${PYTHON:-/usr/bin/python3}
collierun="$build/tools/collierun"
bench="$build/perf/ddp_bench"
for f in "$collierun" "$bench"; do
  [ -x "$f" ] || { echo "run_ddp_bench: $f not built (ninja ddp_bench collierun; needs COLLIE_WITH_TORCH)" >&2; exit 2; }
done
"$python" -c "import torch.distributed as d; assert d.is_gloo_available()" ||
  { echo "run_ddp_bench: $python has no torch.distributed with gloo (apt-get install python3-torch)" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
env_collie=()
[ "$tcp" = 1 ] && env_collie=(env COLLIE_SHM_DISABLE=1)
for r in $(seq 1 "$repeat"); do
  "${env_collie[@]}" "$collierun" -n 2 --timeout 1800 "$bench" "${args[@]}" > "$out/collie.$r" 2>&1 ||
    { cat "$out/collie.$r" >&2; exit 1; }
  port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$collierun" -n 2 --timeout 1800 "$python" "$here/ddp_bench_torch.py" --port "$port" "${args[@]}" \
    > "$out/torch.$r" 2>&1 || { cat "$out/torch.$r" >&2; exit 1; }
  echo "run_ddp_bench: repeat $r/$repeat done" >&2
done
grep -h '^\[0\] #' "$out/collie.1" "$out/torch.1" | sed 's/^\[0\] //'
[ "$tcp" = 1 ] && echo "# collie with COLLIE_SHM_DISABLE=1 (loopback TCP, like Gloo)"
echo "# medians over $repeat run(s) of each; times in ms per step"

# RESULT lines -> median per (framework, bucket, metric) -> one row per bucket cap.
cat "$out"/collie.* "$out"/torch.* | grep -h 'RESULT' | sed 's/^\[0\] //' | awk '
function median(key,   n, i, j, t, v) {
  n = split(vals[key], v, " ")
  for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
  return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
{
  fw = ""; mb = ""
  for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
  fw = f["framework"]; mb = f["bucket_mb"]
  if (!(mb in seen)) { seen[mb] = 1; order[++nb] = mb }
  for (m in f) if (m != "framework" && m != "bucket_mb") vals[fw SUBSEP mb SUBSEP m] = vals[fw SUBSEP mb SUBSEP m] " " f[m]
}
END {
  printf "| bucket MB | compute collie / torch | DDP step collie / torch | overhead collie / torch | AllReduce alone collie / torch | hidden collie / torch | overhead ratio |\n"
  printf "|---|---|---|---|---|---|---|\n"
  for (k = 1; k <= nb; k++) {
    mb = order[k]
    for (p = 1; p <= 2; p++) {
      fw = (p == 1) ? "collie" : "pytorch"
      c[p] = median(fw SUBSEP mb SUBSEP "compute_ms"); d[p] = median(fw SUBSEP mb SUBSEP "ddp_ms")
      a[p] = median(fw SUBSEP mb SUBSEP "allreduce_ms")
      o[p] = median(fw SUBSEP mb SUBSEP "overhead_ms")
      h[p] = (a[p] > 0) ? 100 * (1 - o[p] / a[p]) : 0
      if (h[p] < 0) h[p] = 0
      if (h[p] > 100) h[p] = 100
    }
    ratio = (o[2] > 0) ? sprintf("%.2f", o[1] / o[2]) : "n/a"
    printf "| %s | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.0f%% / %.0f%% | %s |\n", mb, c[1], c[2], d[1], d[2], o[1], o[2], a[1], a[2], h[1], h[2], ratio
  }
}'
