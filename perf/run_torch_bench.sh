#!/usr/bin/env bash
# torch.distributed on collie vs gloo (perf/torch_bench.py): all_reduce 8 B - 64 MiB and DDP step time, 2 and 4
# ranks, with the date, machine and load average the tables need. Usage: perf/run_torch_bench.sh <build dir>
set -euo pipefail
build=${1:-build-torch}
here=$(cd "$(dirname "$0")" && pwd)
export PYTHONPATH=$(cd "$build" && pwd)/python OMP_NUM_THREADS=1
py=/usr/bin/python3
echo "date: $(date -u '+%Y-%m-%d %H:%M UTC'); machine: $(uname -n), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "torch $($py -c 'import torch; print(torch.__version__)'), python $($py -c 'import sys; print(sys.version.split()[0])')"
for ws in 2 4; do
  echo; echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: $py perf/torch_bench.py allreduce --world-size $ws"
  $py "$here/torch_bench.py" allreduce --world-size "$ws"
done
for ws in 2 4; do
  echo; echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: $py perf/torch_bench.py ddp --world-size $ws"
  $py "$here/torch_bench.py" ddp --world-size "$ws"
done
echo; echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
