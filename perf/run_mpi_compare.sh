#!/usr/bin/env bash
# run_mpi_compare.sh: collie's all_reduce_perf against Open MPI's MPI_Allreduce (perf/peers/mpi_allreduce, the same
# table), interleaved in one run, to read collie/Open MPI per size with its spread between repetitions.
#
#   perf/run_mpi_compare.sh BUILD_DIR [REPS]     (default 5; BUILD_DIR needs tools/collierun, perf/all_reduce_perf)
#
# Cases: 2 and 4 ranks, each over shared memory (collie's default shm; Open MPI --mca pml ob1 --mca btl self,vader)
# and over loopback TCP (collie COLLIE_SHM_DISABLE=1; Open MPI --mca pml ob1 --mca btl self,tcp). Sizes 8 B to
# 128 MiB (float sum, out of place), in three bands with their own iteration counts and steps (1000 up to 32 KiB by
# x4, 50 from 128 KiB to 2 MiB by x2, so 1 MiB is measured, 5 above by x4). Each repetition runs every case with both libraries back to back, alternating which goes
# first. Open MPI gets --bind-to none (collie does not pin its ranks) and --oversubscribe.
# Narrow it with COMPARE_RANKS="2", COMPARE_KINDS="shm", COMPARE_MAXBYTES=1M (e.g. to watch the small sizes).
#
# Prints, per case and size, the medians of both and the ratio collie/Open MPI with min-max over the repetitions
# (each repetition's ratio from its own pair of runs): a TIME ratio below 64 KiB (under 1 = collie faster) and a
# BUSBW ratio from 64 KiB (over 1 = collie faster); then the same as a markdown table for perf/RESULTS.md. Open MPI
# is installed on first use (apt, openmpi-bin libopenmpi-dev), never by the build or the tests. The raw figures
# stay in $COMPARE_OUT (default a temp dir, named at the end).
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n 2,18p "$0"; exit 2; }
build=$(cd "$1" && pwd)
reps=${2:-5}
ranks_list=${COMPARE_RANKS:-2 4}
kinds=${COMPARE_KINDS:-shm tcp}
maxbytes=${COMPARE_MAXBYTES:-128M}
here=$(dirname "$0")
source "$here/compare_lib.sh"
for exe in tools/collierun perf/all_reduce_perf; do
  [[ -x $build/$exe ]] || { echo "run_mpi_compare.sh: $build/$exe not built" >&2; exit 2; }
done
ensure_open_mpi "$build"
out=${COMPARE_OUT:-$(mktemp -d /tmp/run_mpi_compare.XXXXXX)}
mkdir -p "$out"
raw=$out/raw.txt  # case-ranks kind library rep bytes time_us
: >"$raw"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Bands: "minbytes maxbytes iters warmup factor"; a band above COMPARE_MAXBYTES is dropped, one across it is cut.
bands=("8 32K 1000 100 4" "128K 2M 50 5 2" "8M 128M 5 1 4")
to_bytes() { numfmt --from=iec "$1"; }

# One band of one library in one case; appends "ranks kind lib rep bytes time_us" lines (out-of-place time).
run_band() {  # lib ranks kind rep min max iters warmup factor
  local lib=$1 n=$2 kind=$3 rep=$4 min=$5 max=$6 iters=$7 warmup=$8 factor=$9 log
  log=$out/$lib-$n-$kind-$rep-$min.txt
  if [[ $lib == collie ]]; then
    local envs="COLLIE_DEBUG=WARN"
    [[ $kind == tcp ]] && envs="$envs COLLIE_SHM_DISABLE=1"
    env $envs "$build/tools/collierun" -n "$n" "$build/perf/all_reduce_perf" -b "$min" -e "$max" -f "$factor" \
      -n "$iters" -w "$warmup" >"$log" 2>&1 || { echo "collie failed: $log" >&2; tail -5 "$log" >&2; return 1; }
  else
    local btl=self,vader
    [[ $kind == tcp ]] && btl=self,tcp
    mpirun --oversubscribe --bind-to none -n "$n" --mca pml ob1 --mca btl "$btl" \
      "$build/perf/mpi_allreduce" -b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warmup" >"$log" 2>&1 ||
      { echo "Open MPI failed: $log" >&2; tail -5 "$log" >&2; return 1; }
  fi
  # Rows of rank 0 (collierun prefixes "[0] "): size in column 1, out-of-place time in 6, #wrong in 9.
  awk -v pre="$n $kind $lib $rep" '$1 == "[0]" { $1 = ""; $0 = $0 } $1 ~ /^[0-9]+$/ {
      if ($9 != 0) { print "wrong results at " $1 " B" > "/dev/stderr"; exit 1 } print pre, $1, $6 }' \
    "$log" >>"$raw"
}

max_b=$(to_bytes "$maxbytes")
{
  echo "# run_mpi_compare.sh $* (reps $reps; ranks: $ranks_list; kinds: $kinds; up to $maxbytes)"
  print_machine
  echo "# Open MPI: $(ompi_info --parsable | grep -m1 '^ompi:version:full' | cut -d: -f4)"
}
for ((rep = 1; rep <= reps; ++rep)); do
  libs=(collie ompi)
  ((rep % 2 == 0)) && libs=(ompi collie)
  for n in $ranks_list; do
    for kind in $kinds; do
      for band in "${bands[@]}"; do
        read -r min max iters warmup factor <<<"$band"
        (($(to_bytes "$min") > max_b)) && continue
        (($(to_bytes "$max") > max_b)) && max=$maxbytes
        for lib in "${libs[@]}"; do run_band "$lib" "$n" "$kind" "$rep" "$min" "$max" "$iters" "$warmup" "$factor"; done
      done
      echo "rep $rep/$reps: $n ranks $kind done ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
done
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# Per case and size: the medians of both (compare_lib.sh's median), and each repetition's ratio from its own pair
# of runs, its median and min-max. Times below 64 KiB (ratio collie/Open MPI), bus bandwidth from there (inverse).
pairs=$out/pairs.txt  # ranks kind bytes collie_us ompi_us ratio
awk '{ key = $1 " " $2 " " $5; t[key, $3, $4] = $6; keys[key] = 1; if ($4 > reps) reps = $4 }
  END {
    for (key in keys) {
      split(key, k, " ")
      for (r = 1; r <= reps; ++r) {
        c = t[key, "collie", r]; o = t[key, "ompi", r]
        if (c == "" || o == "" || c <= 0 || o <= 0) continue
        printf "%s %s %s %.17g\n", key, c, o, (k[3] >= 65536 ? o / c : c / o)
      }
    }
  }' "$raw" | sort -k1,1n -k2,2 -k3,3n -k6,6g >"$pairs"
summary=$out/summary.txt
: >"$summary"
while read -r n kind bytes; do
  rows=$(awk -v n="$n" -v kind="$kind" -v b="$bytes" '$1 == n && $2 == kind && $3 == b' "$pairs")
  mc=$(cut -d' ' -f4 <<<"$rows" | median)
  mo=$(cut -d' ' -f5 <<<"$rows" | median)
  ratios=$(cut -d' ' -f6 <<<"$rows")  # sorted
  awk -v n="$n" -v kind="$kind" -v bytes="$bytes" -v mc="$mc" -v mo="$mo" -v r="$(median <<<"$ratios")" \
    -v lo="$(head -1 <<<"$ratios")" -v hi="$(tail -1 <<<"$ratios")" -v cnt="$(wc -l <<<"$ratios")" '
    function bw(us) { return bytes / us / 1e3 * 2 * (n - 1) / n }
    BEGIN { busbw = bytes >= 65536
            printf "%s %s %s %s %.4g %.4g %.3f %.3f %.3f %d\n", n, kind, bytes, busbw ? "busbw" : "time",
                   busbw ? bw(mc) : mc, busbw ? bw(mo) : mo, r, lo, hi, cnt }' >>"$summary"
done < <(cut -d' ' -f1-3 "$pairs" | uniq)

human() { awk -v b="$1" 'BEGIN { split("B KiB MiB GiB", u, " "); for (i = 1; b >= 1024 && i < 4; ++i) b /= 1024
                                   print b " " u[i] }'; }
echo
echo "# collie / Open MPI, median of $reps interleaved runs [min-max]; time ratio < 1 and busbw ratio > 1: collie ahead"
printf "%5s %4s %10s %6s %12s %12s %8s %17s\n" ranks via size figure collie "Open MPI" ratio "[min-max]"
while read -r n kind bytes what fc fo r lo hi cnt; do
  unit=us
  [[ $what == busbw ]] && unit=GB/s
  printf "%5s %4s %10s %6s %12s %12s %8s %17s\n" "$n" "$kind" "$(human "$bytes")" "$what" "$fc $unit" "$fo $unit" \
    "$r" "[$lo-$hi]"
done <"$summary"
echo
echo "| ranks | via | size | figure | collie | Open MPI | collie / Open MPI (median) | min-max | collie ahead |"
echo "|---|---|---|---|---|---|---|---|---|"
while read -r n kind bytes what fc fo r lo hi cnt; do
  unit=µs ahead=no
  [[ $what == busbw ]] && unit=GB/s
  if [[ $what == time ]]; then
    awk -v r="$r" 'BEGIN { exit !(r <= 1) }' && ahead=yes
  else
    awk -v r="$r" 'BEGIN { exit !(r >= 1) }' && ahead=yes
  fi
  echo "| $n | $kind | $(human "$bytes") | $what | $fc $unit | $fo $unit | $r | $lo-$hi | $ahead |"
done <"$summary"
echo
echo "# raw figures: $raw" >&2
