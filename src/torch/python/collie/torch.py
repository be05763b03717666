"""collie as a torch.distributed backend.

Importing this module registers the backend "collie" with ``torch.distributed.Backend.register_backend``:

    import torch.distributed as dist
    import collie.torch  # noqa: F401
    dist.init_process_group("collie", init_method="env://")  # or file://, tcp://

The ranks meet through the c10d Store torch passes in (rank 0 publishes a collie unique id), the group's timeout
becomes collie's, and a lost rank makes pending calls raise RuntimeError naming it. CPU tensors only.
"""
import inspect

import torch
import torch.distributed as dist

from collie._torch_backend import ProcessGroupCollie, collie_version  # noqa: F401

BACKEND_NAME = "collie"
__all__ = ["ProcessGroupCollie", "BACKEND_NAME", "collie_version"]


def _create(store, rank, size, timeout):
    return ProcessGroupCollie(store, rank, size, timeout)


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return  # already registered (the module imported under another name)
    params = inspect.signature(dist.Backend.register_backend).parameters
    if "devices" in params:  # torch >= 2.1: a Backend for CPU tensors
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])
    else:
        dist.Backend.register_backend(BACKEND_NAME, _create)


_register()
