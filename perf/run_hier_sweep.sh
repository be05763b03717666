#!/usr/bin/env bash
# run_hier_sweep.sh: AllReduce (or HIER_COLL: allgather, reducescatter) across the hosts of the test bed
# (tests/testbed/testbed.sh) with every algorithm forced and with the tuner's choice (issue 10 item 7): a table per
# host shape (busbw per size and algorithm, auto against the best forced one, hier against the flat ring) in
# Markdown, and a PNG per shape.
#
#   perf/run_hier_sweep.sh [BUILD_DIR] [OUT_DIR]   (default: build, /tmp/collie-hier-sweep-STAMP; needs root)
#
# For each shape HxL in HIER_SHAPES (default "4x2 2x4") it makes a bed of H hosts whose links are all HIER_RATE
# (default 1gbit) and runs H*L ranks, rank r on host r mod H (testbed.sh rank-exec's placement: the ranks of a
# host are not ring neighbours), for each algorithm in HIER_ALGOS (default "ring tree rhd direct hier auto"; for
# allgather and reducescatter "ring rhd hier auto", with all_gather_perf or reduce_scatter_perf):
#     collierun -n H*L -- testbed.sh rank-exec BED -- all_reduce_perf -A ALGO -b MIN -e MAX -f 2 -n N -w W -c C -J ..
# in three pieces, so that the bed's slow links do not make big messages take most of the time:
#     8 B .. 64 KiB: -n 20 -w 3 -c 1;   128 KiB .. 8 MiB: -n 5 -w 1 -c 1;   16 MiB .. HIER_MAX: -n 2 -w 1 -c 0
# each repeated HIER_REPEAT times (default 2; 1 for the large piece), keeping each size's fastest run (HIER_KEEP=median:
# the median run instead); HIER_MIN (e.g. 1M) starts the sweep there, leaving out the pieces below. HIER_PIECES
# replaces the pieces: "LO HI ITERS WARMUP CHECK REPEATS" per piece, pieces separated by ';' (e.g.
# "8 1M 30 3 1 5; 16M 64M 2 1 0 2" for the small sizes and a few large ones). direct sends
# n-1 whole buffers per rank and stops at HIER_DIRECT_MAX (default 8M). The algorithms take turns piece by piece.
# HIER_MERGE_ONLY=1 skips the runs and rebuilds the tables and plots from the JSON already in OUT_DIR.
# OUT_DIR gets the merged JSON per shape and algorithm (rows of the kept runs; "algo_ran": what the communicator ran
# per size in them, "algo_runs": in every run), the logs, hier-<shape>.md (the table) and hier-<shape>.png
# (hier-<coll>-<shape>.* for allgather and reducescatter).
set -euo pipefail

build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
[[ -d $build ]] || build=$root/$build
build=$(cd "$build" && pwd)
out=${2:-/tmp/collie-hier-sweep-$(date -u +%Y%m%d-%H%M)}
mkdir -p "$out"
collierun=$build/tools/collierun
coll=${HIER_COLL:-allreduce}
case $coll in
  allreduce) perf=$build/perf/all_reduce_perf title=AllReduce tag=hier default_algos="ring tree rhd direct hier auto" ;;
  allgather) perf=$build/perf/all_gather_perf title=AllGather tag=hier-allgather default_algos="ring rhd hier auto" ;;
  reducescatter)
    perf=$build/perf/reduce_scatter_perf title=ReduceScatter tag=hier-reducescatter default_algos="ring rhd hier auto"
    ;;
  *) echo "run_hier_sweep.sh: HIER_COLL=$coll: expected allreduce, allgather or reducescatter" >&2; exit 2 ;;
esac
testbed=$root/tests/testbed/testbed.sh
for exe in "$collierun" "$perf"; do
  [[ -x $exe ]] || { echo "run_hier_sweep.sh: $exe not built" >&2; exit 2; }
done
if ! why=$("$testbed" check 2>&1); then
  echo "run_hier_sweep.sh: no test bed here: $why" >&2
  exit 77
fi

read -r -a shapes <<<"${HIER_SHAPES:-4x2 2x4}"
read -r -a algos <<<"${HIER_ALGOS:-$default_algos}"
rate=${HIER_RATE:-1gbit}
max=${HIER_MAX:-256M}
direct_max=${HIER_DIRECT_MAX:-8M}
repeat=${HIER_REPEAT:-2}
pieces=("8 64K 20 3 1 $repeat" "128K 8M 5 1 1 $repeat" "16M $max 2 1 0 1")
if [[ -n ${HIER_PIECES:-} ]]; then IFS=';' read -r -a pieces <<<"$HIER_PIECES"; fi
keep=${HIER_KEEP:-min}
[[ $keep == min || $keep == median ]] || { echo "run_hier_sweep.sh: HIER_KEEP=$keep: min or median" >&2; exit 2; }

to_bytes() {
  local v=${1^^}
  case $v in
    *K) echo $((${v%K} << 10)) ;;
    *M) echo $((${v%M} << 20)) ;;
    *G) echo $((${v%G} << 30)) ;;
    *) echo $((v)) ;;
  esac
}

if [[ -n ${HIER_MIN:-} ]]; then  # leave out the pieces below HIER_MIN, start the one that holds it there
  kept=()
  for piece in "${pieces[@]}"; do
    read -r lo hi rest <<<"$piece"
    (($(to_bytes "$hi") < $(to_bytes "$HIER_MIN"))) && continue
    (($(to_bytes "$lo") < $(to_bytes "$HIER_MIN"))) && lo=$HIER_MIN
    kept+=("$lo $hi $rest")
  done
  pieces=("${kept[@]}")
fi

bed=""
cleanup() { if [[ -n $bed ]]; then "$testbed" down "$bed" || true; fi; }
trap cleanup EXIT
port=$((29600 + $$ % 200))

for shape in "${shapes[@]}"; do
  [[ -z ${HIER_MERGE_ONLY:-} ]] || break
  hosts=${shape%x*}
  per=${shape#*x}
  n=$((hosts * per))
  bed=hs$$
  TESTBED_RATES=$rate "$testbed" up "$bed" "$hosts" >"$out/bed-$shape.txt"
  echo "== $shape: $hosts hosts x $per ranks, links $rate, load $(cut -d' ' -f1-3 /proc/loadavg)"
  for piece in "${pieces[@]}"; do
    read -r lo hi iters warm check reps <<<"$piece"
    for ((rep = 0; rep < reps; ++rep)); do
      for algo in "${algos[@]}"; do
        if [[ $algo == direct ]] && (($(to_bytes "$lo") > $(to_bytes "$direct_max"))); then continue; fi
        port=$((port + 1))
        name="$tag-$shape-$algo-$lo-$rep"
        start=$(date +%s)
        if env -u COLLIE_ALGO COLLIE_ROOT_ADDR="10.213.0.1:$port" "$collierun" --timeout 900 -n "$n" -- \
          "$testbed" rank-exec "$bed" -- "$perf" -A "$algo" -b "$lo" -e "$hi" -f 2 -n "$iters" -w "$warm" \
          -c "$check" -J "$out/$name.json" >"$out/$name.log" 2>&1; then
          echo "   $name: $(($(date +%s) - start)) s"
        else
          echo "   $name: FAILED (exit $?, see $out/$name.log)"
        fi
      done
    done
  done
  "$testbed" down "$bed"
  bed=""
done

# Merge the pieces (fastest out-of-place run per size), write the tables and plots.
python3 - "$out" "$rate" "$tag" "$coll" "$keep" "${shapes[@]}" -- "${algos[@]}" <<'EOF'
import glob, json, os, re, sys
out, rate, tag, coll, keep = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
rest = sys.argv[6:]
shapes, algos = rest[:rest.index('--')], rest[rest.index('--') + 1:]
def human(s):
    for u in ['B', 'KiB', 'MiB', 'GiB']:
        if s < 1024: return f"{s:g} {u}"
        s /= 1024
for shape in shapes:
    hosts, per = map(int, shape.split('x'))
    merged = {}
    for algo in algos:
        runs, doc = {}, None  # size -> every run's row
        for f in sorted(glob.glob(f"{out}/{tag}-{shape}-{algo}-*.json")):
            try:
                d = json.load(open(f))
            except Exception:
                continue
            doc = doc or d
            for r in d['rows']:
                runs.setdefault(r['size'], []).append(r)
        if not doc: continue
        rows = {}
        for size, rs in runs.items():
            rs.sort(key=lambda r: r['out_of_place']['time_us'])
            rows[size] = rs[0] if keep == 'min' else rs[(len(rs) - 1) // 2]
        doc['rows'] = [rows[s] for s in sorted(rows)]
        doc['runs_per_size'] = {str(s): len(runs[s]) for s in sorted(runs)}
        # What the communicator ran (out of place) in the kept run; where runs differ (auto), every run's choice.
        doc['algo_ran'] = {str(s): rows[s].get('algorithm', '?').split('/')[0] for s in sorted(rows)}
        doc['algo_runs'] = {str(s): sorted(r.get('algorithm', '?').split('/')[0] for r in runs[s]) for s in sorted(runs)}
        doc['transport'] = f"bed {shape}"
        json.dump(doc, open(f"{out}/{tag}-{shape}-{algo}.json", 'w'), indent=1)
        merged[algo] = doc
    n = hosts * per
    factor = (2 if coll == 'allreduce' else 1) * (n - 1) / n
    def bw(algo, size):
        d = merged.get(algo)
        if not d: return None
        for r in d['rows']:
            if r['size'] == size:
                return size / (r['out_of_place']['time_us'] * 1e-6) / 1e9 * factor
        return None
    sizes = sorted({r['size'] for d in merged.values() for r in d['rows']})
    forced = [a for a in algos if a != 'auto']
    # "choice / best": the forced run of the algorithm auto chose against the best forced one, which tells a wrong
    # choice from run-to-run spread (auto / best compares two different runs).
    lines = [f"| size | " + " | ".join(algos) + " | best forced | auto ran | auto / best | choice / best | hier / ring |",
             "|---|" + "---|" * (len(algos) + 5)]
    for s in sizes:
        vals = {a: bw(a, s) for a in algos}
        best = max((a for a in forced if vals[a]), key=lambda a: vals[a], default=None)
        ratio = vals['auto'] / vals[best] if best and vals.get('auto') else None
        hr = vals['hier'] / vals['ring'] if vals.get('hier') and vals.get('ring') else None
        ran = '-'
        if 'auto' in merged:
            ran = merged['auto']['algo_ran'].get(str(s), '?')
            every = sorted(set(merged['auto']['algo_runs'].get(str(s), [])))
            if len(every) > 1: ran += ' (runs: ' + ', '.join(every) + ')'
        cell = lambda v: f"{v:.4f}" if v is not None else "-"
        flag = lambda r, lim, txt: (f"{r:.2f}" + (f" **{txt}**" if r < lim else "")) if r else "-"
        chosen = ran.split(' ')[0]
        choice = vals[chosen] / vals[best] if best and vals.get(chosen) else None
        lines.append(f"| {human(s)} | " + " | ".join(cell(vals[a]) for a in algos) +
                     f" | {best} | {ran} | {flag(ratio, 0.9, 'below 0.9')} | {flag(choice, 0.9, 'below 0.9')} | " +
                     (flag(hr, 1.5, 'below 1.5') if s >= 1 << 20 else (f"{hr:.2f}" if hr else "-")) + " |")
    open(f"{out}/{tag}-{shape}.md", 'w').write("\n".join(lines) + "\n")
    print(f"\n{shape}: busbw GB/s\n" + "\n".join(lines))
EOF
for shape in "${shapes[@]}"; do
  files=()
  for algo in "${algos[@]}"; do [[ -f $out/$tag-$shape-$algo.json ]] && files+=("$out/$tag-$shape-$algo.json"); done
  hosts=${shape%x*}
  per=${shape#*x}
  if command -v gnuplot >/dev/null && ((${#files[@]})); then
    "$here/plot_perf" --both -t "$title, $hosts hosts x $per ranks (rank r on host r mod $hosts), $rate links" \
      -o "$out/$tag-$shape.png" "${files[@]}" || echo "run_hier_sweep.sh: plot of $shape failed" >&2
  fi
done
echo "run_hier_sweep.sh: results in $out"
