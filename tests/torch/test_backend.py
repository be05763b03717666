#!/usr/bin/env python3
"""Tests of collie as a torch.distributed backend (import collie.torch; init_process_group("collie")).

Each case runs in N forked processes, one per rank, meeting through file:// (or env:// under torchrun), and checks
every value element by element against what the call must give:
  collectives   reduce_scatter (list and _reduce_scatter_base), alltoall with uneven splits (alltoall_base and the
                list form), batch_isend_irecv around a ring, all-reduce in bf16 and fp16 (exact small integers),
                complex sum, non-contiguous tensors, async get_future (a callback waiting on a later future), recv
                from any source, bad arguments raising at once; with torch 2.x the coalescing manager (all_reduce,
                all_gather_into_tensor, reduce_scatter_tensor; both of its styles)
  async         Works whose handles are dropped or never waited on (a 32 MiB all_gather, an isend of a temporary):
                kept by the group and completed by the barrier after them, outputs checked without waiting; after
                get_future() is_completed() does not block and wait(timeout) times out while a peer is late;
                barrier(async_op=True) and all_to_all with uneven splits (both forms) return before the peers
                reach them; the barrier completes the calls before it; a dropped call's output is written when the
                group is destroyed
  killed        a rank SIGKILLs itself; every other rank's pending all_reduce raises RuntimeError naming it within the
                group's timeout (the first: a call held back behind a chain of callbacks that make calls)
  torchrun      the real launcher: python3 -m torch.distributed.run --nproc_per_node 2 ... (env://)
  ddp           torch.nn.parallel.DistributedDataParallel trains an MLP for some steps; loss and parameters match one
                process training on the whole batch
  callback_order  calls issued from future callbacks (two PowerSGD-like chains, then a plain call) meet in NCCL's
                order on every rank though each rank is late at another place; PowerSGD's hook through DDP keeps the
                ranks' parameters identical
Usage: PYTHONPATH=<build>/python /usr/bin/python3 test_backend.py CASE [--world-size N]
Prints "PASS case" or "FAIL case: why" and exits 0 only on success.
"""
import argparse
import datetime
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

import collie.torch  # noqa: F401  registers "collie"
import torch_without_libuv

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launchers"))
from free_port import free_port  # noqa: E402  torchrun's store takes --master_port, collie's root the next one


def check_equal(got, want, what):
    got = got.to(torch.float64) if not got.is_complex() else got.to(torch.complex128)
    want = torch.as_tensor(want).to(got.dtype)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, want {tuple(want.shape)}")
    bad = (got != want).reshape(-1).nonzero()
    if bad.numel():
        i = bad[0].item()
        raise AssertionError(f"{what}: element {i} is {got.reshape(-1)[i].item()}, want {want.reshape(-1)[i].item()} "
                             f"({bad.numel()} of {got.numel()} differ)")


def expect_raises(fn, pattern, what):
    try:
        fn()
    except (RuntimeError, ValueError) as e:
        if not re.search(pattern, str(e)):
            raise AssertionError(f"{what}: raised {e!r}, not matching {pattern!r}")
        return
    raise AssertionError(f"{what}: did not raise")


# ---- PREMUL_SUM: each rank's tensor times its own factor, summed (collie's PreMulSum, no copy of the tensor) ------
def premul(factor):
    if isinstance(factor, torch.Tensor) and int(torch.__version__.split(".")[0]) < 2:
        factor = [factor]  # torch 1.x takes a list of factor tensors
    return dist._make_nccl_premul_sum(factor)


def premul_checks(rank, ws):
    f = 0.5 * (rank + 1)  # every factor, input and sum below is exact in each floating type
    total = sum(0.5 * (r + 1) * (r + 1) for r in range(ws))
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        t = torch.full((1000,), float(rank + 1), dtype=dtype)
        dist.all_reduce(t, op=premul(f))
        check_equal(t, torch.full((1000,), total), f"all_reduce PREMUL_SUM {dtype}")
    nc = torch.full((4, 6), float(rank + 1))[:, ::2]  # not contiguous; the factor a tensor
    dist.all_reduce(nc, op=premul(torch.tensor(2.0 * (rank + 1))))
    check_equal(nc, torch.full((4, 3), 4.0 * total), "all_reduce PREMUL_SUM, a tensor factor, not contiguous")
    c = torch.tensor([1 + 2j, -3 + 0.5j], dtype=torch.complex64) * (rank + 1)
    dist.all_reduce(c, op=premul(f))
    check_equal(c, torch.tensor([1 + 2j, -3 + 0.5j]) * total, "all_reduce PREMUL_SUM complex")
    r = torch.full((7,), float(rank + 1), dtype=torch.float64)
    dist.reduce(r, ws - 1, op=premul(f))
    if rank == ws - 1:
        check_equal(r, torch.full((7,), total), "reduce PREMUL_SUM")
    inputs = [torch.full((3,), float(rank + 1 + j)) for j in range(ws)]
    out = torch.empty(3)
    dist.reduce_scatter(out, inputs, op=premul(f))
    check_equal(out, torch.full((3,), sum(0.5 * (q + 1) * (q + 1 + rank) for q in range(ws))), "reduce_scatter PREMUL_SUM")
    flat = torch.full((ws * 3,), float(rank + 1))
    out = torch.empty(3)
    dist._reduce_scatter_base(out, flat, op=premul(f))
    check_equal(out, torch.full((3,), total), "_reduce_scatter_base PREMUL_SUM")
    check_equal(flat, torch.full((ws * 3,), float(rank + 1)), "_reduce_scatter_base PREMUL_SUM: input left as it was")
    expect_raises(lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=premul(2.0)), "floating-point",
                  "PREMUL_SUM on int32")


# ---- collectives ---------------------------------------------------------------------------------------------------
def case_collectives(rank, ws):
    # reduce_scatter (list form): input j on rank r is full of 100*r + j; output on rank r = sum over ranks of j=r.
    n = 5
    inputs = [torch.full((n,), float(100 * rank + j)) for j in range(ws)]
    out = torch.empty(n)
    dist.reduce_scatter(out, inputs)
    check_equal(out, torch.full((n,), float(sum(100 * r + rank for r in range(ws)))), "reduce_scatter")
    # _reduce_scatter_base with MAX on int64.
    flat = torch.arange(ws * n, dtype=torch.int64) * (rank + 1)
    out = torch.empty(n, dtype=torch.int64)
    dist._reduce_scatter_base(out, flat, op=dist.ReduceOp.MAX)
    check_equal(out, torch.arange(rank * n, (rank + 1) * n) * ws, "_reduce_scatter_base max")

    # alltoall_base with uneven splits: rank r sends (r + p + 1) rows of width 3 to rank p, valued 1000*r + p.
    width = 3
    in_splits = [rank + p + 1 for p in range(ws)]
    out_splits = [q + rank + 1 for q in range(ws)]
    send = torch.cat([torch.full((in_splits[p], width), float(1000 * rank + p)) for p in range(ws)])
    recv = torch.empty(sum(out_splits), width)
    dist.all_to_all_single(recv, send, out_splits, in_splits)
    want = torch.cat([torch.full((out_splits[q], width), float(1000 * q + rank)) for q in range(ws)])
    check_equal(recv, want, "all_to_all_single uneven")
    # The list form with different sizes per peer (and an empty one).
    ins = [torch.full((p + rank,), float(10 * rank + p), dtype=torch.float64) for p in range(ws)]
    outs = [torch.empty(q + rank, dtype=torch.float64) for q in range(ws)]
    dist.all_to_all(outs, ins)
    for q in range(ws):
        check_equal(outs[q], torch.full((q + rank,), float(10 * q + rank)), f"all_to_all from {q}")

    # batch_isend_irecv around the ring, both directions.
    right, left = (rank + 1) % ws, (rank - 1) % ws
    to_right = torch.arange(7, dtype=torch.int32) + 10 * rank
    to_left = torch.arange(7, dtype=torch.int32) - 10 * rank
    from_left, from_right = torch.empty(7, dtype=torch.int32), torch.empty(7, dtype=torch.int32)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, to_right, right), dist.P2POp(dist.irecv, from_left, left),
                                   dist.P2POp(dist.isend, to_left, left), dist.P2POp(dist.irecv, from_right, right)])
    for r in reqs:
        r.wait()
    check_equal(from_left, torch.arange(7) + 10 * left, "batch_isend_irecv from left")
    check_equal(from_right, torch.arange(7) - 10 * right, "batch_isend_irecv from right")

    # bf16 and fp16 all-reduce: small integers are exact in both.
    for dtype in (torch.bfloat16, torch.float16):
        t = (torch.arange(1000) % 17).to(dtype) + rank
        dist.all_reduce(t)
        check_equal(t, (torch.arange(1000) % 17) * ws + sum(range(ws)), f"all_reduce {dtype} sum")
        t = (torch.arange(64) % 5).to(dtype) - rank
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        check_equal(t, (torch.arange(64) % 5) - (ws - 1), f"all_reduce {dtype} min")

    # Complex sum, as real pairs.
    c = torch.tensor([1 + 2j, -3 + 0.5j], dtype=torch.complex64) * (rank + 1)
    dist.all_reduce(c)
    check_equal(c, torch.tensor([1 + 2j, -3 + 0.5j]) * sum(range(1, ws + 1)), "all_reduce complex")
    premul_checks(rank, ws)
    expect_raises(lambda: dist.all_reduce(c, op=dist.ReduceOp.MAX), "complex", "complex MAX")

    # Non-contiguous tensor: a transposed view, written back in place.
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
    view = base.t()
    dist.all_reduce(view)
    check_equal(base, torch.arange(12).reshape(3, 4) * sum(range(1, ws + 1)), "all_reduce non-contiguous")

    # Async with get_future: the future's value is the output list.
    t = torch.ones(1000) * rank
    fut = dist.all_reduce(t, async_op=True).get_future()
    check_equal(fut.wait()[0], torch.full((1000,), float(sum(range(ws)))), "get_future value")
    chained = dist.all_reduce(torch.ones(3), async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    check_equal(chained.wait(), torch.full((3,), 2.0 * ws), "get_future then")
    # A callback that waits on another call's future (PowerSGD's hook does): it must not wait on its own thread.
    def wait_inside(f):
        return dist.all_reduce(torch.ones(5), async_op=True).get_future().wait()[0] + f.value()[0]

    nested = dist.all_reduce(torch.ones(5), async_op=True).get_future().then(wait_inside)
    check_equal(nested.wait(), torch.full((5,), 2.0 * ws), "a callback waiting on a later future")

    # recv without src: from any source, in each sender's order; the sender is returned (and Work._source_rank()).
    if rank == 0:
        got = {}
        for i in range(2 * (ws - 1)):
            buf = torch.full((6,), -1.0)
            if i % 2 == 0:
                src = dist.recv(buf)
            else:
                work = dist.irecv(buf)
                work.wait()
                src = work._source_rank()
            check_equal(buf, torch.arange(6.0) + 100 * src + 10 * got.get(src, 0), f"recv from any source ({src})")
            got[src] = got.get(src, 0) + 1
        check_equal(torch.tensor(sorted(got.items())), torch.tensor([[r, 2] for r in range(1, ws)]), "any-source senders")
    else:
        for k in range(2):
            dist.send(torch.arange(6.0) + 100 * rank + 10 * k, 0)

    # Bad arguments raise at once.
    expect_raises(lambda: dist.all_gather([torch.empty(3)] * ws, torch.empty(4)), "shape", "all_gather sizes")
    expect_raises(lambda: dist.all_gather([torch.empty(3, dtype=torch.int32)] * ws, torch.empty(3)), "dtype",
                  "all_gather dtypes")
    expect_raises(lambda: dist.reduce_scatter(torch.empty(2), [torch.empty(3)] * ws), "shape", "reduce_scatter sizes")
    expect_raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)), "int16|Short", "all_reduce int16")
    dist.barrier()
    coalescing_checks(rank, ws)


def coalescing_checks(rank, ws):
    """torch 2.x's coalescing manager: all_reduce, all_gather_into_tensor and reduce_scatter_tensor in a block, in both
    of its styles (no device: one coalesced call after the block; a device: that call between start and end of
    coalescing, whose Work is the only one waited on). Outputs are read right after the block."""
    if int(torch.__version__.split(".")[0]) < 2:
        return  # torch 1.13's _coalescing_manager is another API
    from torch.distributed.distributed_c10d import _coalescing_manager
    total = sum(range(1, ws + 1))
    for device in (None, torch.device("cpu")):
        style = f"coalescing manager (device {device})"
        reduced = [torch.full((5,), float(rank + 1)), torch.arange(3.0) * (rank + 1)]
        with _coalescing_manager(device=device):
            for t in reduced:
                dist.all_reduce(t)
        check_equal(reduced[0], torch.full((5,), float(total)), f"{style}: all_reduce 0")
        check_equal(reduced[1], torch.arange(3.0) * total, f"{style}: all_reduce 1")
        ins = [torch.full((4,), float(rank)), torch.arange(2, dtype=torch.int64) + 10 * rank]
        outs = [torch.zeros(4 * ws), torch.zeros(2 * ws, dtype=torch.int64)]
        with _coalescing_manager(device=device):
            for o, i in zip(outs, ins):
                dist.all_gather_into_tensor(o, i)
        check_equal(outs[0], torch.cat([torch.full((4,), float(r)) for r in range(ws)]), f"{style}: all_gather 0")
        check_equal(outs[1], torch.cat([torch.arange(2) + 10 * r for r in range(ws)]), f"{style}: all_gather 1")
        rs_in = [torch.arange(6.0 * ws) * (rank + 1), torch.ones(ws, dtype=torch.int32) * (rank + 1)]
        rs_out = [torch.zeros(6), torch.zeros(1, dtype=torch.int32)]
        with _coalescing_manager(device=device):
            for o, i in zip(rs_out, rs_in):
                dist.reduce_scatter_tensor(o, i)
        check_equal(rs_out[0], torch.arange(6.0 * rank, 6.0 * (rank + 1)) * total, f"{style}: reduce_scatter 0")
        check_equal(rs_out[1], torch.tensor([total], dtype=torch.int32), f"{style}: reduce_scatter 1")
    dist.barrier()


# ---- async: dropped handles, futures, barrier(async_op=True) -------------------------------------------------------
ASYNC_BIG = 8 << 20  # float32 elements (32 MiB): buffers freed too early are unmapped, and collie's writes fault
LATE_WAIT_S = 20  # how long a late rank waits for rank 0's go before it calls anyway (the check then fails)
QUICK_S = 5  # what "returns at once" allows, on a loaded machine


def wait_for_go(key):
    try:
        dist.distributed_c10d._get_default_store().wait([key], datetime.timedelta(seconds=LATE_WAIT_S))
    except RuntimeError:
        pass  # rank 0 is stuck (the bug under test): call anyway, so that its check fails rather than hangs


def case_async(rank, ws):
    store = dist.distributed_c10d._get_default_store()
    n = ASYNC_BIG
    # An all_gather whose handle is dropped: the group keeps its buffers, and the barrier writes the outputs.
    outs = [torch.zeros(n) for _ in range(ws)]
    dist.all_gather(outs, torch.full((n,), float(rank + 1)), async_op=True)
    dist.barrier()
    for r in range(ws):
        check_equal(outs[r], torch.full((n,), float(r + 1)), f"dropped all_gather piece {r} after barrier")
    del outs
    # Handle kept but never waited on: the outputs are there after the barrier.
    outs = [torch.zeros(5, dtype=torch.int64) for _ in range(ws)]
    work = dist.all_gather(outs, torch.arange(5) + 10 * rank, async_op=True)
    dist.barrier()
    for r in range(ws):
        check_equal(outs[r], torch.arange(5) + 10 * r, f"unwaited all_gather piece {r} after barrier")
    if not work.is_completed():
        raise AssertionError("all_gather before a barrier is not completed after it")
    # An isend of a temporary, handle dropped: the tensor lives until collie has sent it.
    if rank == 0:
        dist.isend(torch.full((n,), 7.0), 1)
        junk = [torch.full((n,), -1.0) for _ in range(2)]  # would take the freed memory
    elif rank == 1:
        got = torch.zeros(n)
        dist.recv(got, 0)
        check_equal(got, torch.full((n,), 7.0), "recv of a dropped isend's temporary")
    dist.barrier()

    # After get_future(), with the peers late: is_completed() answers at once, wait(timeout) raises at its timeout.
    t = torch.arange(4, dtype=torch.float32) * (rank + 1)
    if rank == 0:
        work = dist.all_reduce(t, async_op=True)
        fut = work.get_future()
        start = time.time()
        slowest, completed = 0.0, False
        while time.time() - start < 0.5:
            call = time.time()
            completed = completed or work.is_completed()
            slowest = max(slowest, time.time() - call)
        call = time.time()
        try:
            work.wait(timeout=datetime.timedelta(milliseconds=300))
            timeout_error = None
        except RuntimeError as e:
            timeout_error = str(e)
        waited = time.time() - call
        store.set("collie_test/future_go", "1")
        check_equal(fut.wait()[0], torch.arange(4) * sum(range(1, ws + 1)), "all_reduce future value")
        if completed or slowest > QUICK_S:
            raise AssertionError(f"is_completed() after get_future(): answered {completed} before the peers called, "
                                 f"slowest call {slowest:.1f} s")
        if timeout_error is None or "timed out" not in timeout_error or waited > QUICK_S:
            raise AssertionError(f"wait(timeout=300 ms) after get_future(): {timeout_error!r} after {waited:.1f} s")
    else:
        wait_for_go("collie_test/future_go")
        dist.all_reduce(t)

    # barrier(async_op=True) returns before the peers reach it; waiting on it completes a dropped call before it.
    outs = [torch.zeros(3) for _ in range(ws)]
    dist.all_gather(outs, torch.full((3,), float(rank - 5)), async_op=True)
    if rank == 0:
        start = time.time()
        work = dist.barrier(async_op=True)
        took = time.time() - start
        pending = not work.is_completed()
        store.set("collie_test/barrier_go", "1")
        work.wait()
        if took > QUICK_S or not pending:
            raise AssertionError(f"barrier(async_op=True) returned after {took:.1f} s, completed: {not pending}, "
                                 "before the peers called barrier")
    else:
        wait_for_go("collie_test/barrier_go")
        dist.barrier(async_op=True).wait()
    for r in range(ws):
        check_equal(outs[r], torch.full((3,), float(r - 5)), f"dropped all_gather piece {r} after barrier(async)")

    # all_to_all with uneven splits, and its list form, return at once with async_op=True (a collie group ended
    # without waiting), while the peers have not called yet; wait() gives every element.
    in_splits = [rank + p + 1 for p in range(ws)]
    out_splits = [q + rank + 1 for q in range(ws)]
    send = torch.cat([torch.full((in_splits[p], 2), float(100 * rank + p)) for p in range(ws)])
    recv = torch.zeros(sum(out_splits), 2)
    ins = [torch.full((p + rank + 1,), float(10 * rank + p)) for p in range(ws)]
    outs = [torch.zeros(q + rank + 1) for q in range(ws)]
    if rank == 0:
        start = time.time()
        single = dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True)
        listed = dist.all_to_all(outs, ins, async_op=True)
        took = time.time() - start
        pending = not single.is_completed() and not listed.is_completed()
        store.set("collie_test/alltoall_go", "1")
        single.wait()
        listed.wait()
        if took > QUICK_S or not pending:
            raise AssertionError(f"uneven all_to_all(async_op=True) returned after {took:.1f} s, completed: "
                                 f"{not pending}, before the peers called")
    else:
        wait_for_go("collie_test/alltoall_go")
        dist.all_to_all_single(recv, send, out_splits, in_splits, async_op=True).wait()
        dist.all_to_all(outs, ins, async_op=True).wait()
    check_equal(recv, torch.cat([torch.full((out_splits[q], 2), float(100 * q + rank)) for q in range(ws)]),
                "async uneven all_to_all_single")
    for q in range(ws):
        check_equal(outs[q], torch.full((q + rank + 1,), float(10 * q + rank)), f"async all_to_all from {q}")

    # A dropped call the group's destruction completes: a transposed view, written back through a staging copy.
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
    dist.all_reduce(base.t(), async_op=True)
    dist.destroy_process_group()
    check_equal(base, torch.arange(12).reshape(3, 4) * sum(range(1, ws + 1)), "dropped all_reduce after destroy")


# ---- a killed rank -------------------------------------------------------------------------------------------------
KILL_TIMEOUT_S = 15


def case_killed(rank, ws):
    victim = ws - 1
    t = torch.ones(1 << 16)
    for _ in range(3):
        dist.all_reduce(t)
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.time()
    try:
        # A chain of callbacks open when the peer is gone, and a call held back behind it: both end, neither hangs.
        chain = dist.all_reduce(t, async_op=True).get_future().then(
            lambda f: dist.all_reduce(torch.ones(4), async_op=True).get_future().wait())
        held = dist.all_reduce(t, async_op=True)
        try:
            chain.wait()
        except RuntimeError:
            pass
        held.wait()
        for _ in range(1000):
            dist.all_reduce(t)
    except RuntimeError as e:
        took = time.time() - start
        msg = str(e)
        print(f"rank {rank}: RuntimeError after {took:.1f} s: {msg.splitlines()[0][:300]}", flush=True)
        if took > KILL_TIMEOUT_S + 10:
            raise AssertionError(f"raised after {took:.1f} s, the timeout is {KILL_TIMEOUT_S} s")
        if not re.search(rf"(rank|peer)\s*{victim}\b", msg):
            raise AssertionError(f"the error does not name rank {victim}: {msg}")
        os._exit(0)  # the group is broken: leave without destroying it
    raise AssertionError("all_reduce with a dead rank did not raise")


# ---- DDP -------------------------------------------------------------------------------------------------------------
def make_model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                               torch.nn.Linear(32, 4)).double()


def make_batch(step, total):
    g = torch.Generator().manual_seed(99 + step)
    return torch.randn(total, 16, generator=g, dtype=torch.float64), torch.randn(total, 4, generator=g,
                                                                                 dtype=torch.float64)


DDP_STEPS, DDP_BATCH = 8, 48


def case_ddp(rank, ws):
    ref = make_model()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    model = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    per = DDP_BATCH // ws
    for step in range(DDP_STEPS):
        x, y = make_batch(step, DDP_BATCH)
        ref_opt.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(ref(x), y)
        ref_loss.backward()
        ref_opt.step()
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[rank * per:(rank + 1) * per]), y[rank * per:(rank + 1) * per])
        loss.backward()
        opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        if not torch.allclose(global_loss, ref_loss.detach(), rtol=1e-10, atol=1e-12):
            raise AssertionError(f"step {step}: loss {global_loss.item()} vs single process {ref_loss.item()}")
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        diff = (p.detach() - q.detach()).abs()
        if diff.max().item() > 1e-10:
            i = diff.reshape(-1).argmax().item()
            raise AssertionError(f"parameter {name} element {i}: {p.reshape(-1)[i].item()} vs single process "
                                 f"{q.reshape(-1)[i].item()}")
    if rank == 0:
        print(f"ddp: {ws} ranks, {DDP_STEPS} steps, final loss {global_loss.item():.6f} matches one process", flush=True)
    dist.barrier()


# ---- calls from future callbacks -------------------------------------------------------------------------------------
def case_callback_order(rank, ws):
    """Calls issued from a future's callbacks reach collie in the same order on every rank, whatever the timing: right
    after the call whose callbacks issue them, before any call the program issues later (NCCL's order, where the
    callbacks run at once). Odd ranks are late inside the callbacks, even ranks late in the program, so that calls
    issued as they come would meet in another order; all have one shape, so a swap gives wrong sums, not an error.
    Two chains of callbacks as PowerSGD's hook makes for two buckets (each waits on the call it issues), a plain
    call, a bad call that must raise at once, a future asked for after a later call's chain opened, a callback that
    asks for a future it does not wait on and makes another call, and a future of a call complete on some ranks;
    calls are numbered in the order they must meet."""
    n, total = 64, sum(range(1, ws + 1))
    late_in_callbacks = rank % 2 == 1

    def value(k):
        return torch.full((n,), float(1000 * k + rank + 1))

    for rnd in range(3):
        tensors = {}

        def issue_and_wait(f, k):
            if late_in_callbacks:
                time.sleep(0.1)
            tensors[k] = value(k)
            dist.all_reduce(tensors[k], async_op=True).get_future().wait()
            return f.value()

        def chain(first, then_calls):
            tensors[first] = value(first)
            fut = dist.all_reduce(tensors[first], async_op=True).get_future()
            for k in then_calls:
                fut = fut.then(lambda f, k=k: issue_and_wait(f, k))
            if not late_in_callbacks:
                time.sleep(0.3)
            return fut

        bucket_a = chain(1, [2, 3])
        bucket_b = chain(4, [5])
        tensors[6] = value(6)
        plain = dist.all_reduce(tensors[6], async_op=True)
        # Bad arguments raise at once, though this rank's calls are held back now.
        expect_raises(lambda: dist.all_gather([torch.empty(3)] * ws, torch.empty(4)), "shape", "held: bad all_gather")
        # A future asked for late, of a call made before a chain opened: its callbacks' calls come after the chain's.
        tensors[7] = value(7)
        early = dist.all_reduce(tensors[7], async_op=True)
        late_chain = chain(8, [9])
        late = early.get_future().then(lambda f: issue_and_wait(f, 10))
        # A callback that asks for a future without waiting on it, then makes another call: that call still comes
        # before the program's next one. And a future asked for of a call complete already (waited on some ranks).
        inner = []

        def open_then_issue(f):
            if late_in_callbacks:
                time.sleep(0.1)
            tensors[12], tensors[13] = value(12), value(13)
            inner.append(dist.all_reduce(tensors[12], async_op=True).get_future())
            inner.append(dist.all_reduce(tensors[13], async_op=True).get_future())
            return f.value()

        tensors[11] = value(11)
        outer = dist.all_reduce(tensors[11], async_op=True).get_future().then(open_then_issue)
        if not late_in_callbacks:
            time.sleep(0.3)
        tensors[14] = value(14)
        after = dist.all_reduce(tensors[14], async_op=True)
        tensors[15] = value(15)
        done = dist.all_reduce(tensors[15], async_op=True)
        if not late_in_callbacks:
            done.wait()
        then_done = done.get_future().then(lambda f: issue_and_wait(f, 16))
        tensors[17] = value(17)
        last = dist.all_reduce(tensors[17], async_op=True)
        for w in [bucket_a, bucket_b, plain, late_chain, late, outer, after, then_done, last]:
            w.wait()
        for f in inner:
            f.wait()
        for k in range(1, 18):
            check_equal(tensors[k], torch.full((n,), float(1000 * k * ws + total)), f"round {rnd}: call {k}")

    # A callback that waits on a call made after its future was asked for, before then(): that call is held until
    # the callback ends, so the wait raises rather than never return. Rank 1 sends late: rank 0's then() comes first.
    if rank == 0:
        received = torch.zeros(4)
        fut = dist.irecv(received, src=1).get_future()
        after = dist.all_reduce(torch.ones(4), async_op=True)
        chained = fut.then(lambda f: after.wait())
        expect_raises(chained.wait, "never return", "a callback waiting on a call held behind it")
        after.wait()
        check_equal(received, torch.arange(4.0), "the late message")
    elif rank == 1:
        time.sleep(1.0)
        dist.send(torch.arange(4.0), 0)
    if rank != 0:
        dist.all_reduce(torch.ones(4))

    # batch_isend_irecv started from a callback (torch 2.x makes it a coalescing block on the callback's thread).
    ring_in, ring_out = torch.zeros(3), torch.full((3,), float(rank))
    ops = [dist.P2POp(dist.isend, ring_out, (rank + 1) % ws), dist.P2POp(dist.irecv, ring_in, (rank - 1) % ws)]

    def batch_in_callback(f):
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        return f.value()

    dist.all_reduce(torch.ones(2), async_op=True).get_future().then(batch_in_callback).wait()
    check_equal(ring_in, torch.full((3,), float((rank - 1) % ws)), "batch_isend_irecv from a callback")

    # PowerSGD's own hook through DDP (its compressed steps issue and wait from callbacks), each rank late at another
    # place: the ranks' parameters stay identical.
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook
    model = torch.nn.parallel.DistributedDataParallel(make_model(), bucket_cap_mb=0.001)
    state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)

    def late_hook(st, bucket):
        time.sleep(0.05 * ((bucket.index() + rank) % 2))
        return powerSGD_hook.powerSGD_hook(st, bucket)

    model.register_comm_hook(state, late_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    per = DDP_BATCH // ws
    for step in range(6):
        x, y = make_batch(step, DDP_BATCH)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x[rank * per:(rank + 1) * per]), y[rank * per:(rank + 1) * per]).backward()
        opt.step()
    for name, p in model.module.named_parameters():
        mine = p.detach().reshape(-1).clone()
        every = [torch.empty_like(mine) for _ in range(ws)]
        dist.all_gather(every, mine)
        for r in range(ws):
            check_equal(every[r], mine, f"PowerSGD: parameter {name} of rank {r} against rank {rank}")
    dist.barrier()


# ---- torchrun --------------------------------------------------------------------------------------------------------
def torchrun_worker():
    if torch_without_libuv.lacks_libuv():
        torch_without_libuv.patch()  # the env:// store under torchrun, as in run_torchrun
    dist.init_process_group("collie")  # env:// from torchrun's variables
    rank, ws = dist.get_rank(), dist.get_world_size()
    assert int(os.environ["RANK"]) == rank and int(os.environ["WORLD_SIZE"]) == ws
    t = torch.arange(10, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t)
    check_equal(t, torch.arange(10) * sum(range(1, ws + 1)), "torchrun all_reduce")
    gathered = [torch.empty(2, dtype=torch.int64) for _ in range(ws)]
    dist.all_gather(gathered, torch.tensor([rank, -rank]))
    for r in range(ws):
        check_equal(gathered[r], torch.tensor([r, -r]), f"torchrun all_gather {r}")
    case_collectives(rank, ws)
    dist.destroy_process_group()
    print(f"torchrun worker {rank}/{ws} ok", flush=True)


def run_torchrun(nproc):
    # --redirects 1 --tee 1: torchrun's defaults ("0") parse to None under Python 3.11 with Debian's torch 1.13
    # (Std.from_str iterates a Flag enum, which skips 0 in 3.11) and it crashes; 1 (stdout) parses.
    # On a torch without libuv (Debian's 2.x) torchrun and its workers' env:// store need torch_without_libuv.
    launcher = ["-m", "torch.distributed.run"]
    if torch_without_libuv.lacks_libuv():
        launcher = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_without_libuv.py")]
        print("torchrun: this torch has no libuv; TCPStore is asked for none (torch_without_libuv.py)")
    cmd = [sys.executable] + launcher + [
        "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1", "--master_port", str(free_port(pair=True)),
        "--redirects", "1", "--tee", "1", "--log_dir", tempfile.mkdtemp(prefix="collie_torchrun_"),
        os.path.abspath(__file__), "torchrun_worker"]
    proc = subprocess.run(cmd, timeout=240, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sys.stdout.write(proc.stdout[-4000:])
    oks = proc.stdout.count("torchrun worker ")
    if proc.returncode != 0 or oks != nproc:
        raise AssertionError(f"torchrun exited {proc.returncode} with {oks} of {nproc} workers ok")


# ---- launcher ----------------------------------------------------------------------------------------------------------
CASES = {"collectives": (case_collectives, 60), "async": (case_async, 60), "killed": (case_killed, KILL_TIMEOUT_S), "ddp": (case_ddp, 60),
         "callback_order": (case_callback_order, 60)}


def rank_main(case, rank, ws, init_file, queue):
    try:
        fn, timeout_s = CASES[case]
        dist.init_process_group("collie", init_method=f"file://{init_file}", rank=rank, world_size=ws,
                                timeout=datetime.timedelta(seconds=timeout_s))
        fn(rank, ws)
        if dist.is_initialized():  # the async case destroys its group itself
            dist.destroy_process_group()
        queue.put((rank, None))
    except BaseException:
        queue.put((rank, traceback.format_exc()))
        queue.close()
        queue.join_thread()  # os._exit would drop what the queue's thread has not sent yet
        os._exit(1)


def run_ranks(case, ws):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    init_file = tempfile.mktemp(prefix="collie_torch_test_")
    procs = [ctx.Process(target=rank_main, args=(case, r, ws, init_file, queue)) for r in range(ws)]
    for p in procs:
        p.start()
    deadline = time.time() + 240
    for p in procs:
        p.join(max(1, deadline - time.time()))
    errors = []
    for p in procs:
        if p.is_alive():
            p.kill()
            errors.append(f"{p.name} hung (killed)")
    while not queue.empty():
        rank, err = queue.get()
        if err:
            errors.append(f"rank {rank}: {err}")
    expected = ws - 1 if case == "killed" else ws
    ok = sum(1 for p in procs if p.exitcode == 0)
    if not errors and ok < expected:
        errors.append(f"{ok} of {expected} ranks exited cleanly: {[p.exitcode for p in procs]}")
    if os.path.exists(init_file):
        os.unlink(init_file)
    if errors:
        raise AssertionError("\n".join(errors))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case", choices=sorted(CASES) + ["torchrun", "torchrun_worker"])
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    if args.case == "torchrun_worker":
        torchrun_worker()
        return 0
    name = f"{args.case} (world size {args.world_size})"
    try:
        if args.case == "torchrun":
            run_torchrun(args.world_size)
        else:
            run_ranks(args.case, args.world_size)
    except AssertionError as e:
        print(f"FAIL {name}: {e}")
        return 1
    print(f"PASS {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
