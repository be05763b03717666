#!/usr/bin/env python3
"""ddp_bench_torch: PyTorch DDP + Gloo twin of perf/ddp_bench.cpp (same model, batch, phases and output).

Run one process per rank with RANK and WORLD_SIZE set (collierun sets both) and a free TCP port:

    collierun -n 2 python3 perf/ddp_bench_torch.py --port 29511 [--layers 1024,2048,2048,2048,10] [--batch 8]
        [--rounds 9] [--steps 4] [--warmup 3] [--bucket-mb 1,5,25,50] [--threads 1] [--bucket-view 0|1]

Per bucket cap the model is wrapped in torch.nn.parallel.DistributedDataParallel (backend gloo, bucket_cap_mb =
cap), and --rounds rounds each time three phases of --steps steps, all ranks together: compute (forward + backward
+ SGD step under ddp.no_sync()), ddp (the same step synchronised), allreduce (dist.all_reduce of as many float32
elements as the model has parameters, in cap-sized tensors, all launched async then waited for). Each number is
the median over the rounds of the slower rank's mean; overhead = the median over the rounds of (ddp - compute)
of the same round, hidden = 1 - overhead / allreduce clamped to [0, 1]. Rank 0 prints a table and RESULT lines.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=29511)
    p.add_argument("--layers", default="1024,2048,2048,2048,10")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--bucket-mb", default="1,5,25,50")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--bucket-view", type=int, default=0)
    return p.parse_args()


def make_model(layers):
    mods = []
    for i in range(len(layers) - 1):
        mods.append(torch.nn.Linear(layers[i], layers[i + 1]))
        if i + 2 < len(layers):
            mods.append(torch.nn.ReLU())
    return torch.nn.Sequential(*mods)


def timed(n, f):
    """Mean seconds of n calls of f, the slower rank's."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(n):
        f()
    return slowest((time.perf_counter() - t0) / n)


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def slowest(v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def main():
    args = parse()
    torch.set_num_threads(args.threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=world)
    layers = [int(v) for v in args.layers.split(",")]
    torch.manual_seed(1 + rank)
    model = make_model(layers)
    x = torch.randn(args.batch, layers[0])
    y = torch.randint(layers[-1], (args.batch,))
    nparams = sum(p.numel() for p in model.parameters())
    if rank == 0:
        print(f"# PyTorch {torch.__version__} DDP + gloo bench: {world} ranks, layers {'x'.join(map(str, layers))}, "
              f"{nparams} parameters ({nparams * 4 / 1e6:.1f} MB), batch {args.batch} per rank, "
              f"{args.threads} torch thread(s), {args.rounds} rounds of {args.steps} steps per phase after {args.warmup} "
              f"warm-up, bucket view {args.bucket_view}",
              flush=True)

    grads = torch.ones(nparams, dtype=torch.float32)
    if rank == 0:
        print(f"{'':8} {'bucket_MB':>10} {'compute_ms':>10} {'ddp_ms':>10} {'overhead_ms':>12} {'allreduce_ms':>12} "
              f"{'hidden':>8}", flush=True)
    for mb in [float(v) for v in args.bucket_mb.split(",")]:
        chunk = max(1, int(mb * (1 << 20)) // 4)
        pieces = list(torch.split(grads, chunk))

        def allreduce_once():
            works = [dist.all_reduce(t, async_op=True) for t in pieces]
            for w in works:
                w.wait()

        ddp = DDP(model, bucket_cap_mb=mb, gradient_as_bucket_view=bool(args.bucket_view))
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            opt.step()

        def local_step():
            with ddp.no_sync():
                step()

        for _ in range(args.warmup):
            step()
            allreduce_once()
        compute, ddp_step, allreduce = [], [], []
        for _ in range(args.rounds):
            compute.append(timed(args.steps, local_step))
            ddp_step.append(timed(args.steps, step))
            allreduce.append(timed(args.steps, allreduce_once))
        del ddp, opt
        for p in model.parameters():
            p.grad = None
        c, d, a = median(compute), median(ddp_step), median(allreduce)
        overhead = median([dd - cc for dd, cc in zip(ddp_step, compute)])  # paired by round: load drifts cancel
        hidden = min(1.0, max(0.0, 1.0 - overhead / a))
        if rank == 0:
            print(f"{'pytorch':8} {mb:10.1f} {c * 1e3:10.2f} {d * 1e3:10.2f} {overhead * 1e3:12.2f} {a * 1e3:12.2f} "
                  f"{hidden * 100:7.0f}%", flush=True)
            print(f"RESULT framework=pytorch bucket_mb={mb:g} compute_ms={c * 1e3:.3f} ddp_ms={d * 1e3:.3f} "
                  f"overhead_ms={overhead * 1e3:.3f} allreduce_ms={a * 1e3:.3f} hidden_pct={hidden * 100:.1f}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
