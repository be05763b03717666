#!/usr/bin/env bash
# Installs the Debian packages collie needs to build, test and benchmark. Idempotent; uses sudo when not root.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config googletest libgtest-dev libgmock-dev libbenchmark-dev
          iproute2 clang-format libhwloc-dev)
# LibTorch for collie_torch, the DDP tests and examples/ddp_train; PyTorch for perf/ddp_bench_torch.py (large).
packages+=(libtorch-dev python3-torch)
packages+=(gnuplot-nox)  # perf/plot_perf: PNGs of the -J results (png and pngcairo terminals, no X)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
