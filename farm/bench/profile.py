"""Where one AR step's time goes: the kernels of the engine's replayed block, by kind, against the step's wall time.

A few forced-length requests are admitted and a few captured blocks (`engine.block` steps each) are replayed under
the PyTorch profiler (CUPTI sees the kernels inside a CUDA graph). Kernel times are summed per name and per kind and
divided by the steps. Our kernels are launched early (programmatic dependent launch) and wait for the kernel before
them, and that wait counts in their durations: the durations overlap and can sum to more than the wall time, so
the kernels that do not overlap (cuBLAS, PyTorch's, Inductor's) are the ones to read as time. The kinds follow the
kernels' names: ours carry their Triton function names; the lm_head is cuBLAS; the sampler is our candidate
kernels (`chunk_best`, `row_best`; PyTorch's top-k where they do not run) and our `pick`. Not responsible for the
floors (ar.py).
"""
from __future__ import annotations

import re
import time
from collections import defaultdict

# (kind, pattern on the kernel name), first match wins
KINDS = (("layer chain (o, gate/up, down, next q/k/v)", r"layer_chain"),
         ("GEMMs of the layers (skinny)", r"skinny_gemm"),
         ("decode attention", r"split_kv_attention|merge_and_store"),
         ("lm_head (cuBLAS)", r"gemm|gemv|nvjet|cutlass|xmma|cublas"),
         ("candidates (scores, top-256)", r"chunk_best|row_best|topk|sort|radix|Sort|gatherTopK|bitonic"),
         ("other (sampler pieces, embedding, norms, copies)", r""))


def kind_of(name: str) -> str:
    return next(kind for kind, pattern in KINDS if re.search(pattern, name))


def profile_step(engine, requests: list, *, blocks: int = 3) -> dict:
    """Kernels per step of the forced-length `requests` (of one context and kind, long enough for `blocks` + 2
    blocks) decoded together: {kind: µs, count}, the top names, the wall time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    cuda = engine.device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for request in requests:
        engine.admit(request)
    engine.step()                                           # warm
    sync()
    with profile(activities=[ProfilerActivity.CUDA if cuda else ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        for _ in range(blocks):
            engine.step()
        sync()
        wall = time.perf_counter() - start
    while engine.live:                                      # finish the requests: the engine is reused
        engine.step()
    steps = blocks * engine.block
    per_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():    # on a CPU (tests): the top-level operators stand in for kernels
        kernel = event.device_type == torch.autograd.DeviceType.CUDA if cuda else event.cpu_parent is None
        if kernel and not event.name.startswith("Memcpy"):
            per_name[event.name][0] += event.device_time if cuda else event.cpu_time_total
            per_name[event.name][1] += 1
    by_kind: dict[str, list[float]] = {k: [0.0, 0] for k, _ in KINDS}
    for name, (us, count) in per_name.items():
        by_kind[kind_of(name)][0] += us
        by_kind[kind_of(name)][1] += count
    top = sorted(per_name.items(), key=lambda item: -item[1][0])[:20]
    kernels_us = sum(us for us, _ in by_kind.values()) / steps
    return {"rows": len(requests), "context": len(requests[0].prefix), "kind": requests[0].phase, "steps": steps,
            "step_us": wall / steps * 1e6, "kernels_us": kernels_us,
            "kinds": {k: {"us": us / steps, "per_step": n / steps} for k, (us, n) in by_kind.items()},
            "top": [{"name": name[:90], "us": us / steps, "per_step": n / steps} for name, (us, n) in top]}


def print_profile(p: dict, console) -> None:
    console.print(f"step profile, {p['rows']} row(s) of {p['kind']} at {p['context']} keys ({p['steps']} replayed "
                  f"steps): wall {p['step_us']:.0f} µs per step, kernel durations {p['kernels_us']:.0f} µs (ours "
                  f"overlap the kernel before them: launched early, they wait for it)")
    for kind, k in p["kinds"].items():
        console.print(f"  {kind:<52} {k['us']:8.1f} µs  {k['per_step']:6.1f} kernels")
    for t in p["top"]:
        console.print(f"    {t['us']:8.1f} µs  ×{t['per_step']:5.1f}  {t['name']}")
