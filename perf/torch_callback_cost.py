#!/usr/bin/env python3
"""What keeping callbacks' calls in order (src/torch/issue_order.hpp) costs the torch backend, measured.

  futures   16 async all_reduces whose futures Python asks for at once (as a Python comm hook does), then all
            waited: microseconds per round. Each future opens, so each call waits for the one before to complete.
  ddp       DistributedDataParallel on 24 Linear(128, 128) layers with ~25 buckets (bucket_cap_mb=0.07), batch 8:
            milliseconds per forward+backward, with DDP's C++ reducer (futures asked for without the GIL: none
            opens) and with the Python allreduce_hook (every bucket's opens); the no_sync step beside them (the
            compute alone: the floor the step chases).
Usage: PYTHONPATH=<build>/python /usr/bin/python3 perf/torch_callback_cost.py {futures,ddp} [--world-size N]
Run it against two builds in turn to compare (the date and machine go in perf/RESULTS.md with the figures).
"""
import argparse
import datetime
import multiprocessing
import statistics
import tempfile
import time

import torch
import torch.distributed as dist

import collie.torch  # noqa: F401  registers "collie"


def futures(rank, ws, numel):
    ts = [torch.ones(numel) for _ in range(16)]
    times = []
    for _ in range(60):
        dist.barrier()
        t0 = time.perf_counter()
        for f in [dist.all_reduce(t, async_op=True).get_future() for t in ts]:
            f.wait()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[10:]) * 1e6


def ddp(rank, ws, mode):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    torch.manual_seed(0)
    layers = []
    for _ in range(24):
        layers += [torch.nn.Linear(128, 128), torch.nn.ReLU()]
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(*layers), bucket_cap_mb=0.07)
    if mode == "hook":
        model.register_comm_hook(None, default_hooks.allreduce_hook)
    x = torch.randn(8, 128)
    times = []
    for _ in range(80):
        t0 = time.perf_counter()
        if mode == "no_sync":
            with model.no_sync():
                model(x).sum().backward()
        else:
            model(x).sum().backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[20:]) * 1e3


def rank_main(rank, ws, init_file, queue, fn, arg):
    dist.init_process_group("collie", init_method=f"file://{init_file}", rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=120))
    value = fn(rank, ws, arg)
    if rank == 0:
        queue.put(value)
    dist.destroy_process_group()


def run(ws, fn, arg):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    init_file = tempfile.mktemp(prefix="collie_cb_cost_")
    procs = [ctx.Process(target=rank_main, args=(r, ws, init_file, queue, fn, arg)) for r in range(ws)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return queue.get()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["futures", "ddp"])
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    ws = args.world_size
    if args.mode == "futures":
        for numel in (256, 65536):
            print(f"futures, {ws} ranks, 16 x {numel * 4} B: {run(ws, futures, numel):.0f} us per round", flush=True)
    else:
        for mode in ("reducer", "hook", "no_sync"):
            print(f"ddp, {ws} ranks, {mode}: {run(ws, ddp, mode):.2f} ms per step", flush=True)


if __name__ == "__main__":
    main()
