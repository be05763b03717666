#!/usr/bin/env bash
# Installs the built collie into a scratch prefix, then, as a downstream user would (no LD_LIBRARY_PATH anywhere):
#  1. builds a consumer through find_package(collie) with the compiler's DEFAULT C++ standard (the exported target
#     must bring C++20) plus the examples (examples/allreduce_c.c, allreduce_cpp.cpp), and runs them, the examples
#     under the installed collierun;
#  2. builds a C program and the C example through pkg-config and runs them (the .pc's rpath must find
#     libcollie.so.0 in the prefix), the example under the installed collierun;
#  3. checks that torch_ddp.hpp and the torch component are installed only by builds with LibTorch.
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset LD_LIBRARY_PATH
fail() {
  echo "install test FAILED: $*" >&2
  exit 1
}
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
collierun=$prefix/bin/collierun
[[ -x $collierun ]] || fail "collierun was not installed in $prefix/bin"

# 1. find_package(collie), no CMAKE_CXX_STANDARD (an empty one overrides any default a toolchain file might set).
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
  -DCOLLIE_EXAMPLES_DIR="$src/examples" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
grep -q 'CMAKE_CXX_STANDARD:' "$work/consumer/CMakeCache.txt" && fail "the consumer sets CMAKE_CXX_STANDARD"
cmake --build "$work/consumer" >/dev/null || fail "the find_package consumer does not build with the default standard"
grep -q -- '-std=[a-z+]*2[0a-z]' "$work/consumer/compile_commands.json" ||
  fail "collie::collie did not raise the consumer's C++ standard to C++20"
"$work/consumer/consumer_c"
"$work/consumer/consumer_cxx"
out=$("$collierun" -n 3 "$work/consumer/allreduce_c")
[[ $(grep -c 'allreduce_c: rank [0-2] of 3: sum 6 (expected 6): ok' <<<"$out") == 3 ]] ||
  fail "the C example (find_package) under collierun -n 3 printed: $out"
out=$("$collierun" -n 3 "$work/consumer/allreduce_cpp")
[[ $(grep -c 'allreduce_cpp: rank [0-2] of 3: sum 6, async sum 6: ok' <<<"$out") == 3 ]] ||
  fail "the C++ example (find_package) under collierun -n 3 printed: $out"
echo "find_package: consumer and examples built with the compiler's default standard and ran"

# 2. pkg-config: compile and link flags only; the binaries must run without LD_LIBRARY_PATH.
pcdir=$(dirname "$(find "$prefix" -name collie.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
cc "$src/tests/install/consumer/main.c" $(pkg-config --cflags --libs collie) -o "$work/pc_consumer"
"$work/pc_consumer" || fail "the pkg-config consumer does not run without LD_LIBRARY_PATH (rpath?)"
cc "$src/examples/allreduce_c.c" $(pkg-config --cflags --libs collie) -o "$work/pc_allreduce_c"
out=$("$collierun" -n 2 "$work/pc_allreduce_c")
[[ $(grep -c 'allreduce_c: rank [01] of 2: sum 3 (expected 3): ok' <<<"$out") == 2 ]] ||
  fail "the C example (pkg-config) under collierun -n 2 printed: $out"
echo "pkg-config: consumer and C example built and ran without LD_LIBRARY_PATH"

# 3. The LibTorch component, when this build installed it: find_package(collie COMPONENTS torch) must define
# collie::collie_torch. Configured only, unless COLLIE_INSTALL_TEST_TORCH_BUILD=1 (a LibTorch translation unit
# takes about a minute to compile, and ddp_train already builds against collie_torch in the tree).
if [[ -f $(find "$prefix" -name collieTorchTargets.cmake | head -1) ]]; then
  [[ -f $prefix/include/collie/torch_ddp.hpp ]] || fail "the torch component is installed without torch_ddp.hpp"
  cmake -S "$src/tests/install/consumer_torch" -B "$work/consumer_torch" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" \
    >/dev/null
  if [[ ${COLLIE_INSTALL_TEST_TORCH_BUILD:-0} == 1 ]]; then
    cmake --build "$work/consumer_torch" >/dev/null
    "$work/consumer_torch/consumer_torch"
  fi
  echo "find_package(collie COMPONENTS torch) defines collie::collie_torch"
else
  [[ ! -e $prefix/include/collie/torch_ddp.hpp ]] || fail "torch_ddp.hpp is installed by a build without LibTorch"
fi
echo "install test passed"
