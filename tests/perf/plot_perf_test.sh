#!/usr/bin/env bash
# The plot command end to end: two real -J results (2 ranks, ring and tree forced) drawn by perf/plot_perf into one
# PNG; checks the file is a PNG of plausible size and that a missing input is a clear error. Skips (77) without
# gnuplot.
#   plot_perf_test.sh SOURCE_DIR COLLIERUN PERF_DIR
set -euo pipefail
src=$1 collierun=$2 perf=$3
command -v gnuplot >/dev/null || { echo "gnuplot not installed (Debian: gnuplot-nox); skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for a in ring tree; do
  "$collierun" -n 2 "$perf/all_reduce_perf" -b 8 -e 1M -f 8 -A "$a" -J "$tmp/$a.json" >/dev/null
done
"$src/perf/plot_perf" -t "plot_perf test" -o "$tmp/out.png" "$tmp/ring.json" "$tmp/tree.json"
magic=$(od -An -tx1 -N8 "$tmp/out.png" | tr -d ' \n')
[[ $magic == 89504e470d0a1a0a ]] || { echo "FAIL: $tmp/out.png is not a PNG (magic $magic)"; exit 1; }
bytes=$(stat -c %s "$tmp/out.png")
((bytes > 2000)) || { echo "FAIL: PNG of only $bytes bytes"; exit 1; }
if "$src/perf/plot_perf" -o "$tmp/bad.png" "$tmp/nosuch.json" 2>"$tmp/err"; then
  echo "FAIL: a missing input file was accepted"
  exit 1
fi
grep -q nosuch "$tmp/err" || { echo "FAIL: the error does not name the missing file: $(cat "$tmp/err")"; exit 1; }
echo "plot_perf drew a $bytes-byte PNG from 2 JSON results and refused a missing file: $(head -c 200 "$tmp/err")"
