#!/usr/bin/env bash
# Installs the Debian packages collie needs to build, test and benchmark. Idempotent; uses sudo when not root.
# When another process holds apt's lock (unattended-upgrades, a parallel install), waits for it, up to
# COLLIE_APT_LOCK_TIMEOUT seconds (default 600), saying so, instead of failing at once.
set -euo pipefail
packages=(build-essential cmake ninja-build pkg-config googletest libgtest-dev libgmock-dev libbenchmark-dev
          iproute2 clang-format libhwloc-dev)
# LibTorch for collie_torch, the DDP tests and examples/ddp_train; PyTorch for perf/ddp_bench_torch.py (large).
packages+=(libtorch-dev python3-torch)
packages+=(gnuplot-nox)  # perf/plot_perf: PNGs of the -J results (png and pngcairo terminals, no X)
packages+=(python3-dev pybind11-dev)  # Python bindings (pybind11 module)
packages+=(clang libclang-rt-14-dev)  # scripts/run_fuzzers.sh: clang and its libFuzzer, ASan and UBSan runtimes
# The UCX transport (InfiniBand/RoCE through UCX; tested here over UCX's tcp and shm) and ucx_info.
packages+=(libucx-dev ucx-utils)
# The real launchers of tests/launchers/: Slurm with munge for a one-host cluster the test starts. Open MPI is not
# installed here (the perf scripts that need it install it); launchers.mpirun skips without it, and CI (.ci/run)
# installs openmpi-bin first so that it runs there.
packages+=(slurm-wlm munge)
# Extra packages a script needs only for itself (perf/run_ucx_compare.sh: Open MPI for perf/peers/).
if [ -n "${COLLIE_EXTRA_PACKAGES:-}" ]; then read -r -a extra <<<"$COLLIE_EXTRA_PACKAGES"; packages+=("${extra[@]}"); fi
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
lock_timeout=${COLLIE_APT_LOCK_TIMEOUT:-600}

# Who holds apt's or dpkg's lock, for the message (empty when nobody visible does).
lock_holders() {
  pgrep -a -x 'apt|apt-get|aptitude|dpkg|unattended-upgr|packagekitd' 2>/dev/null | head -3 | tr '\n' ';' || true
}

# Runs apt-get with DPkg::Lock::Timeout (apt waits for the dpkg frontend lock itself), and retries while the
# failure is a lock that apt did not wait for (older apt, or the lists lock of 'apt-get update').
apt_get() {
  local start=$SECONDS err rc
  err=$(mktemp)
  while true; do
    holders=$(lock_holders)
    if [ -n "$holders" ]; then
      echo "install-deps: apt is busy ($holders); waiting up to ${lock_timeout}s for its lock" >&2
    fi
    rc=0
    $SUDO apt-get -o DPkg::Lock::Timeout="$lock_timeout" "$@" 2> >(tee "$err" >&2) || rc=$?
    wait  # the tee
    if [ $rc -eq 0 ]; then
      rm -f "$err"
      return 0
    fi
    if ! grep -qiE 'could not get lock|unable to lock|is another process using it' "$err" ||
       [ $((SECONDS - start)) -ge "$lock_timeout" ]; then
      rm -f "$err"
      return $rc
    fi
    echo "install-deps: apt's lock is held by another process; retrying in 10 s" \
         "($((lock_timeout - (SECONDS - start))) s left)" >&2
    sleep 10
  done
}

apt_get update -q
apt_get install -y -q --no-install-recommends "${missing[@]}"
