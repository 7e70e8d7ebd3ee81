"""torch.compile for the stage engines, safe when several engines share one process.

A farm worker runs the AR, acoustic and decode engines on threads of their own. TorchDynamo keeps one
process-wide flag while it traces a function, and any compiled function called from another thread meanwhile
fails ("Detected that you are using FX to symbolically trace a dynamo-optimized function") — on an H200 the
decode thread's first compile failed four acoustic calls that way. So every call of a compiled function here takes
one process-wide lock: a compile then never overlaps another compiled call. The lock is held only while the call
launches its kernels (they run asynchronously on the caller's stream), and CUDA graph replays never take it.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch

_LOCK = threading.RLock()


def compiled(fn: Callable, **settings) -> Callable:
    """`torch.compile(fn, **settings)`, each call under the process-wide compile lock."""
    inner = torch.compile(fn, **settings)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        with _LOCK:
            return inner(*args, **kwargs)

    return call


_SHARED: dict = {}


def shared(fn: Callable) -> Callable:
    """`fn` compiled once per process (fullgraph, static shapes), shared by every engine that runs it; Inductor's
    kernels use programmatic dependent launch where the card has it (Hopper on), like our Triton kernels."""
    if fn not in _SHARED:
        from torch._inductor import config as inductor

        options = {"triton.enable_pdl": True} if hasattr(inductor.triton, "enable_pdl") else {}
        _SHARED[fn] = compiled(fn, fullgraph=True, dynamic=False, options=options)
    return _SHARED[fn]
