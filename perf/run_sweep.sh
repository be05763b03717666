#!/usr/bin/env bash
# run_sweep.sh: the standard single-node sweep, appended as a dated section to perf/RESULTS.md.
#
#   perf/run_sweep.sh [BUILD_DIR]      (default: build; needs perf/memcpy_bw, perf/all_reduce_perf, tools/collierun)
#   SWEEP_LABEL="tcp forced" COLLIE_SHM_DISABLE=1 perf/run_sweep.sh   (COLLIE_* variables reach every rank)
#
# Runs memcpy_bw (single-thread copy bandwidth: the ceiling of a shared-memory transport) and
# `collierun -n R all_reduce_perf -b 8 -e 64M -f 2` for R in 2 4, then appends: date, `uname -a`, the CPU model,
# the command lines, the full tables, the memcpy figures, and busbw / memcpy at 1M, 16M and 64M (out-of-place
# busbw against memcpy's copy GB/s at 1 MiB, 16 MiB and, for 64M, the 128 MiB DRAM-sized buffer).
# Exits non-zero when a run failed (its output and exit code are still recorded).
set -euo pipefail

build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
[[ -d $build ]] || build=$here/../$build  # relative to the repository root when not to the working directory
build=$(cd "$build" && pwd)
results=$here/RESULTS.md
collierun=$build/tools/collierun
for exe in "$collierun" "$build/perf/memcpy_bw" "$build/perf/all_reduce_perf"; do
  if [[ ! -x $exe ]]; then
    echo "run_sweep.sh: $exe not built (ninja -C $build collierun memcpy_bw all_reduce_perf)" >&2
    exit 2
  fi
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

memcpy_cmd="$build/perf/memcpy_bw"
"$memcpy_cmd" >"$tmp/memcpy.txt"
memcpy_at() { awk -v s="$1" '$1 == s { print $2 }' "$tmp/memcpy.txt"; }

declare -A rc
for r in 2 4; do
  cmd="$collierun -n $r $build/perf/all_reduce_perf -b 8 -e 64M -f 2"
  echo "$cmd" >"$tmp/cmd$r"
  set +e
  $cmd >"$tmp/raw$r" 2>&1
  rc[$r]=$?
  set -e
  ((rc[$r] == 0)) || failed=1
  # collierun prefixes each line with "[rank] "; the table comes from rank 0, errors may come from any rank.
  sed -E 's/^\[0\] //' "$tmp/raw$r" >"$tmp/table$r"
done

busbw_at() { awk -v s="$2" '$1 == s && NF >= 13 { print $8 }' "$tmp/table$1"; }
ratio() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "n/a"; else printf "%.3f", a / b }'
}

{
  echo
  echo "## all_reduce_perf sweep${SWEEP_LABEL:+ ($SWEEP_LABEL)}, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- date: \`$(date)\`"
  echo "- uname -a: \`$(uname -a)\`"
  echo "- CPU: \`$(lscpu | grep 'Model name' | sed -E 's/[[:space:]]+/ /g')\`"
  echo "- build: \`$build\` at \`$(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)\`"
  echo "- environment: \`$(env | grep '^COLLIE_' | tr '\n' ' ')\`"
  echo "- load average (1, 5, 15 min) after the runs: \`$(cut -d' ' -f1-3 /proc/loadavg)\`"
  echo
  echo "### memcpy_bw"
  echo
  echo "\`$memcpy_cmd\`"
  echo
  echo '```text'
  cat "$tmp/memcpy.txt"
  echo '```'
  for r in 2 4; do
    echo
    echo "### $r ranks"
    echo
    echo "\`$(cat "$tmp/cmd$r")\`  (exit code ${rc[$r]})"
    echo
    echo '```text'
    cat "$tmp/table$r"
    echo '```'
  done
  echo
  echo "### busbw against memcpy"
  echo
  echo "Out-of-place busbw over single-thread memcpy copy GB/s (64M is compared with memcpy at 128 MiB)."
  echo
  echo "| ranks | size | busbw (GB/s) | memcpy (GB/s) | busbw / memcpy |"
  echo "|---|---|---|---|---|"
  for r in 2 4; do
    for pair in 1M:1048576:1048576 16M:16777216:16777216 64M:67108864:134217728; do
      IFS=: read -r label bytes mbytes <<<"$pair"
      b=$(busbw_at "$r" "$bytes")
      m=$(memcpy_at "$mbytes")
      echo "| $r | $label | ${b:-n/a} | ${m:-n/a} | $(ratio "$b" "$m") |"
    done
  done
} >>"$results"

echo "run_sweep.sh: appended to $results"
exit $failed
