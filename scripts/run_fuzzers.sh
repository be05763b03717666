#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ (clang with ASan and UBSan, in build-fuzz/ or
# $COLLIE_FUZZ_BUILD_DIR) and runs each for a bounded time: scripts/run_fuzzers.sh [seconds-per-harness [name...]]
# (default 45 s each, every harness). Each starts from a temporary copy of its seed corpus
# (tests/fuzz/corpus/<name>/) and of its past crashes (tests/fuzz/regressions/<name>/), so the repository is
# never written to. A crash, a leak, a failed FUZZ_CHECK, undefined behaviour, an exception other than
# collie::Error or an input slower than 10 s fails the harness; libFuzzer's reproducer is kept under
# <build>/fuzz-artifacts/<name>/ and named in the output (CONTRIBUTING.md says how it becomes a regression test).
# Harnesses run side by side, COLLIE_FUZZ_JOBS at once (default: one per CPU). Prints a line per harness (runs,
# executions per second, coverage), then "N passed, M failed"; exits 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-45}
shift || true
build=${COLLIE_FUZZ_BUILD_DIR:-build-fuzz}

mkdir -p "$build"
echo "run_fuzzers: configuring and building $build (clang, -fsanitize=fuzzer,address,undefined)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DCOLLIE_BUILD_FUZZERS=ON -DCOLLIE_BUILD_TESTS=OFF -DCOLLIE_BUILD_PERF=OFF \
  -DCOLLIE_BUILD_TOOLS=OFF -DCOLLIE_BUILD_EXAMPLES=OFF -DCOLLIE_WITH_CUDA=OFF -DCOLLIE_WITH_TORCH=OFF \
  -DCOLLIE_WITH_TORCH_BACKEND=OFF -DCOLLIE_WITH_NCCL_ABI=OFF >"$build/fuzz-configure.log" 2>&1 ||
  { cat "$build/fuzz-configure.log"; exit 1; }
cmake --build "$build" --target collie_fuzzers -j2

names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for src in tests/fuzz/fuzz_*.cpp; do
    n=$(basename "$src" .cpp)
    names+=("${n#fuzz_}")
  done
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One harness: its report goes to $work/<name>.report, its exit status to $work/<name>.rc.
fuzzOne() {
  local name=$1
  local bin="$build/tests/fuzz/fuzz_$name" corpus="$work/$name" artifacts="$build/fuzz-artifacts/$name"
  local log="$work/$name.log" report="$work/$name.report" rc=0
  mkdir -p "$corpus" "$artifacts"
  cp tests/fuzz/corpus/"$name"/* "$corpus"/ 2>/dev/null || true
  if [ -d tests/fuzz/regressions/"$name" ]; then
    cp tests/fuzz/regressions/"$name"/* "$corpus"/ 2>/dev/null || true
  fi
  # detect_leaks: a parser that leaks on bad input fails too. -timeout: one input slower than 10 s is a hang.
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$corpus" >"$log" 2>&1 || rc=$?
  local runs speed cov
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  if [ $rc -eq 0 ]; then
    printf 'run_fuzzers: %-18s ok      %s s, %s runs, %s exec/s, %s, corpus %s -> %s files\n' "$name" "$seconds" \
      "${runs:-?}" "${speed:-?}" "${cov:-cov: ?}" "$(ls tests/fuzz/corpus/"$name" | wc -l)" "$(ls "$corpus" | wc -l)" \
      >"$report"
  else
    {
      printf 'run_fuzzers: %-18s FAILED (exit %d) after %s runs; the log ends:\n' "$name" "$rc" "${runs:-?}"
      tail -40 "$log" | sed 's/^/    /'
      echo "    reproducer(s) in $artifacts/: $(ls "$artifacts" | tr '\n' ' ')"
      echo "    rerun one: $bin <file>; keep it as a regression: cp <file> tests/fuzz/regressions/$name/"
    } >"$report"
  fi
  echo "$rc" >"$work/$name.rc"
}

# The harnesses run side by side, one per CPU (each is one single-threaded process).
jobs=${COLLIE_FUZZ_JOBS:-$(nproc)}
for name in "${names[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  fuzzOne "$name" &
done
wait
passed=0
failed=0
failures=()
for name in "${names[@]}"; do
  cat "$work/$name.report"
  if [ "$(cat "$work/$name.rc" 2>/dev/null || echo 1)" -eq 0 ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("$name")
  fi
done
echo "run_fuzzers: $passed passed, $failed failed${failures:+ (${failures[*]})}"
[ "$failed" -eq 0 ]
