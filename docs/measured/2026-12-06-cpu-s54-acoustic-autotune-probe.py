"""Probe (session s54): the acoustic layer compiled with Inductor's max-autotune.

The engine compiles each NAR layer's head and tail with Inductor's defaults (stages/acoustic.py): the products go
to cuBLAS and the norms, RoPE, SiLU·up and residual adds run as separate Triton kernels (~4 ms of a ~59 ms
evaluation on an H200). With `max_autotune` Inductor also tries its Triton matmul templates, which can take the
elementwise work after a product into the product's epilogue, and keeps whichever is fastest. No session had
measured it. Printed: ms an evaluation of the reference chunk for both compiles, the compile times, and the
latents of a short request (as `farm bench acoustic`'s numerics) against FP32 for both.

Run on the device: python3 docs/measured/2026-12-06-cpu-s54-acoustic-autotune-probe.py out/ck
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch

sys.path.insert(0, ".")
from farm.models import resolve_model  # noqa: E402
from stages import acoustic  # noqa: E402
from stages.acoustic import AcousticEngine, AcousticRequest, chunk_tokens, song_noise  # noqa: E402
from stages.compiled import compiled  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, NAR, ar_prefill, layer_head, layer_tail, nar_kv_buffers  # noqa: E402
from stages.weights import load_model  # noqa: E402


def _head(x, in_norm, qkv, q_norm, k_norm, cos, sin, d):
    return acoustic._nar_head(x, in_norm, qkv, q_norm, k_norm, cos, sin, d)


def _tail(x, attn, o, post_norm, gate_up, down, d):
    return acoustic._nar_tail(x, attn, o, post_norm, gate_up, down, d)


def autotuned_engine(net, layout) -> AcousticEngine:
    """The engine with its layer compiled under max_autotune (the same maths, lengths dynamic; functions of their
    own, so TorchDynamo keeps their compiles apart from the engine's). Not warmed up on a small chunk as the engine
    is: Inductor tunes a dynamic length's products at the length of the first call, so the first call here is the
    chunk measured."""
    options = {"max_autotune": True}
    head = compiled(_head, fullgraph=True, dynamic=False, options=options)
    tail = compiled(_tail, fullgraph=True, dynamic=False, options=options)

    def run_head(h, w, cos, sin, d):
        acoustic._length_dynamic((h, 1), (cos, 0), (sin, 0))
        return head(h, w.in_norm, w.qkv, w.q_norm, w.k_norm, cos, sin, d)

    def run_tail(h, attn, w, d):
        acoustic._length_dynamic((h, 1), (attn, 2))
        return tail(h, attn, w.o, w.post_norm, w.gate_up, w.down, d)

    engine = AcousticEngine(net, layout)
    engine.head, engine.tail = run_head, run_tail
    return engine


def timed(fn, n: int) -> float:
    fn()
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n


def build(name: str, make):
    start = time.perf_counter()
    engine = make()
    print(f"  {name}: engine built in {time.perf_counter() - start:.1f} s")
    return engine


def evaluation(net, cfg, engines: dict) -> None:
    prefix_tokens, frames = 5000, 5371
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix_tokens)]
    codes = rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, frames, cfg.tokens)
    with torch.inference_mode():
        _, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
        seq_major = next(iter(engines.values())).attention.seq_major
        buffers = nar_kv_buffers(kv, len(ids), frames + 2, seq_major)
        del kv
        x = song_noise(frames, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)
        print(f"a velocity evaluation, reference chunk ({len(ids)} AR tokens, {frames} frames), attention "
              f"{next(iter(engines.values())).attention.name}")
        out = {}
        for name, engine in engines.items():
            v = engine.evaluator(len(ids), len(ids), buffers)
            first = time.perf_counter()
            v(x, 0.5)
            torch.cuda.synchronize()
            first = time.perf_counter() - first
            s = timed(lambda: v(x, 0.5), 20)
            out[name] = v(x, 0.5).float()
            print(f"  {name}: {s * 1e3:.2f} ms an evaluation (× 64 = {s * 64:.2f} s a chunk); first call at this "
                  f"length {first:.1f} s")
        a, b = out.values()
        d = (a - b).abs()
        print(f"  the two velocities differ by max abs {d.max():.4f}, mean abs {d.mean():.5f}")


def numerics(paths, cfg) -> None:
    rng = np.random.default_rng(1)
    prefix, frames = 3000, 1500
    request = AcousticRequest("numerics", tuple(int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix)),
                              rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32), seed=7, ode_steps=8)
    out = {}
    for name, dtype in (("fp32", torch.float32), ("default compile", torch.bfloat16),
                        ("max-autotune compile", torch.bfloat16)):
        net = load_model(paths.model_dir, cfg, {AR, NAR}, device="cuda", dtype=dtype)
        if name == "max-autotune compile":
            engine = autotuned_engine(net, cfg.tokens)
        else:
            engine = AcousticEngine(net, cfg.tokens)
            if dtype == torch.float32:
                engine.head, engine.tail, engine.graphs = layer_head, layer_tail, False
        out[name] = engine.synthesize(request)
        del net, engine
        torch.cuda.empty_cache()
    print("latents of a 1,500-frame request (8 ODE steps) against FP32")
    for name in ("default compile", "max-autotune compile"):
        d = np.abs(out[name] - out["fp32"])
        print(f"  {name}: max abs {d.max():.4f}, mean abs {d.mean():.5f}")


def main(model_dir: str) -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    paths = resolve_model(model_dir, None)
    cfg = open_checkpoint(paths.model_dir, paths.vae_dir).cfg
    net = load_model(paths.model_dir, cfg, {AR, NAR}, device="cuda")
    engines = {"default compile": build("default compile", lambda: AcousticEngine(net, cfg.tokens)),
               "max-autotune compile": build("max-autotune compile", lambda: autotuned_engine(net, cfg.tokens))}
    evaluation(net, cfg, engines)
    del engines, net
    torch.cuda.empty_cache()
    numerics(paths, cfg)


if __name__ == "__main__":
    main(sys.argv[1])
