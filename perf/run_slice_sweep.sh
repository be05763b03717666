#!/usr/bin/env bash
# run_slice_sweep.sh: does the slice size (and the number of slices in flight) matter? Appends a dated section to
# perf/RESULTS.md with the measurements behind the tuner's slicing rule (src/core/tuner.cpp, chooseSlicing).
#
#   perf/run_slice_sweep.sh [BUILD_DIR]        (default: build; needs tools/collierun and perf/all_reduce_perf)
#   SLICE_RANKS="2" SLICE_TRANSPORTS="shm" perf/run_slice_sweep.sh     (a quicker subset)
#
# For each transport (shm: the default between local ranks; tcp: COLLIE_SHM_DISABLE=1, loopback) and each rank
# count, runs `collierun -n R all_reduce_perf -b 64K -e 64M -f 4` once per forced slice size (COLLIE_SLICE_BYTES)
# and once with the tuner's choice ("auto"), then once per slices-in-flight value (COLLIE_SLICES_IN_FLIGHT) at
# the tuner's slice size. Each table gives out-of-place busbw (GB/s) per message size; the best cell of each
# column is marked with *, and "auto / best" says how far the tuner's choice is from the best forced one.
# Exits non-zero when a run failed (its table is still written, with the failure).
set -euo pipefail

build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
[[ -d $build ]] || build=$here/../$build
build=$(cd "$build" && pwd)
results=$here/RESULTS.md
collierun=$build/tools/collierun
perf=$build/perf/all_reduce_perf
for exe in "$collierun" "$perf"; do
  [[ -x $exe ]] || { echo "run_slice_sweep.sh: $exe not built" >&2; exit 2; }
done

ranks=${SLICE_RANKS:-2 4}
transports=${SLICE_TRANSPORTS:-shm tcp}
slices=(4096 16384 65536 262144 1048576 4194304 auto)
inflight=(1 2 4 8)
sizes="65536 1048576 4194304 16777216 67108864"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# run NAME ENV...: one all_reduce_perf run; the table (rank 0's lines) goes to $tmp/NAME.
run() {
  local name=$1
  shift
  set +e
  env "$@" "$collierun" -n "$R" "$perf" -b 64K -e 64M -f 4 -n 20 -w 5 >"$tmp/$name.raw" 2>&1
  local rc=$?
  set -e
  ((rc == 0)) || { failed=1; echo "run $name failed ($rc)" >&2; }
  sed -E 's/^\[0\] //' "$tmp/$name.raw" >"$tmp/$name"
}
busbw() { awk -v s="$2" '$1 == s && NF >= 13 { print $8 }' "$tmp/$1"; }

# table TITLE PREFIX VALUES...: rows = values, columns = sizes, best of each column starred.
table() {
  local title=$1 prefix=$2
  shift 2
  echo
  echo "$title"
  echo
  local header="| $prefix |" rule="|---|"
  for s in $sizes; do
    header+=" $((s >> 10)) KiB |"
    rule+="---|"
  done
  echo "$header"
  echo "$rule"
  for s in $sizes; do
    best[$s]=0
    for v in "$@"; do
      local b
      b=$(busbw "$prefix-$v" "$s")
      [[ -n $b ]] && best[$s]=$(awk -v a="${best[$s]}" -v b="$b" 'BEGIN { print (b > a) ? b : a }')
    done
  done
  for v in "$@"; do
    local row="| $v |"
    for s in $sizes; do
      local b
      b=$(busbw "$prefix-$v" "$s")
      if [[ -z $b ]]; then
        row+=" failed |"
      elif [[ $b == "${best[$s]}" ]]; then
        row+=" **$b** |"
      else
        row+=" $b |"
      fi
    done
    echo "$row"
  done
  if [[ " $* " == *" auto "* ]]; then
    local row="| auto / best |"
    for s in $sizes; do
      local a
      a=$(busbw "$prefix-auto" "$s")
      row+=" $(awk -v a="$a" -v b="${best[$s]}" 'BEGIN { if (a == "" || b == 0) print "n/a"; else printf "%.2f", a / b }') |"
    done
    echo "$row"
  fi
}

declare -A best
out=$tmp/section.md
{
  echo
  echo "## Slice size and slices in flight (issue 3 item 5), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- command: \`perf/run_slice_sweep.sh\` (each cell: \`collierun -n R all_reduce_perf -b 64K -e 64M -f 4 -n 20 -w 5\`"
  echo "  with COLLIE_SLICE_BYTES or COLLIE_SLICES_IN_FLIGHT set; out-of-place busbw in GB/s; * = best of the column)"
  echo "- machine: \`$(uname -srm)\`, $(nproc) CPUs, \`$(lscpu | grep 'Model name' | sed -E 's/.*:[[:space:]]+//')\`"
  echo "- build: \`$(git -C "$here" describe --always --dirty 2>/dev/null || echo unknown)\`"
} >"$out"

for T in $transports; do
  extra=()
  [[ $T == tcp ]] && extra=(COLLIE_SHM_DISABLE=1)
  for R in $ranks; do
    for v in "${slices[@]}"; do
      if [[ $v == auto ]]; then run "slice-$v" "${extra[@]}"; else run "slice-$v" "${extra[@]}" COLLIE_SLICE_BYTES="$v"; fi
    done
    for v in "${inflight[@]}"; do run "inflight-$v" "${extra[@]}" COLLIE_SLICES_IN_FLIGHT="$v"; done
    {
      table "**$T, $R ranks: slice size** (bytes; auto = the tuner's choice, 4 in flight)" slice "${slices[@]}"
      table "**$T, $R ranks: slices in flight** (the tuner's slice size)" inflight "${inflight[@]}"
    } >>"$out"
  done
done

{
  echo
  echo "Load average: $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after."
} >>"$out"
cat "$out" >>"$results"
cat "$out"
exit $failed
