#!/usr/bin/env bash
# run_ab.sh: two builds of collie side by side in one run, interleaved, to see what a change did to the hot path.
#
#   perf/run_ab.sh OLD_BUILD NEW_BUILD [REPS]     (default 5; each build needs tools/collierun, perf/all_reduce_perf)
#
# For each case (2 and 4 ranks over shm, 2 ranks over TCP loopback with COLLIE_SHM_DISABLE=1; 8 B, 1 MiB and
# 64 MiB AllReduce of float sum, out of place) it runs OLD then NEW, REPS times in turn, and prints a markdown
# table of the medians: time (us) below 64 KiB, busbw (GB/s) from there, and NEW/OLD. memcpy_bw of NEW is run
# once first: the limit the shm figures chase. Nothing is written to RESULTS.md: paste the table with its date,
# machine, load average and this command.
# Narrow or widen it with AB_CASES="2 tcp;4 tcp" (ranks and shm/tcp, ';' between cases) and AB_SIZES="32 1M"
# (sizes in bytes, K/M suffixes allowed; iterations scale with the size); AB_ARGS="-o avg -d half" passes more
# all_reduce_perf arguments to both builds, AB_OLD_ARGS and AB_NEW_ARGS to one side only (the same build twice with
# AB_OLD_ARGS="-o sum" AB_NEW_ARGS="-o premulsum" prices an op against another).
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n 2,9p "$0"; exit 2; }
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
reps=${3:-5}
for b in "$old" "$new"; do
  for exe in tools/collierun perf/all_reduce_perf; do
    [[ -x $b/$exe ]] || { echo "run_ab.sh: $b/$exe not built" >&2; exit 2; }
  done
done

# One figure from one run: column 6 (out-of-place time, us) or 8 (busbw, GB/s) of the single data row.
measure() {  # build ranks env bytes iters column side-args
  local b=$1 r=$2 envs=$3 bytes=$4 iters=$5 col=$6 side=$7
  # shellcheck disable=SC2086 # AB_ARGS and the side's: words on purpose
  env $envs "$b/tools/collierun" -n "$r" "$b/perf/all_reduce_perf" -b "$bytes" -e "$bytes" -n "$iters" \
    -w $((iters / 10 + 2)) -c 0 ${AB_ARGS:-} $side 2>/dev/null |
    awk -v c="$col" '$1 == "[0]" && $2 ~ /^[0-9]+$/ { print $(c + 1); exit }'
}
source "$(dirname "$0")/compare_lib.sh"  # median

if [[ -x $new/perf/memcpy_bw ]]; then
  echo '```text'
  "$new/perf/memcpy_bw"
  echo '```'
fi
echo
echo "| case | size | figure | old (median of $reps) | new (median of $reps) | new / old |"
echo "|---|---|---|---|---|---|"
IFS=';' read -r -a cases <<<"${AB_CASES:-2 shm;4 shm;2 tcp}"
sizes=()
for s in ${AB_SIZES:-8 1M 64M}; do sizes+=("$(numfmt --from=iec "$s")"); done
# A size's iterations (about 5000 calls at 8 B, fewer as calls get longer) and its figure.
spec_of() {
  awk -v b="$1" 'BEGIN { it = b < 65536 ? 5000 : int(200 * 1048576 / b); if (it < 10) it = 10; if (it > 5000) it = 5000
                         print b, it, (b < 65536 ? "6 time_us" : "8 busbw_GBps") }'
}
for c in "${cases[@]}"; do
  read -r ranks kind <<<"$c"
  envs="COLLIE_DEBUG=WARN"
  [[ $kind == tcp ]] && envs="$envs COLLIE_SHM_DISABLE=1"
  for size in "${sizes[@]}"; do
    read -r bytes iters col what <<<"$(spec_of "$size")"
    o=() n=()
    for ((i = 0; i < reps; ++i)); do
      o+=("$(measure "$old" "$ranks" "$envs" "$bytes" "$iters" "$col" "${AB_OLD_ARGS:-}")")
      n+=("$(measure "$new" "$ranks" "$envs" "$bytes" "$iters" "$col" "${AB_NEW_ARGS:-}")")
    done
    mo=$(printf '%s\n' "${o[@]}" | median)
    mn=$(printf '%s\n' "${n[@]}" | median)
    ratio=$(awk -v a="$mo" -v b="$mn" 'BEGIN { if (a > 0) printf "%.2f", b / a; else print "n/a" }')
    echo "| $ranks ranks $kind | $bytes B | $what | $mo | $mn | $ratio |"
  done
done
