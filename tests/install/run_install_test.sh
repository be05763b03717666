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
echo "install test passed"
