#!/usr/bin/env bash
# Runs env_allreduce as 3 real processes under the variable sets of torchrun, Open MPI and Slurm (set by hand;
# tests/launchers/ runs the real mpirun and srun), so collieCommInitFromEnv is proven on each. Rank 0 hosts the
# bootstrap root at MASTER_ADDR:MASTER_PORT+1 or COLLIE_ROOT_ADDR.
set -u
prog=$1
n=3
# A free port and the one after it (tests/launchers/free_port.py: below the ephemeral range and below collie's ports
# derived from a job id, so no other test's socket takes them meanwhile). MASTER_PORT is the first; the bootstrap root
# binds the second.
free_port() { /usr/bin/python3 "$(dirname "$0")/../../launchers/free_port.py"; }
run_job() {  # name, then a function that prints the env assignments for rank $1
  local name=$1 envfn=$2 pids=() rc=0
  for ((r = 0; r < n; ++r)); do
    env -u COLLIE_RANK -u COLLIE_NRANKS -u COLLIE_ROOT_ADDR -u COLLIE_SECRET -u COLLIE_UNIQUE_ID \
      $($envfn $r) timeout 60 "$prog" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if ((rc)); then echo "launcher_envs: $name FAILED"; return 1; fi
  echo "launcher_envs: $name ok"
}
port=$(free_port)
torchrun_env() { echo "RANK=$1 WORLD_SIZE=$n LOCAL_RANK=$1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"; }
ompi_env() { echo "OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=$n COLLIE_ROOT_ADDR=127.0.0.1:$((port + 1))"; }
slurm_env() { echo "SLURM_PROCID=$1 SLURM_NTASKS=$n SLURM_JOB_ID=4242 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port"; }
fail=0
run_job torchrun torchrun_env || fail=1
port=$(free_port)
run_job "Open MPI" ompi_env || fail=1
port=$(free_port)
run_job Slurm slurm_env || fail=1
exit $fail
