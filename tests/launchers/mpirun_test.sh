#!/usr/bin/env bash
# mpirun_test.sh: collie ranks started by Debian's Open MPI mpirun (openmpi-bin), not by its variables set by hand.
# Runs `mpirun -n 4` of env_allreduce (a collie program: init from the launcher's environment, two AllReduces
# checked element by element) twice:
#   1. with no address at all: one host, so the ranks meet on 127.0.0.1 at a port derived from Open MPI's job id
#      (src/core/launch_env.hpp), which the ranks' INFO log must say;
#   2. with MASTER_ADDR/MASTER_PORT passed by `mpirun -x`, as NCCL and torch.distributed users pass them.
# Each must print "env_allreduce ok: rank R of 4" once for every R in 0..3 and exit 0. mpirun is run under
# `timeout` and takes its ranks down with it. Skips (exit 77) saying why where mpirun is missing.
#   mpirun_test.sh PATH/TO/collie_env_allreduce
set -u
prog=${1:?usage: mpirun_test.sh PATH/TO/collie_env_allreduce}
ranks=4
command -v mpirun >/dev/null || { echo "SKIP: mpirun not installed (apt-get install openmpi-bin)"; exit 77; }
# Root may run mpirun only when it says so (containers, CI).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Nothing of another launcher or of a hand-set address leaks in from the caller.
unset COLLIE_RANK COLLIE_NRANKS COLLIE_ROOT_ADDR COLLIE_UNIQUE_ID COLLIE_SECRET MASTER_ADDR MASTER_PORT RANK WORLD_SIZE
unset SLURM_PROCID SLURM_NTASKS SLURM_JOB_ID PMI_RANK PMI_SIZE
# Ranks orphaned when `timeout -k` takes mpirun down fail within a minute instead of lingering COLLIE_TIMEOUT's
# default 10 minutes.
export COLLIE_TIMEOUT=60000
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

want=$(for ((r = 0; r < ranks; ++r)); do echo "env_allreduce ok: rank $r of $ranks"; done)
run() {  # what, expect "derived" or "given", mpirun options...
  local what=$1 expect=$2 rc=0
  shift 2
  COLLIE_DEBUG=INFO timeout -k 5 40 mpirun --oversubscribe --bind-to none -n "$ranks" "$@" "$prog" \
    >"$out/stdout" 2>"$out/stderr" || rc=$?
  local got derived=given
  got=$(grep '^env_allreduce ok' "$out/stdout" | sort)
  grep -q 'derived from Open MPI' "$out/stderr" && derived=derived
  if [[ $rc -ne 0 || $got != "$want" || $derived != "$expect" ]]; then
    echo "FAILED: mpirun -n $ranks ($what): exit $rc; meeting point $derived (want $expect); ok lines:"
    echo "${got:-(none)}"
    echo "--- stdout"; cat "$out/stdout"; echo "--- stderr (last lines)"; tail -30 "$out/stderr"
    return 1
  fi
  echo "mpirun -n $ranks ($what): every rank ok, meeting point $derived"
}
fail=0
run "no address: Open MPI's variables" derived || fail=1
port=$(python3 "$(dirname "$0")/free_port.py")  # and port + 1, where the meeting point is served: free, below
# the ephemeral range (a random port there clashed with a parallel test's connection: bind failed, EADDRINUSE)
run "-x MASTER_ADDR -x MASTER_PORT" given -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port || fail=1
echo "mpirun_test: $([[ $fail -eq 0 ]] && echo ok || echo FAILED)"
exit $fail
