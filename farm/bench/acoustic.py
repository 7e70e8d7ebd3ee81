"""`farm bench acoustic`: one acoustic chunk of the reference track's geometry, its velocity evaluation timed on the
engine's path (compiled on CUDA, a replayed CUDA graph after its first call) and on the plain eager path, against
the matrix-multiply rate measured in the same run (where the engine's attention is FlashAttention-4, the same
engine with SDPA's attention and with FA4 unsplit beside it: stages/nar_attention.py); and the latents of the
engine and the plain path against an FP32 run of the same request.

FLOP per evaluation are the planner's (`cluster.workload.ModelShape.velocity_eval_flop`): the linear layers over
the NAR rows plus attention of every NAR row over the prefix and the NAR rows. `acoustic_mfu` is that count over
the evaluation's time, as a share of the measured rate.
"""
from __future__ import annotations

import functools
import json
import time
from pathlib import Path

from .song import environment

REFERENCE_PREFIX = 5000      # the reference track's semantic prefix (prompt + score), tokens
REFERENCE_FRAMES = 5371      # its semantic codes = latent frames


def run_acoustic_bench(*, model: str, vae: str | None, device: str, prefix_tokens: int, frames: int, evals: int,
                       json_out: Path | None) -> dict:
    import numpy as np
    import torch

    from cluster.workload import ModelShape
    from stages.acoustic import AcousticEngine, chunk_tokens, song_noise
    from stages.requests import open_checkpoint
    from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers, velocity
    from stages.weights import load_model

    from ..devices import pick_device
    from ..models import resolve_model

    device = pick_device(device)
    paths = resolve_model(model, vae)
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    cfg = ckpt.cfg
    prefix_tokens = min(prefix_tokens, cfg.model.context // 2)
    frames = max(1, min(frames, (cfg.model.context - prefix_tokens - 3) // 2))
    shape = ModelShape.yue2_3b() if cfg.name == "yue2-3b" else ModelShape.tiny()
    net = load_model(paths.model_dir, cfg, {AR, NAR}, device=device)
    engine = AcousticEngine(net, cfg.tokens)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix_tokens)]
    codes = rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, frames, cfg.tokens)
    engines = {"engine": engine}
    if engine.attention.name != "sdpa":       # the same engine with SDPA's attention, timed beside it
        engines["engine with sdpa"] = AcousticEngine(net, cfg.tokens, "sdpa")
    if engine.attention.name == "fa4":        # and with FA4 unsplit (nar_attention.py, "the last wave")
        engines["engine, fa4 whole"] = AcousticEngine(net, cfg.tokens, "fa4-whole")
    with torch.inference_mode():
        _, kv = ar_prefill(net, torch.tensor(ids, device=device))
        buffers = {seq_major: nar_kv_buffers(kv, len(ids), frames + 2, seq_major)
                   for seq_major in {e.attention.seq_major for e in engines.values()} | {False}}
        del kv
        x = song_noise(frames, cfg.model.latent_dim, 0).to(device=device, dtype=engine.dtype)
        runs = {name: functools.partial(e.evaluator(len(ids), buffers[e.attention.seq_major]), x, 0.5)
                for name, e in engines.items()}
        runs["plain"] = lambda: velocity(net, None, len(ids), x, 0.5, 0, buffers[False])
        seconds = {name: _seconds(fn, evals, device) for name, fn in runs.items()}
        rate = matmul_rate(torch, device, engine.dtype)
    flop = shape.velocity_eval_flop(len(ids), frames + 2)
    report = {"environment": {**environment(device), "model": cfg.name}, "attention": engine.attention.name,
              "prefix_tokens": prefix_tokens,
              "frames": frames, "ar_tokens": len(ids), "flop_per_eval": flop, "matmul_flop_s": rate,
              "eval_ms": {k: v * 1e3 for k, v in seconds.items()},
              "mfu": {k: flop / v / rate for k, v in seconds.items()},
              "evals_per_chunk": shape.ode_evals,
              "numerics": numerics(paths, cfg, device, engine.dtype)}
    print_report(report)
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=2) + "\n")
    return report


def _seconds(fn, evals: int, device: str) -> float:
    import torch

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    fn()                          # compiles on the first call on CUDA
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(evals):
        fn()
    sync()
    return (time.perf_counter() - start) / evals


def matmul_rate(torch, device: str, dtype) -> float:
    """FLOP/s of a large square matrix product in the model dtype on the device (best of 5 after a warm-up)."""
    n = 8192 if device.startswith("cuda") else 512
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    best = float("inf")
    for i in range(6):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        if i:
            best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best


def numerics(paths, cfg, device: str, dtype) -> dict:
    """A short request (up to 1,500 frames, 8 ODE steps) through FP32 and through the model dtype on both paths:
    max / mean abs distance of each path's latents from the FP32 ones."""
    import numpy as np
    import torch

    from stages.acoustic import AcousticEngine, AcousticRequest
    from stages.transformer import AR, NAR, layer_head_into, layer_tail_open
    from stages.weights import load_model

    rng = np.random.default_rng(1)
    prefix = min(3000, cfg.model.context // 4)
    frames = max(1, min(1500, (cfg.model.context - prefix - 3) // 2))
    request = AcousticRequest("numerics", tuple(int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix)),
                              rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32), seed=7, ode_steps=8)
    out = {}
    for name, run_dtype, engine_path in (("fp32", torch.float32, False), ("plain", dtype, False),
                                         ("engine", dtype, True)):
        net = load_model(paths.model_dir, cfg, {AR, NAR}, device=device, dtype=run_dtype)
        engine = AcousticEngine(net, cfg.tokens)
        if not engine_path:
            engine.head, engine.tail, engine.graphs = layer_head_into, layer_tail_open, False
        out[name] = engine.synthesize(request)
        del net, engine
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return {name: {"max_abs": float(np.abs(out[name] - out["fp32"]).max()),
                   "mean_abs": float(np.abs(out[name] - out["fp32"]).mean())} for name in ("plain", "engine")}


def print_report(r: dict) -> None:
    env = r["environment"]
    print(f"farm bench acoustic — {env['model']} on {env.get('gpu', env['device'])}, torch {env['torch']}, "
          f"{env['date']}: one chunk of {r['ar_tokens']} AR tokens (prefix {r['prefix_tokens']} + codes) and "
          f"{r['frames']} latent frames; {_flop(r['flop_per_eval'])} per velocity evaluation; measured "
          f"matrix-multiply rate {_flop(r['matmul_flop_s'])}/s; the engine's attention: {r.get('attention', 'sdpa')}")
    for name, ms in r["eval_ms"].items():
        print(f"  {name:6} path: {ms:8.2f} ms per evaluation, {r['mfu'][name] * 100:5.1f} % of the measured rate; "
              f"{r['evals_per_chunk']} evaluations = {ms * r['evals_per_chunk'] / 1e3:.2f} s per chunk")
    for name in ("plain", "engine"):
        n = r["numerics"][name]
        print(f"  latents vs FP32 ({name} path): max abs {n['max_abs']:.4f}, mean abs {n['mean_abs']:.5f}")



def _flop(value: float) -> str:
    return f"{value / 1e12:.2f} TFLOP" if value >= 1e12 else f"{value / 1e9:.2f} GFLOP"
