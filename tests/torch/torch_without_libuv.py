#!/usr/bin/env python3
"""torch.distributed's TCPStore without libuv, for torch builds that lack it (Debian's torch 2.x).

From torch 2.4 TCPStore asks for its libuv server by default, and torchrun's agent and the env:// rendezvous under
torchrun take that default, so on a torch built without libuv every torchrun job fails at once with "use_libuv was
requested but PyTorch was build without libuv support", whatever the backend (gloo too). patch() makes TCPStore
default to use_libuv=False in the modules that create one; run as a script, this file is torchrun with the patch:
    python3 torch_without_libuv.py --nproc_per_node 2 ... script.py
Nothing changes on a torch that has libuv or predates it (lacks_libuv() is then False).
"""
import datetime
import importlib
import runpy
import sys

import torch.distributed as dist


def lacks_libuv():
    try:
        dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10))
    except RuntimeError as e:
        return "libuv" in str(e)
    return False


def patch():
    base = dist.TCPStore

    class TCPStore(base):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_libuv", False)
            super().__init__(*args, **kwargs)

    # importlib, not "import a.b as c": torch.distributed.rendezvous is also the name of a function there.
    for name in ("torch.distributed", "torch.distributed.rendezvous",
                 "torch.distributed.elastic.rendezvous.c10d_rendezvous_backend",
                 "torch.distributed.elastic.rendezvous.static_tcp_rendezvous"):
        importlib.import_module(name).TCPStore = TCPStore


if __name__ == "__main__":
    if lacks_libuv():
        patch()
    sys.argv[0] = "torchrun"
    runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
