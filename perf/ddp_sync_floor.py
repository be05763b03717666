#!/usr/bin/env python3
"""ddp_sync_floor: how much of PyTorch DDP's measured communication overhead any backend pays on this machine.

torch_bench.py's overhead is (synced step) - (no_sync step), each the slower rank's mean. A synced step ends when the
slower rank's backward does; a no_sync step does not wait for the other ranks. So with step times that vary from
rank to rank (a shared machine), the overhead holds a floor that is no backend's doing: E[max over ranks of a step]
- max over ranks of E[step], measured here on no_sync steps whose starts are aligned by a barrier. Each step is
timed on every rank, no_sync and synced alternately, on torch_bench.py's MLP (batch 32, 1 torch thread).

Usage: PYTHONPATH=<build>/python /usr/bin/python3 perf/ddp_sync_floor.py BACKEND STEPS WORLD_SIZE
Prints the floor, the overhead as torch_bench.py defines it, and the overhead beyond the floor.
"""
import os, sys, time, multiprocessing, tempfile, statistics
import torch, torch.distributed as dist
import collie.torch  # noqa
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import Mlp

def rank_main(backend, rank, ws, init, steps, q):
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{init}", rank=rank, world_size=ws)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(Mlp())
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 512), torch.randint(0, 10, (32,))
    def step():
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
    def local():
        with model.no_sync(): step()
    for _ in range(5): step(); local()
    out = {"local": [], "sync": []}
    for _ in range(steps):
        for kind, fn in (("local", local), ("sync", step)):
            dist.barrier()
            t0 = time.perf_counter(); fn(); out[kind].append(time.perf_counter() - t0)
    allt = [None] * ws
    dist.all_gather_object(allt, out)
    if rank == 0: q.put(allt)
    dist.barrier(); dist.destroy_process_group()

if __name__ == "__main__":
    backend, steps, ws = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctx = multiprocessing.get_context("fork"); q = ctx.Queue(); init = tempfile.mktemp()
    ps = [ctx.Process(target=rank_main, args=(backend, r, ws, init, steps, q)) for r in range(ws)]
    [p.start() for p in ps]; allt = q.get(timeout=1200); [p.join() for p in ps]
    med = statistics.median
    loc = [[allt[r]["local"][i] for r in range(ws)] for i in range(steps)]
    syn = [[allt[r]["sync"][i] for r in range(ws)] for i in range(steps)]
    mean_max_local = statistics.mean(max(s) for s in loc)
    max_mean_local = max(statistics.mean(allt[r]["local"]) for r in range(ws))
    sync_step = statistics.mean(max(s) for s in syn)  # a synced step ends alike on every rank
    print(f"{backend} ws{ws} {steps} aligned steps: local mean-of-max {mean_max_local*1e3:.2f} ms, "
          f"max-of-means {max_mean_local*1e3:.2f} ms -> floor {(mean_max_local-max_mean_local)*1e3:.2f} ms; "
          f"synced {sync_step*1e3:.2f} ms -> overhead {(sync_step-max_mean_local)*1e3:.2f} ms, "
          f"beyond the floor {(sync_step-mean_max_local)*1e3:.2f} ms; load {open('/proc/loadavg').read().split()[0]}")
