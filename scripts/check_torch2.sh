#!/usr/bin/env bash
# collie's torch backend against torch 2.x: builds it (and the LibTorch DDP adapter) in a Debian 13 (trixie) root
# with Debian's python3-torch and libtorch-dev 2.6, made here by debootstrap, and runs the torch tests there (CTest
# labels torch and ddp: PyTorch 2.6's own distributed suite at world size 2 and its *_group tests at 3, the cases
# of tests/torch/test_backend.py, collie's LibTorch DDP tests and example). Debian 12, which the README's commands and CI use, ships torch 1.13 only; this is
# how the same source is checked against torch 2.x's c10d::Backend.
#
# Usage (as root: debootstrap, chroot and mounts):  scripts/check_torch2.sh [--prepare] [ROOT]
#   ROOT   where the trixie root lives (default build-torch2/root, about 2.5 GB); made on the first run, reused after.
#   --prepare   only make the root and install its packages (network and disk, little CPU), then stop: CI runs this
#               in the background from its start, so that the check at its end finds the root ready.
#   COLLIE_TORCH2_MIRROR   the Debian mirror (default http://deb.debian.org/debian)
# Prints "N passed, N failed" of the torch tests last; exits 0 only when every one passed.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
mode=check
if [ "${1:-}" = --prepare ]; then mode=prepare; shift; fi
root=$(realpath -m "${1:-$repo/build-torch2/root}")
mirror=${COLLIE_TORCH2_MIRROR:-http://deb.debian.org/debian}
packages=(build-essential cmake ninja-build pkg-config libgtest-dev libgmock-dev libhwloc-dev iproute2
          libtorch-dev python3-torch python3-dev pybind11-dev python3-numpy python3-setuptools)

if [ "$(id -u)" -ne 0 ]; then
  echo "check_torch2: needs root (debootstrap, chroot, mount)" >&2
  exit 2
fi
marker="$root/.collie-torch2-root"  # this script made the root: only then does it replace $root/src
if [ ! -e "$marker" ]; then
  if [ -e "$root" ] && [ -n "$(ls -A "$root")" ]; then
    echo "check_torch2: $root exists and was not made by this script; give another ROOT" >&2
    exit 2
  fi
  command -v debootstrap >/dev/null || COLLIE_EXTRA_PACKAGES=debootstrap "$repo/scripts/install-deps.sh" >/dev/null
  echo "== debootstrap trixie into $root"
  mkdir -p "$root"
  debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
    { tail -20 "$root.debootstrap.log" >&2; exit 1; }
  touch "$marker"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"

if [ "$mode" = check ]; then
  echo "== the source tree (tracked and untracked, not ignored) into $root/src"
  rm -rf "$root/src" && mkdir -p "$root/src"
  git -C "$repo" ls-files -z --cached --others --exclude-standard |
    (cd "$repo" && tar --null -T - -cf - 2>/dev/null) | tar -xf - -C "$root/src"
fi

# The rest (collie-check.sh, written into the root) runs in a mount namespace of its own: /proc, /dev and /sys are
# bound into the root for the chroot and vanish with the namespace when this script ends, however it ends.
cat >"$root/collie-check.sh" <<'EOF'
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
missing=()
for p in $PACKAGES; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== apt-get install ${missing[*]}"
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ "$MODE" = prepare ]; then echo "== the root is ready"; exit 0; fi
echo "== torch $(python3 -c 'import torch; print(torch.__version__)'), $(g++ --version | head -1)"
cmake -S /src -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOLLIE_WITH_CUDA=OFF -DCOLLIE_WITH_UCX=OFF \
  -DCOLLIE_BUILD_PERF=OFF -DCOLLIE_WITH_TORCH=ON -DCOLLIE_WITH_TORCH_BACKEND=ON >/build.configure.log 2>&1 ||
  { tail -30 /build.configure.log; exit 1; }
grep -E 'COLLIE_WITH_TORCH' /build.configure.log
echo "== build: the torch backend (collie.torch), the LibTorch DDP adapter, its tests and example"
ninja -C /build -j2 collie_torch_backend collie_ddp_tests ddp_train collierun | tail -1
echo "== ctest -L 'torch|ddp'"
ctest --test-dir /build -L 'torch|ddp' --output-on-failure -j2 | tee /build.ctest.log | grep -E '^ *[0-9]+/[0-9]+ Test|tests passed'
EOF
status=0
unshare --mount --propagation private bash -c '
  set -e
  for d in proc sys dev; do mount --rbind "/$d" "$1/$d"; done
  mkdir -p "$1/build"
  PACKAGES="$2" MODE="$3" chroot "$1" /bin/bash /collie-check.sh' _ "$root" "${packages[*]}" "$mode" || status=$?
[ "$mode" = prepare ] && exit "$status"
log="$root/build.ctest.log"
passed=$(grep -cE 'Test +#[0-9]+: .* Passed' "$log" 2>/dev/null || true)
failed=$(grep -cE 'Test +#[0-9]+: .*\*\*\*(Failed|Timeout|Exception|Not Run)' "$log" 2>/dev/null || true)
echo "torch 2.x (labels torch, ddp): ${passed:-0} passed, ${failed:-0} failed"
[ "$status" -eq 0 ] && [ "${failed:-0}" -eq 0 ] && [ "${passed:-0}" -gt 0 ]
