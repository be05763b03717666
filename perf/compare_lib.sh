# compare_lib.sh: shell pieces the side-by-side perf scripts share (sourced by run_ab.sh, run_ucx_compare.sh and
# run_mpi_compare.sh; not run on its own).

# The median of the numbers on stdin, one a line.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Open MPI (openmpi-bin, libopenmpi-dev) is needed by the peer comparisons only, not by the build or the tests:
# installed here on first use (scripts/install-deps.sh, with sudo when not root), and perf/peers/mpi_allreduce built.
ensure_open_mpi() {  # build_dir
  local here
  here=$(dirname "${BASH_SOURCE[0]}")
  # mpicc alone is not enough: openmpi-bin's alternatives can leave it without mpi.h (libopenmpi-dev).
  if ! command -v mpirun >/dev/null || ! dpkg -s libopenmpi-dev >/dev/null 2>&1; then
    COLLIE_EXTRA_PACKAGES="openmpi-bin libopenmpi-dev" "$here/../scripts/install-deps.sh" >&2
  fi
  if [ ! -x "$1/perf/mpi_allreduce" ] || [ "$here/peers/mpi_allreduce.c" -nt "$1/perf/mpi_allreduce" ]; then
    cmake "$1" >/dev/null && cmake --build "$1" --target mpi_allreduce >&2
  fi
}

# Where and when: date, commit, kernel, CPU, load average (as comment lines for a report).
print_machine() {
  echo "# date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "# machine: $(uname -srm); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(nproc) CPUs"
  echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}
