#!/usr/bin/env bash
# Checks that the C, C++ and CUDA sources are clang-formatted (.clang-format at the top of the tree): runs
# clang-format --dry-run --Werror over src include tools perf tests examples (*.cpp *.hpp *.h *.cu *.c), prints
# each offending file, and exits 1 when any is unformatted (0 when all are, 2 when clang-format is missing).
# Changes nothing; to fix a file: clang-format -i FILE.
#   scripts/check_format.sh [-v] [path...]    (-v: also show clang-format's diagnostics; paths: default the above)
set -uo pipefail
cd "$(dirname "$0")/.."
verbose=0
if [ "${1:-}" = "-v" ]; then
  verbose=1
  shift
fi
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "check_format: $clang_format not found (apt-get install clang-format, or set CLANG_FORMAT)" >&2
  exit 2
fi
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(src include tools perf tests examples)
mapfile -t files < <(find "${dirs[@]}" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' \
                       -o -name '*.c' \) 2>/dev/null | sort)
bad=0
for f in "${files[@]}"; do
  if ! out=$("$clang_format" --dry-run --Werror "$f" 2>&1); then
    echo "$f"
    [ $verbose -eq 1 ] && echo "$out" | head -20
    bad=$((bad + 1))
  fi
done
if [ $bad -gt 0 ]; then
  echo "check_format: $bad of ${#files[@]} files are not clang-formatted (fix with clang-format -i FILE)" >&2
  exit 1
fi
echo "check_format: all ${#files[@]} files are clang-formatted"
