"""A CUDA stream in a green context of its own: what the AR stage's thread issues its work on when its card also
runs the acoustic or decode stage.

Measured on an H200 (docs/benchmarks.md, 2026-12-04, twelfth session; the probe
`docs/measured/2026-12-04-cpu-s41-green-corun-probe.py`): with the AR step's work issued on a stream of a green
context of 40 SMs, the acoustic stage beside it keeps 86 % of its rate instead of 60 % (24 semantic rows of the
reference context), 90 % instead of 78 % (12 plan rows), while the AR step keeps its rate, alone and beside the
acoustic stage. The step's CUDA graphs are captured on ordinary streams, and a graph captured there is not held to
the green context's SMs when it is replayed (its kernels were seen on all 132), so the layer chain's programs, one
per SM, all stay resident; the AR thread's eager kernels (prefill, the host's reads) are held to the 40 SMs. Why
the acoustic stage gains was not worked out; the probe's runs are the evidence, and a context of 96 SMs gave less
(82-83 %). A green context needs driver support (CUDA 12.4 or later); where any step fails, the caller gets None
and keeps its ordinary stream.

The driver API is called through ctypes: torch's own wrapper (`torch.cuda.green_contexts`) hands out a stream of
the green context only from torch 2.13 on, and the GPU image here runs 2.11."""
from __future__ import annotations

import ctypes
import logging

SMS = 40                       # the AR context's SMs (docs/benchmarks.md: 40 gave the acoustic stage the most)
_RESOURCE_BYTES = 4096         # more than sizeof(CUdevResource) in any CUDA 12/13 header; one struct per buffer
_SM_RESOURCE = 1               # CU_DEV_RESOURCE_TYPE_SM
_DEFAULT_STREAM = 1            # CU_GREEN_CTX_DEFAULT_STREAM (required by cuGreenCtxCreate)
_NON_BLOCKING = 1              # CU_STREAM_NON_BLOCKING (required by cuGreenCtxStreamCreate)

log = logging.getLogger(__name__)
_kept: list = []               # the contexts live as long as the process: a stream outlives nothing it runs in


def stream(torch, sms: int = SMS, priority: int = -5):
    """A torch stream of a new green context holding `sms` SMs of the current device, or None where the driver
    cannot make one. `priority`: the stream's (a lower number is higher; clamped by the driver to its range)."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        log.info("no green context: %s", e)
        return None
    dev, desc, ctx, handle = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    whole, part, rest = (ctypes.create_string_buffer(_RESOURCE_BYTES) for _ in range(3))
    groups = ctypes.c_uint(1)
    calls = (("cuDeviceGet", lambda f: f(ctypes.byref(dev), torch.cuda.current_device())),
             ("cuDeviceGetDevResource", lambda f: f(dev, whole, _SM_RESOURCE)),
             ("cuDevSmResourceSplitByCount", lambda f: f(part, ctypes.byref(groups), whole, rest, 0, sms)),
             ("cuDevResourceGenerateDesc", lambda f: f(ctypes.byref(desc), part, 1)),
             ("cuGreenCtxCreate", lambda f: f(ctypes.byref(ctx), desc, dev, _DEFAULT_STREAM)),
             ("cuGreenCtxStreamCreate", lambda f: f(ctypes.byref(handle), ctx, _NON_BLOCKING, priority)))
    for name, call in calls:
        fn = getattr(cu, name, None)
        result = call(fn) if fn is not None else "missing"
        if result != 0:
            log.info("no green context: %s returned %s", name, result)
            return None
    _kept.append(ctx)
    return torch.cuda.ExternalStream(handle.value)
