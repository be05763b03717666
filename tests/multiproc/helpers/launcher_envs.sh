#!/usr/bin/env bash
# Runs env_allreduce as 3 real processes under the variable sets of torchrun, Open MPI and Slurm (set by hand;
# tests/launchers/ runs the real mpirun and srun), so collieCommInitFromEnv is proven on each. Rank 0 hosts the
# bootstrap root at MASTER_ADDR:MASTER_PORT+1 or COLLIE_ROOT_ADDR.
set -u
prog=$1
n=3
# A port the root can bind now, below Linux's ephemeral range (32768 up) so that no test's outgoing connection takes
# it meanwhile (a random one in 20000-49999 once met such a connection: "Address already in use").
free_port() {
  /usr/bin/python3 -c '
import random, socket
for _ in range(500):
    p = random.randrange(20001, 32000)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p))
    except OSError:
        continue
    finally:
        s.close()
    print(p)
    break'
}
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
torchrun_env() { echo "RANK=$1 WORLD_SIZE=$n LOCAL_RANK=$1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port - 1))"; }
ompi_env() { echo "OMPI_COMM_WORLD_RANK=$1 OMPI_COMM_WORLD_SIZE=$n COLLIE_ROOT_ADDR=127.0.0.1:$port"; }
slurm_env() { echo "SLURM_PROCID=$1 SLURM_NTASKS=$n SLURM_JOB_ID=4242 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port - 1))"; }
fail=0
run_job torchrun torchrun_env || fail=1
port=$(free_port)
run_job "Open MPI" ompi_env || fail=1
port=$(free_port)
run_job Slurm slurm_env || fail=1
exit $fail
