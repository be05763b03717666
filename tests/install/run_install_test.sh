#!/usr/bin/env bash
# Installs the built collie into a scratch prefix, then builds and runs a consumer through find_package(collie)
# and a C program through pkg-config.
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
cmake -S "$src/tests/install/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
export LD_LIBRARY_PATH="$work/prefix/lib:$work/prefix/lib64:${LD_LIBRARY_PATH:-}"
"$work/consumer/consumer_c"
"$work/consumer/consumer_cxx"
pcdir=$(dirname "$(find "$work/prefix" -name collie.pc | head -1)")
export PKG_CONFIG_PATH="$pcdir"
cc "$src/tests/install/consumer/main.c" $(pkg-config --cflags --libs collie) -o "$work/pc_consumer"
"$work/pc_consumer"
# The LibTorch component, when this build installed it: find_package(collie COMPONENTS torch) must define
# collie::collie_torch. Configured only, unless COLLIE_INSTALL_TEST_TORCH_BUILD=1 (a LibTorch translation unit
# takes about a minute to compile, and ddp_train already builds against collie_torch in the tree).
if [[ -f $(find "$work/prefix" -name collieTorchTargets.cmake | head -1) ]]; then
  cmake -S "$src/tests/install/consumer_torch" -B "$work/consumer_torch" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
    >/dev/null
  if [[ ${COLLIE_INSTALL_TEST_TORCH_BUILD:-0} == 1 ]]; then
    cmake --build "$work/consumer_torch" >/dev/null
    "$work/consumer_torch/consumer_torch"
  fi
  echo "find_package(collie COMPONENTS torch) defines collie::collie_torch"
fi
echo "install test passed"
