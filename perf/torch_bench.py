#!/usr/bin/env python3
"""torch.distributed on collie vs gloo: all_reduce latency and bus bandwidth, and PyTorch DDP step time.

  allreduce  torch.distributed.all_reduce (float32, SUM) from 8 B to 64 MiB: time per call (the slowest rank's mean
             over a timed loop after warm-up) and busbw = bytes * 2 (n-1)/n / time, as nccl-tests report it.
  ddp        torch.nn.parallel.DistributedDataParallel step time (forward, backward with gradient all-reduce,
             SGD step) on an MLP and a small conv net, and the same step under no_sync() (no communication): the
             communication overhead is the difference.
One forked process per rank, meeting through file://. Prints markdown tables.
Usage: PYTHONPATH=<build>/python /usr/bin/python3 torch_bench.py {allreduce,ddp} --world-size N [--backends collie,gloo]
"""
import argparse
import multiprocessing
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist

import collie.torch  # noqa: F401

SIZES = [8, 64, 512, 4 << 10, 32 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def slowest(value):
    t = torch.tensor([value], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def timed(fn, min_iters, min_seconds):
    """Mean seconds per call over a loop long enough on every rank (all ranks run the same count)."""
    iters = min_iters
    while True:
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        took = slowest(time.perf_counter() - start)
        if took >= min_seconds or iters >= 1 << 16:
            return took / iters
        iters = int(iters * max(2.0, min_seconds / max(took, 1e-6) * 1.2))


def bench_allreduce(rank, ws, args):
    rows = []
    for size in SIZES:
        t = torch.ones(max(1, size // 4), dtype=torch.float32)
        for _ in range(5):
            dist.all_reduce(t)
        sec = timed(lambda: dist.all_reduce(t), 5, args.seconds)
        rows.append((size, sec * 1e6, size * 2 * (ws - 1) / ws / sec / 1e9))
    return rows


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                       torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                       torch.nn.Linear(1024, 10))

    def forward(self, x):
        return self.net(x)


class ConvNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                            torch.nn.Conv2d(64, 128, 3, padding=1), torch.nn.ReLU(),
                                            torch.nn.AdaptiveAvgPool2d(4))
        self.head = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(128 * 16, 256), torch.nn.ReLU(),
                                        torch.nn.Linear(256, 10))

    def forward(self, x):
        return self.head(self.features(x))


MODELS = {"mlp": (Mlp, lambda b: torch.randn(b, 512)), "conv": (ConvNet, lambda b: torch.randn(b, 3, 32, 32))}


def bench_ddp(rank, ws, args):
    rows = []
    for name, (cls, make_input) in MODELS.items():
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(cls())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = make_input(args.batch), torch.randint(0, 10, (args.batch,))
        params = sum(p.numel() for p in model.parameters())

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()

        def step_no_sync():
            with model.no_sync():
                step()

        for _ in range(3):
            step()
            step_no_sync()
        synced, local = [], []
        for _ in range(args.rounds):  # alternate, so that load changes hit both alike
            synced.append(timed(step, 3, args.seconds))
            local.append(timed(step_no_sync, 3, args.seconds))
        s, l_ = sorted(synced)[len(synced) // 2], sorted(local)[len(local) // 2]
        rows.append((name, params, s * 1e3, l_ * 1e3, (s - l_) * 1e3))
    return rows


def rank_main(backend, mode, rank, ws, init_file, args, queue):
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=ws)
    rows = bench_allreduce(rank, ws, args) if mode == "allreduce" else bench_ddp(rank, ws, args)
    if rank == 0:
        queue.put(rows)
    dist.barrier()
    dist.destroy_process_group()


def run(backend, mode, ws, args):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    init_file = tempfile.mktemp(prefix="collie_torch_bench_")
    procs = [ctx.Process(target=rank_main, args=(backend, mode, r, ws, init_file, args, queue)) for r in range(ws)]
    for p in procs:
        p.start()
    rows = queue.get(timeout=1800)
    for p in procs:
        p.join()
    if os.path.exists(init_file):
        os.unlink(init_file)
    return rows


def human(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift:
            return f"{size >> shift} {unit}"
    return f"{size} B"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["allreduce", "ddp"])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--backends", default="collie,gloo")
    parser.add_argument("--seconds", type=float, default=0.3, help="minimum timed loop per point")
    parser.add_argument("--batch", type=int, default=32, help="per-rank batch (ddp)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated synced/no_sync rounds (ddp)")
    args = parser.parse_args()
    backends = args.backends.split(",")
    results = {b: run(b, args.mode, args.world_size, args) for b in backends}
    ws = args.world_size
    if args.mode == "allreduce":
        head = "| size | " + " | ".join(f"{b} us | {b} busbw GB/s" for b in backends)
        if "collie" in backends and "gloo" in backends:
            head += " | time gloo/collie | busbw collie/gloo"
        print(f"all_reduce float32 SUM, {ws} ranks\n\n{head} |")
        print("|" + "---|" * (head.count("|")))
        for i, size in enumerate(SIZES):
            line = f"| {human(size)} | " + " | ".join(f"{results[b][i][1]:.1f} | {results[b][i][2]:.3f}" for b in backends)
            if "collie" in backends and "gloo" in backends:
                c, g = results["collie"][i], results["gloo"][i]
                line += f" | {g[1] / c[1]:.1f}x | {c[2] / g[2]:.1f}x"
            print(line + " |")
    else:
        print(f"DDP step, {ws} ranks, batch {args.batch} per rank, median of {args.rounds} rounds\n")
        print("| model | params | backend | step ms | no_sync step ms | comm overhead ms |")
        print("|---|---|---|---|---|---|")
        for b in backends:
            for name, params, s, l_, o in results[b]:
                print(f"| {name} | {params} | {b} | {s:.2f} | {l_:.2f} | {o:.2f} |")
        if "collie" in backends and "gloo" in backends:
            for i, row in enumerate(results["collie"]):
                g = results["gloo"][i]
                print(f"\n{row[0]}: collie overhead / gloo overhead = {row[4] / g[4]:.2f}" if g[4] > 0 else "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
