#!/usr/bin/env bash
# run_algo_sweep.sh: AllReduce with each algorithm forced and with the tuner's choice (issue 3 item 7), appended
# as a dated section to perf/RESULTS.md, with one PNG per setting and rank count in perf/plots/.
#
#   perf/run_algo_sweep.sh [BUILD_DIR]      (default: build; needs tools/collierun, perf/all_reduce_perf, perf/memcpy_bw)
#   SWEEP_MAX=16M SWEEP_RANKS="2 4" perf/run_algo_sweep.sh build-rel      (a quick try)
#
# For each setting, each R in SWEEP_RANKS and each A in ring tree rhd auto it runs
#     collierun -n R all_reduce_perf -A A -b 8 -e SWEEP_MAX -f 2 -J ...
# in three pieces, so that big messages do not take most of the time (all_reduce_perf's -n is per run):
#     8 B .. 64 KiB: -n 100 -w 10 -c 1;   128 KiB .. 8 MiB: -n 20 -w 3 -c 1;   16 MiB .. SWEEP_MAX: -n 5 -w 1 -c 0
# (the data check costs about 50 s at 256 MiB with 8 ranks on 2 cores, so the large piece is not checked). The
# two small pieces run 5 and 3 times (SWEEP_REPEAT) and each size keeps its fastest run; the four algorithms
# take turns piece by piece, so that a burst of other work on a shared machine hits them alike. The pieces are
# merged into one JSON per algorithm (the tool's JSON, plus "transport", "setting", "merge" and "segments", the
# params of each run). Settings (SWEEP_SETTINGS, default "shm tcp bed"):
#   shm  ranks on this host, default transports (shared memory between local ranks)
#   tcp  ranks on this host with COLLIE_SHM_DISABLE=1 (TCP over loopback)
#   bed  across the hosts of tests/testbed/testbed.sh (made here and removed on exit; skipped, saying why, where
#        `testbed.sh check` fails): one rank per host for R <= 4, two per host for R > 4 placed in blocks
#        (TESTBED_RANK_HOSTS "0 0 1 1 2 2 3 3": ring neighbours share a host, as launchers place ranks), every
#        link at SWEEP_BED_RATES (default 10gbit, so the ceiling is 1.25 GB/s for every R)
# The auto runs of one setting and R share a COLLIE_TUNE_FILE (the costs rank 0 measures at the first init), and a
# last short run with the same file and COLLIE_DEBUG=TRACE COLLIE_DEBUG_SUBSYS=TUNE records which algorithm the
# tuner ran at each size. memcpy_bw runs first: the ceiling of shm busbw.
#
# The section has: date, machine, load average before and after each block, the CPU time other processes took
# during it, the commands, per setting and R a table of busbw per algorithm with auto / best forced (flagged
# below 0.9, out of place and in place), a summary of every flagged size (the tuner chose another algorithm,
# confirmed or not by the in-place figure, or the same one: noise), ceilings (memcpy for shm, the link rate for
# the bed), and links to the plots and JSON under perf/plots/algo-sweep-STAMP/. What the runs printed goes to
# SWEEP_LOGS (default /tmp/collie-algo-sweep-STAMP), kept after the sweep and not meant for the repository.
#
# Environment: SWEEP_MAX (256M), SWEEP_MAX8 (largest size for R >= 8; default SWEEP_MAX), SWEEP_RANKS
# ("2 3 4 8"), SWEEP_SETTINGS ("shm tcp bed"), SWEEP_REPEAT (5 and 3), SWEEP_BED_RATES ("10gbit"; one rate per host,
# as TESTBED_RATES), SWEEP_RESULTS (perf/RESULTS.md), SWEEP_PLOTS (perf/plots/algo-sweep-STAMP), SWEEP_LOGS,
# SWEEP_LABEL (added to the title), SWEEP_TIMEOUT (600 s per run). Exits non-zero when a run failed (its exit
# code is in the section; what it printed is in SWEEP_LOGS).
set -euo pipefail

build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
[[ -d $build ]] || build=$root/$build
build=$(cd "$build" && pwd)
collierun=$build/tools/collierun
perf=$build/perf/all_reduce_perf
testbed=$root/tests/testbed/testbed.sh
plot=$here/plot_perf
for exe in "$collierun" "$perf" "$build/perf/memcpy_bw"; do
  if [[ ! -x $exe ]]; then
    echo "run_algo_sweep.sh: $exe not built (ninja -C $build collierun memcpy_bw all_reduce_perf)" >&2
    exit 2
  fi
done
command -v gnuplot >/dev/null || echo "run_algo_sweep.sh: gnuplot not found: no plots (apt-get install gnuplot-nox)" >&2

to_bytes() {
  local v=${1^^}
  v=${v%B}
  case $v in
    *K) echo $((${v%K} << 10)) ;;
    *M) echo $((${v%M} << 20)) ;;
    *G) echo $((${v%G} << 30)) ;;
    *) echo $((v)) ;;
  esac
}
human() {
  awk -v s="$1" 'BEGIN { split("B KiB MiB GiB", u, " "); i = 1; while (s >= 1024 && i < 4) { s /= 1024; i++ }
                         printf (i == 1 ? "%d %s" : "%g %s"), s, u[i] }'
}

max_all=$(to_bytes "${SWEEP_MAX:-256M}")
max8=$(to_bytes "${SWEEP_MAX8:-${SWEEP_MAX:-256M}}")
read -r -a rank_list <<<"${SWEEP_RANKS:-2 3 4 8}"
read -r -a settings <<<"${SWEEP_SETTINGS:-shm tcp bed}"
algos=(ring tree rhd auto)
bed_rates=${SWEEP_BED_RATES:-10gbit}
timeout=${SWEEP_TIMEOUT:-600}
results=${SWEEP_RESULTS:-$here/RESULTS.md}
stamp=$(date -u '+%Y%m%d-%H%M')
plots=${SWEEP_PLOTS:-$here/plots/algo-sweep-$stamp}
logs=${SWEEP_LOGS:-${TMPDIR:-/tmp}/collie-algo-sweep-$stamp}
mkdir -p "$plots/json" "$logs"
plots=$(cd "$plots" && pwd)
# Pieces of the size range: "first last runs iteration-options" (last 0: up to the largest size). The two small
# pieces run several times (5 and 3, or SWEEP_REPEAT) and each size keeps its fastest run: on a shared 2-core
# machine a burst of other work can slow one size of one run several times over, and small-message latency is
# bimodal (whole runs at about 10 us or 75 us per call over loopback TCP); the best of a few runs mostly removes
# that.
segments=("8 65536 ${SWEEP_REPEAT:-5} -n 100 -w 10 -c 1" "131072 8388608 ${SWEEP_REPEAT:-3} -n 20 -w 3 -c 1"
          "16777216 0 1 -n 5 -w 1 -c 0")

tmp=$(mktemp -d)
bed=""
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  if [[ -n $bed ]]; then "$testbed" down "$bed" || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rel() { printf '%s\n' "${1#"$root"/}"; }  # a path as seen from the repository root
link() { realpath -m --relative-to="$(dirname "$results")" "$1"; }  # a path as linked from the results file
ncpu=$(nproc)
hz=$(getconf CLK_TCK)
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
# CPU time (ticks) used by the whole machine in user and system mode, and by this script's finished children.
busy_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4; exit }' /proc/stat; }
our_ticks() { awk '{ sub(/^.*\) /, ""); print $14 + $15 }' /proc/$$/stat; }  # cutime + cstime (fields 16, 17)

failed=0
sweep_start=$(date +%s)
load_start=$(loadavg)

# memcpy_bw: the ceiling of the shared-memory numbers, measured in this run.
"$build/perf/memcpy_bw" >"$tmp/memcpy.txt"
memcpy_at() { awk -v s="$1" '$1 == s { print $2 }' "$tmp/memcpy.txt"; }

# Merges the JSON of the pieces of one run into one file: the first piece's header, one row per size (where runs
# repeat a size, the fastest out-of-place result and the fastest in-place result), the params of each piece under
# "segments", avg_busbw and out_of_bounds over all.
merge_json() {
  local out=$1 transport=$2 setting=$3
  shift 3
  awk -v transport="$transport" -v setting="$setting" '
    FNR == 1 { nf++ }
    nf == 1 && /^  "(collective|nranks|host|date|collie_version)":/ { head = head $0 "\n" }
    /^  "params":/ { p = $0; sub(/^  "params": */, "", p); sub(/,[ \t]*$/, "", p); params[nf] = p }
    function time_of(part) { return match(part, /"time_us": [0-9.]+/) ? substr(part, RSTART + 11, RLENGTH - 11) + 0 : -1 }
    /^    \{"size"/ {
      r = $0; sub(/,[ \t]*$/, "", r)
      size = r; sub(/^    \{"size": /, "", size); sub(/,.*/, "", size); size += 0
      i = index(r, ", \"in_place\": ")
      head_part = substr(r, 1, i - 1); tail_part = substr(r, i)
      if (!(size in oop)) { order[++nr] = size; oop[size] = head_part; ip[size] = tail_part; next }
      t = time_of(head_part); if (t >= 0 && (time_of(oop[size]) < 0 || t < time_of(oop[size]))) oop[size] = head_part
      t = time_of(tail_part); if (t >= 0 && (time_of(ip[size]) < 0 || t < time_of(ip[size]))) ip[size] = tail_part
    }
    /^  "out_of_bounds":/ { v = $0; gsub(/[^0-9]/, "", v); oob += v }
    END {
      if (nr == 0) exit 1
      p = params[1]
      last = params[nf]
      if (match(last, /"maxBytes": [0-9]+/)) sub(/"maxBytes": [0-9]+/, substr(last, RSTART, RLENGTH), p)
      printf "{\n%s", head
      printf "  \"transport\": \"%s\",\n  \"setting\": \"%s\",\n", transport, setting
      printf "  \"params\": %s,\n", p
      printf "  \"merge\": \"runs listed in segments; a size measured by several keeps the fastest out-of-place and in-place results\",\n"
      printf "  \"segments\": ["
      for (i = 1; i <= nf; i++) printf "%s\n    %s", (i > 1 ? "," : ""), params[i]
      printf "\n  ],\n  \"rows\": ["
      for (i = 1; i <= nr; i++) {
        row = oop[order[i]] ip[order[i]]
        printf "%s\n%s", (i > 1 ? "," : ""), row
        s = row
        while (match(s, /"busbw": [-0-9.eE+]+/)) { v = substr(s, RSTART + 9, RLENGTH - 9); sum += v; cnt++; s = substr(s, RSTART + RLENGTH) }
      }
      printf "\n  ],\n  \"avg_busbw\": %g,\n  \"out_of_bounds\": %d\n}\n", cnt ? sum / cnt : 0, oob
    }' "$@" >"$out"
}

# Prints "size oop_time_us ip_time_us wrong" per row of a merged JSON ("-" for a missing value).
json_rows() {
  [[ -s $1 ]] || return 0
  awk '/^    \{"size"/ {
    size = $0; sub(/^    \{"size": /, "", size); sub(/,.*/, "", size)
    o = $0; sub(/.*"out_of_place": /, "", o); i = o; sub(/.*"in_place": /, "", i)
    to = "-"; ti = "-"; w = 0
    if (o !~ /^null/ && match(o, /"time_us": [0-9.]+/)) to = substr(o, RSTART + 11, RLENGTH - 11)
    if (i !~ /^null/ && match(i, /"time_us": [0-9.]+/)) ti = substr(i, RSTART + 11, RLENGTH - 11)
    s = $0; while (match(s, /"wrong": [0-9]+/)) { w += substr(s, RSTART + 9, RLENGTH - 9); s = substr(s, RSTART + RLENGTH) }
    print size, to, ti, w }' "$1"
}

# Runs one command with a log; records its exit code. Usage: run_logged LOG cmd...
run_logged() {
  local log=$1 rc=0
  shift
  echo "+ $*" >>"$log"
  "$@" >>"$log" 2>&1 || rc=$?
  echo "# exit code $rc" >>"$log"
  return $rc
}

port=29600
launch=()  # set per setting and R: the command that starts R ranks of the program that follows it
set_launch() {
  local setting=$1 r=$2
  local base=(env -u COLLIE_ALGO -u COLLIE_SHM_DISABLE -u COLLIE_TUNE_FILE -u COLLIE_DEBUG -u COLLIE_DEBUG_SUBSYS
              -u COLLIE_DEBUG_FILE -u COLLIE_ROOT_ADDR -u TESTBED_RANK_HOSTS)
  case $setting in
    shm) launch=("${base[@]}" "$collierun" --timeout "$timeout" -n "$r" --) ;;
    tcp) launch=("${base[@]}" COLLIE_SHM_DISABLE=1 "$collierun" --timeout "$timeout" -n "$r" --) ;;
    bed)
      port=$((port + 1))
      local hosts=()
      if ((r > 4)); then
        local i
        for ((i = 0; i < r; ++i)); do hosts+=($((i * 4 / r))); done
        launch=("${base[@]}" "COLLIE_ROOT_ADDR=10.213.0.1:$port" "TESTBED_RANK_HOSTS=${hosts[*]}")
      else
        launch=("${base[@]}" "COLLIE_ROOT_ADDR=10.213.0.1:$port")
      fi
      launch+=("$collierun" --timeout "$timeout" -n "$r" -- "$testbed" rank-exec "$bed" --)
      ;;
  esac
}

# Human-readable form of the launch prefix for RESULTS.md (no env -u noise, paths relative to the root).
show_cmd() {
  local out="" a
  for a in "$@"; do
    [[ $a == env || $a == -u || $a == COLLIE_ALGO || $a == COLLIE_SHM_DISABLE || $a == COLLIE_TUNE_FILE ||
      $a == COLLIE_DEBUG || $a == COLLIE_DEBUG_SUBSYS || $a == COLLIE_DEBUG_FILE || $a == COLLIE_ROOT_ADDR ||
      $a == TESTBED_RANK_HOSTS ]] && continue
    a=$(rel "$a")
    a=${a//$tmp/TMP}
    [[ $a == *" "* ]] && a="${a%%=*}=\"${a#*=}\""
    out+="${out:+ }$a"
  done
  echo "$out"
}

declare -A block_info  # "setting R" -> load before, load after, others' CPU, seconds, exit codes
declare -A setting_note
commands=()

run_block() {
  local setting=$1 r=$2 max=$3
  local a seg first last runs opts n json log rc codes="" t0 b0 o0 load0 k=0
  t0=$(date +%s) b0=$(busy_ticks) o0=$(our_ticks) load0=$(loadavg)
  local tune=$tmp/tune-$setting-r$r
  rm -f "$tune"
  local -A pieces=() rcs=()
  for a in "${algos[@]}"; do
    : >"$logs/$setting-r$r-$a.log"
    rcs[$a]=0
  done
  # Piece by piece, the four algorithms one after another, so that a burst of other work hits them alike.
  for seg in "${segments[@]}"; do
    read -r first last runs opts <<<"$seg"
    ((last == 0 || last > max)) && last=$max
    ((first <= last)) || continue
    local opt_args
    read -r -a opt_args <<<"$opts"
    for ((n = 0; n < runs; ++n)); do
      k=$((k + 1))
      for a in "${algos[@]}"; do
        json=$tmp/$setting-r$r-$a.$k.json
        set_launch "$setting" "$r"
        local extra=()
        [[ $a == auto ]] && extra=(env "COLLIE_TUNE_FILE=$tune" COLLIE_DEBUG=INFO COLLIE_DEBUG_SUBSYS=TUNE)
        local cmd=("${launch[@]}" "${extra[@]}" "$perf" -A "$a" -b "$first" -e "$last" -f 2 "${opt_args[@]}" -J "$json")
        if [[ $r == "${rank_list[0]}" && ($a == ring || $a == auto) ]] && ((k == 1)); then
          commands+=("$setting: $(show_cmd "${cmd[@]}")")
        fi
        rc=0
        run_logged "$logs/$setting-r$r-$a.log" "${cmd[@]}" || rc=$?
        ((rc == 0)) || { rcs[$a]=$rc; failed=1; }
        [[ -s $json ]] && pieces[$a]+="${pieces[$a]:+ }$json"
      done
    done
  done
  for a in "${algos[@]}"; do
    codes+="${codes:+ }$a:${rcs[$a]}"
    local list
    read -r -a list <<<"${pieces[$a]:-}"
    if ((${#list[@]} > 0)); then
      merge_json "$plots/json/$setting-r$r-$a.json" "$setting" "$setting" "${list[@]}" || true
    fi
  done
  # Which algorithm auto ran at each size: the same tuning file, one traced call per size.
  set_launch "$setting" "$r"
  log=$logs/$setting-r$r-auto-picks.log
  : >"$log"
  local cmd=("${launch[@]}" env "COLLIE_TUNE_FILE=$tune" COLLIE_DEBUG=TRACE COLLIE_DEBUG_SUBSYS=TUNE "$perf" -A auto
             -b 8 -e "$max" -f 2 -n 1 -w 0 -c 0)
  [[ $r == "${rank_list[0]}" ]] && commands+=("$setting (which algorithm auto ran): $(show_cmd "${cmd[@]}")")
  rc=0
  run_logged "$log" "${cmd[@]}" || rc=$?
  codes+=" picks:$rc"
  sed -nE 's/^\[0\] .*rank 0: AllReduce of ([0-9]+) x float32: ([a-z]+),.*/\1 \2/p' "$log" |
    awk '!seen[$1]++ { print $1 * 4, $2 }' >"$plots/json/$setting-r$r-auto-picks.txt"
  [[ -s $tune ]] && cp "$tune" "$plots/json/$setting-r$r-tune.txt"
  local secs=$(($(date +%s) - t0))
  local others
  others=$(awk -v b="$(($(busy_ticks) - b0))" -v o="$(($(our_ticks) - o0))" -v s="$secs" -v hz="$hz" \
    'BEGIN { x = s > 0 ? (b - o) / hz / s : 0; if (x < 0) x = 0; printf "%.2f", x }')
  block_info["$setting $r"]="$load0|$(loadavg)|$others|$secs|$codes"
  echo "run_algo_sweep.sh: $setting, $r ranks: ${secs} s, load $(loadavg), others ${others} cores, exit codes $codes" >&2
}

# Ceiling of a setting in GB/s at a size: memcpy for shm, the slowest link in use for the bed, none for tcp.
bed_ceiling=""
ceiling() {
  local setting=$1 size=$2
  case $setting in
    shm)
      if ((size <= 1048576)); then memcpy_at 1048576; elif ((size <= 16777216)); then memcpy_at 16777216; else memcpy_at 134217728; fi ;;
    bed) echo "$bed_ceiling" ;;
    *) echo "" ;;
  esac
}

for setting in "${settings[@]}"; do
  case $setting in
    shm | tcp) ;;
    bed)
      if ! why=$("$testbed" check 2>&1); then
        setting_note[bed]="skipped: $why"
        echo "run_algo_sweep.sh: bed skipped: $why" >&2
        continue
      fi
      bed=asw$$
      if ! TESTBED_RATES="$bed_rates" "$testbed" up "$bed" >"$tmp/bed-up.txt" 2>&1; then
        setting_note[bed]="skipped: testbed.sh up failed: $(tr '\n' ' ' <"$tmp/bed-up.txt")"
        bed=""
        failed=1
        continue
      fi
      # The slowest link in use (for R <= 4 hosts 0..R-1; for more ranks all 4) bounds busbw.
      read -r -a rl <<<"$bed_rates"
      bed_ceiling=$(for ((i = 0; i < 4; ++i)); do echo "${rl[i]:-${rl[${#rl[@]} - 1]}}"; done |
        awk '{ r = tolower($1); n = r + 0; u = r; sub(/^[0-9]+/, "", u)
               m = (u == "gbit") ? 1e9 : (u == "mbit") ? 1e6 : (u == "kbit") ? 1e3 : 1
               b = n * m / 8 / 1e9; if (min == "" || b < min) min = b } END { printf "%g", min }')
      ;;
    *)
      echo "run_algo_sweep.sh: unknown setting '$setting' (shm, tcp, bed)" >&2
      exit 2
      ;;
  esac
  for r in "${rank_list[@]}"; do
    max=$max_all
    ((r >= 8)) && max=$max8
    run_block "$setting" "$r" "$max"
  done
  if [[ $setting == bed ]]; then
    "$testbed" down "$bed" || true
    bed=""
  fi
done
sweep_secs=$(($(date +%s) - sweep_start))

# ---- plots ----------------------------------------------------------------------------------------------------
desc() {
  case $1 in
    shm) echo "one host, default transports (shm)" ;;
    tcp) echo "one host, TCP over loopback (COLLIE_SHM_DISABLE=1)" ;;
    bed) echo "test bed, ${bed_rates} links" ;;
  esac
}
# The plot title's setting: for the bed, how many hosts R ranks span.
plot_desc() {
  if [[ $1 == bed ]]; then echo "test bed, $(($2 > 4 ? 4 : $2)) hosts, ${bed_rates} links"; else desc "$1"; fi
}
if command -v gnuplot >/dev/null; then
  for key in "${!block_info[@]}"; do
    read -r setting r <<<"$key"
    files=() labels=()
    for a in "${algos[@]}"; do
      f=$plots/json/$setting-r$r-$a.json
      [[ -s $f ]] || continue
      files+=("$f")
      if [[ $a == auto ]]; then labels+=(-l "auto (tuner)"); else labels+=(-l "$a"); fi
    done
    ((${#files[@]} > 0)) || continue
    "$plot" -t "AllReduce busbw, $r ranks, $(plot_desc "$setting" "$r") ($(date -u '+%Y-%m-%d'))" "${labels[@]}" \
      --both -o "$plots/$setting-r$r.png" "${files[@]}" >/dev/null || failed=1
  done
fi

# ---- the section ----------------------------------------------------------------------------------------------
# One table per setting and R: busbw per algorithm, the algorithm auto ran, auto / best forced (out of place and
# in place), computed from the times (busbw = size / time x 2(R-1)/R, so the ratio of busbw is that of 1/time).
table() {
  local setting=$1 r=$2 a
  for a in "${algos[@]}"; do json_rows "$plots/json/$setting-r$r-$a.json" >"$tmp/rows-$a"; done
  awk -v r="$r" -v picks="$plots/json/$setting-r$r-auto-picks.txt" -v summary="$tmp/summary" -v setting="$setting" '
    BEGIN { n = split("ring tree rhd", forced, " ")
            while ((getline line < picks) > 0) { split(line, f, " "); pick[f[1]] = f[2] } }
    FILENAME ~ /rows-ring$/ { a = "ring" } FILENAME ~ /rows-tree$/ { a = "tree" }
    FILENAME ~ /rows-rhd$/ { a = "rhd" } FILENAME ~ /rows-auto$/ { a = "auto" }
    { if (!($1 in seen)) { seen[$1] = 1; sizes[++ns] = $1 }; to[a, $1] = $2; ti[a, $1] = $3; wrong += $4 }
    function bw(size, t) { return (t == "-" || t <= 0) ? -1 : size / (t * 1e-6) / 1e9 * 2 * (r - 1) / r }
    function fmt(x) { return x < 0 ? "n/a" : x >= 10 ? sprintf("%.1f", x) : x >= 0.1 ? sprintf("%.2f", x) : sprintf("%.2g", x) }
    function hsize(s,   u, i) { split("B K M G", u, " "); i = 1; while (s >= 1024 && i < 4) { s /= 1024; i++ }
                                return s (i == 1 ? "" : u[i]) }
    END {
      print "| size | ring | tree | rhd | auto | auto ran | best forced | auto / best | in place |"
      print "|---|---|---|---|---|---|---|---|---|"
      for (k = 1; k <= ns; k++) {
        s = sizes[k]; best = ""; bt = -1; bti = -1
        for (j = 1; j <= n; j++) {
          t = to[forced[j], s]; if (t != "" && t != "-" && (bt < 0 || t + 0 < bt)) { bt = t + 0; best = forced[j] }
          t = ti[forced[j], s]; if (t != "" && t != "-" && (bti < 0 || t + 0 < bti)) bti = t + 0
        }
        at = to["auto", s]; ati = ti["auto", s]
        ratio = (bt > 0 && at != "" && at != "-") ? bt / at : -1
        ratioi = (bti > 0 && ati != "" && ati != "-") ? bti / ati : -1
        p = (s in pick) ? pick[s] : "?"
        rs = ratio < 0 ? "n/a" : sprintf("%.2f", ratio)
        if (ratio >= 0 && ratio < 0.9) {
          rs = "**" rs "**"
          # How the algorithm auto ran did when forced, against the best: within 0.9 out of place, then auto lost
          # to noise (its run was slow, not its choice); below 0.9 both out of place and in place, the tuner chose
          # wrong; below in one of the two only, unconfirmed.
          px = (p != "?" && to[p, s] != "" && to[p, s] != "-") ? bt / to[p, s] : -1
          pxi = (p != "?" && ti[p, s] != "" && ti[p, s] != "-" && bti > 0) ? bti / ti[p, s] : -1
          cls = (px < 0) ? "unconfirmed" : (px >= 0.9) ? "noise" : (pxi >= 0 && pxi < 0.9) ? "wrong" : "unconfirmed"
          printf "%s|%d|%s|%s|%s|%.2f|%s|%s\n", setting, r, hsize(s), p, best, ratio,
                 ratioi < 0 ? "n/a" : sprintf("%.2f", ratioi), cls >> summary
        }
        printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", hsize(s), fmt(bw(s, to["ring", s])),
               fmt(bw(s, to["tree", s])), fmt(bw(s, to["rhd", s])), fmt(bw(s, at)), p, best, rs,
               ratioi < 0 ? "n/a" : sprintf("%.2f", ratioi)
      }
      if (wrong > 0) printf "\n**%d wrong elements** in the data checks of these runs (see the JSON).\n", wrong
    }' "$tmp/rows-ring" "$tmp/rows-tree" "$tmp/rows-rhd" "$tmp/rows-auto"
}

# busbw of the best forced algorithm and of auto at one size, for the ceilings table: "best algo auto".
at_size() {
  local setting=$1 r=$2 size=$3 a
  for a in "${algos[@]}"; do json_rows "$plots/json/$setting-r$r-$a.json" | awk -v s="$size" -v a="$a" '$1 == s { print a, $2 }'; done |
    awk -v s="$size" -v r="$r" '
      { bw = ($2 == "-" || $2 <= 0) ? -1 : s / ($2 * 1e-6) / 1e9 * 2 * (r - 1) / r
        if ($1 == "auto") auto = bw; else if (bw > best) { best = bw; algo = $1 } }
      END { if (algo != "") printf "%.3g %s %.3g\n", best, algo, auto }'
}

summary_rows=0
: >"$tmp/summary"
{
  echo
  echo "## AllReduce algorithms: ring, tree, rhd forced and auto${SWEEP_LABEL:+ ($SWEEP_LABEL)}, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "Issue 3 item 7: \`perf/run_algo_sweep.sh\` ran \`all_reduce_perf -A ring|tree|rhd|auto\` for ${rank_list[*]} ranks from"
  echo "8 B to $(human "$max_all")$( ((max8 != max_all)) && echo " ($(human "$max8") for 8 ranks)"), on one host and across the test bed. The tuner (auto) should be within 10%"
  echo "of the best forced algorithm at every size."
  echo
  echo "- date: \`$(date)\`; the sweep took $((sweep_secs / 60)) min $((sweep_secs % 60)) s"
  echo "- uname -a: \`$(uname -a)\`"
  echo "- CPU: \`$(lscpu | grep 'Model name' | sed -E 's/[[:space:]]+/ /g')\`, $ncpu CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)"
  echo "- build: \`$(rel "$build")\` at \`$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)\`"
  echo "- environment: \`$(env | grep '^COLLIE_' | tr '\n' ' ')\`"
  echo "- load average (1, 5, 15 min): \`$load_start\` before, \`$(loadavg)\` after"
  echo "- plots and data: [$(link "$plots")/]($(link "$plots")/) (a PNG per setting and R; json/: the merged \`-J\` output"
  echo "  per algorithm, the algorithm auto ran at each size, the tuning file of the auto runs)"
  echo
  echo "Commands: every run in three pieces, \`-b 8 -e 64K -n 100 -w 10 -c 1\` and \`-b 128K -e 8M -n 20 -w 3 -c 1\`"
  echo "(run ${SWEEP_REPEAT:-5} and ${SWEEP_REPEAT:-3} times; per size the fastest is kept) and \`-b 16M -e MAX -n 5 -w 1 -c 0\` (once), the four"
  echo "algorithms in turn for each piece, merged into one JSON per algorithm. The first piece for ring and auto at"
  echo "${rank_list[0]} ranks (TMP: a temporary folder; the other pieces differ in -b -e -n -w -c only):"
  echo
  for c in "${commands[@]}"; do echo "- \`$c\`"; done
  [[ -n ${setting_note[bed]:-} ]] && echo "- bed: ${setting_note[bed]}"
  echo
  echo "How to read the tables: busbw in GB/s of the out-of-place call (in nccl-tests' sense, 2(R-1)/R x size / time),"
  echo "computed from the JSON's time_us. \"auto ran\": the algorithm the tuner chose at that size (a traced run with"
  echo "the same tuning file). \"auto / best\": best forced time / auto time, out of place; \"in place\": the same ratio"
  echo "for the in-place calls, a second measurement of the same thing. Below 0.9 is in bold. Auto runs the same"
  echo "schedule as the forced run of the algorithm it chose, so where that forced run was within 0.9 of the best,"
  echo "a low ratio is run-to-run noise; where it was not, the tuner chose wrong (see the summary at the end)."
  echo
  echo "### memcpy_bw"
  echo
  echo '```text'
  cat "$tmp/memcpy.txt"
  echo '```'
  for setting in "${settings[@]}"; do
    echo
    echo "### $setting: $(desc "$setting")"
    if [[ -n ${setting_note[$setting]:-} ]]; then
      echo
      echo "${setting_note[$setting]}"
      continue
    fi
    # Ceilings.
    if [[ $setting == shm || $setting == bed ]]; then
      echo
      if [[ $setting == shm ]]; then
        echo "Against single-thread memcpy (copy GB/s from memcpy_bw above; 1 MiB and below against memcpy at 1 MiB, up to"
        echo "16 MiB against 16 MiB, larger against 128 MiB):"
      else
        echo "Against the link rate ($bed_rates = $bed_ceiling GB/s per direction; ring busbw cannot exceed it):"
      fi
      echo
      echo "| R | size | best forced busbw | auto busbw | ceiling (GB/s) | best / ceiling | auto / ceiling |"
      echo "|---|---|---|---|---|---|---|"
      for r in "${rank_list[@]}"; do
        m=$max_all
        ((r >= 8)) && m=$max8
        for s in 1048576 16777216 134217728 268435456; do
          ((s <= m)) || continue
          read -r best balgo auto < <(at_size "$setting" "$r" "$s"; echo) || true
          c=$(ceiling "$setting" "$s")
          [[ -n $best ]] || continue
          echo "| $r | $(human "$s") | $best ($balgo) | $auto | $c | $(awk -v a="$best" -v c="$c" 'BEGIN { printf "%.2f", a / c }') | $(awk -v a="$auto" -v c="$c" 'BEGIN { printf "%.2f", a / c }') |"
        done
      done
    fi
    for r in "${rank_list[@]}"; do
      [[ -n ${block_info["$setting $r"]:-} ]] || continue
      IFS='|' read -r l0 l1 others secs codes <<<"${block_info["$setting $r"]}"
      echo
      echo "#### $setting, $r ranks"
      echo
      echo "Load average \`$l0\` before, \`$l1\` after. Other processes used $others of $ncpu CPUs meanwhile (the"
      echo "machine's user + system time less our runs'; kernel threads that carry our TCP traffic count as others)."
      echo "${secs} s; exit codes $codes. Plot: [$setting-r$r.png]($(link "$plots")/$setting-r$r.png)"
      echo
      table "$setting" "$r"
    done
  done
  echo
  echo "### Where auto is below 0.9 of the best forced algorithm"
  echo
  total=0
  for key in "${!block_info[@]}"; do
    read -r setting r <<<"$key"
    total=$((total + $(json_rows "$plots/json/$setting-r$r-auto.json" | wc -l)))
  done
  if [[ -s $tmp/summary ]]; then
    summary_rows=$(wc -l <"$tmp/summary")
    awk -F'|' -v total="$total" '
      { key = $1 " | " $2; if (!(key in seen)) { seen[key] = 1; keys[++nk] = key }
        item = $3 " " $6 "/" $7 " (" $4 ($4 == $5 ? "" : "; " $5 " best") ")"
        list[key, $8] = list[key, $8] (list[key, $8] == "" ? "" : ", ") item; count[$8]++ }
      END {
        printf "%d of %d sizes are below 0.9 out of place:\n", NR, total
        printf "- %d where the algorithm auto ran was itself below 0.9 of the best when forced, out of place and in\n", count["wrong"]
        printf "  place: the tuner chose wrong there;\n"
        printf "- %d where it was below 0.9 in only one of the two: unconfirmed;\n", count["unconfirmed"]
        printf "- %d where it was within 0.9 of the best when forced (or was the best): auto ran a good schedule and\n", count["noise"]
        printf "  its own run was slower: noise, not the choice.\n\n"
        print "Each entry: size, auto / best out of place / in place, (the algorithm auto ran; the best forced one)."
        print ""
        print "| setting | R | tuner chose wrong | unconfirmed | noise (auto ran a good algorithm) |"
        print "|---|---|---|---|---|"
        for (i = 1; i <= nk; i++) { k = keys[i]; printf "| %s | %s | %s | %s |\n", k, list[k, "wrong"], list[k, "unconfirmed"], list[k, "noise"] }
      }' "$tmp/summary"
  else
    echo "None of $total sizes: auto was within 10% of the best forced algorithm at every size measured."
  fi
} >>"$results"

echo "run_algo_sweep.sh: ${sweep_secs} s; appended to $results; plots in $plots; logs in $logs; $summary_rows sizes below 0.9" >&2
exit $failed
