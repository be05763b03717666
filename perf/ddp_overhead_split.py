#!/usr/bin/env python3
"""ddp_overhead_split: PyTorch DDP's communication overhead on one backend, per step and per thread, on a shared host.

torch_bench.py's overhead (synced step minus no_sync step, each a separate timed loop) cannot resolve a few ms when
other jobs load the machine. This tool pairs the steps instead: no_sync (local), synced with a no-op comm hook (DDP's
own bucket work, no communication) and synced (sync) steps alternate, each started by a barrier and timed on every
rank; a step of the job takes the slowest rank's time. It prints
  - wall: the medians over steps of local, noop and sync, and overhead = median(sync) - median(local);
  - CPU per step of each kind, read from every thread's CPU clock (ns): the main thread, and the other threads
    (the backend's: collie's progress thread and future waiter, gloo's workers), as sync minus local. The CPU time
    a step adds is what load does not blur: on a host whose CPUs the ranks fill, each ms of it is a ms of wall time.
Model: torch_bench.py's (mlp or conv), batch 32 per rank, 1 torch thread.

Usage: PYTHONPATH=<build>/python /usr/bin/python3 perf/ddp_overhead_split.py BACKEND [--steps N] [--world-size N]
       [--model mlp|conv]
"""
import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import collie.torch  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import MODELS  # noqa: E402


def thread_cpu_ns(tid):
    """CPU time of thread `tid` of this process (its CPU clock: CPUCLOCK_SCHED of that thread)."""
    try:
        return time.clock_gettime_ns(((~tid) << 3) | 6)
    except OSError:
        return 0


def threads():
    return [int(t) for t in os.listdir("/proc/self/task")]


def noop_hook(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def rank_main(args, rank, init, queue):
    torch.set_num_threads(1)
    dist.init_process_group(args.backend, init_method=f"file://{init}", rank=rank, world_size=args.world_size)
    cls, make_input = MODELS[args.model]
    models = []
    for hook in (None, noop_hook):
        torch.manual_seed(0)
        m = torch.nn.parallel.DistributedDataParallel(cls())
        if hook:
            m.register_comm_hook(None, hook)
        models.append((m, torch.optim.SGD(m.parameters(), lr=0.01)))
    x, y = make_input(32), torch.randint(0, 10, (32,))

    def step(m, opt):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()

    def local():
        with models[0][0].no_sync():
            step(*models[0])

    kinds = {"local": local, "noop": lambda: step(*models[1]), "sync": lambda: step(*models[0])}
    for _ in range(5):
        for fn in kinds.values():
            fn()
    me = os.getpid()
    wall = {k: [] for k in kinds}
    cpu = {k: {"main": 0, "other": 0} for k in kinds}
    for _ in range(args.steps):
        for kind, fn in kinds.items():
            dist.barrier()
            tids = threads()
            before = {t: thread_cpu_ns(t) for t in tids}
            start = time.perf_counter()
            fn()
            wall[kind].append(time.perf_counter() - start)
            for t in threads():
                cpu[kind]["main" if t == me else "other"] += thread_cpu_ns(t) - before.get(t, 0)
    out = {"wall": wall, "cpu": cpu}
    everyone = [None] * args.world_size
    dist.all_gather_object(everyone, out)
    if rank == 0:
        queue.put(everyone)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("backend")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--world-size", type=int, default=2)
    p.add_argument("--model", default="mlp", choices=sorted(MODELS))
    args = p.parse_args()
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    init = tempfile.mktemp(prefix="collie_ddp_split_")
    procs = [ctx.Process(target=rank_main, args=(args, r, init, queue)) for r in range(args.world_size)]
    for proc in procs:
        proc.start()
    everyone = queue.get(timeout=1800)
    for proc in procs:
        proc.join()
    ws, n = args.world_size, args.steps
    job = {k: [max(everyone[r]["wall"][k][i] for r in range(ws)) * 1e3 for i in range(n)] for k in everyone[0]["wall"]}
    med = {k: statistics.median(v) for k, v in job.items()}

    def cpu_ms(kind, part):  # mean over ranks, per step
        return sum(everyone[r]["cpu"][kind][part] for r in range(ws)) / ws / n / 1e6

    main_add = cpu_ms("sync", "main") - cpu_ms("local", "main")
    ddp_own = cpu_ms("noop", "main") + cpu_ms("noop", "other") - cpu_ms("local", "main") - cpu_ms("local", "other")
    other_add = cpu_ms("sync", "other") - cpu_ms("local", "other")
    print(f"{args.backend} {args.model} ws{ws} {n} steps, load {open('/proc/loadavg').read().split()[0]}: "
          f"wall ms local {med['local']:.2f} noop {med['noop']:.2f} sync {med['sync']:.2f} -> overhead "
          f"{med['sync'] - med['local']:.2f}; CPU ms/step added by sync: main {main_add:+.2f}, other threads "
          f"{other_add:+.2f}, total {main_add + other_add:+.2f} (a no-op Python comm hook instead: {ddp_own:+.2f})")


if __name__ == "__main__":
    sys.exit(main())
