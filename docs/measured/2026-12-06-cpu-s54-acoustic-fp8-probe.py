"""Probe (session s54): what FP8 matrix products would buy the acoustic stage, and what they would cost in accuracy.

Issue 9 asks for acoustic ≤ 2.3 s a reference track on an H200; in BF16 that needs ~961 TFLOP/s against the 764
measured, so the next lever named in docs/benchmarks.md is FP8 — which the issue's numerics rule (the fast path no
further from FP32 than the plain BF16 one) rules out as a default. This probe measures the size of that lever before
any product code is written:

1. the four NAR products at the reference chunk's 5,373 rows — BF16 `F.linear` against `torch._scaled_mm` over e4m3
   (one scale per activation row, one per weight output channel, BF16 out), the activations' quantisation inside
   and outside the timing;
2. a velocity evaluation of the reference chunk on the acoustic engine (compiled layer, CUDA graph) with BF16
   products and with FP8 products (the same compiled layer maths with `linear` swapped), the engine's attention
   unchanged;
3. latents of a short request (3,000-token prefix, 1,500 frames, 8 ODE steps, as `farm bench acoustic` does)
   through FP32, the BF16 engine and the FP8 engine: max / mean abs from FP32.

Run on the device: python3 docs/measured/2026-12-06-cpu-s54-acoustic-fp8-probe.py out/ck
"""
from __future__ import annotations

import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, ".")
from farm.models import resolve_model  # noqa: E402
from stages import acoustic  # noqa: E402
from stages.acoustic import AcousticEngine, AcousticRequest, chunk_tokens, song_noise  # noqa: E402
from stages.compiled import compiled  # noqa: E402
from stages.quant import FP8, FP8_MAX, quantize_fp8  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import (AR, NAR, BranchWeights, ar_prefill, branch_weights,  # noqa: E402
                                layer_head, layer_tail, nar_kv_buffers)
from stages.weights import load_model  # noqa: E402


def quantize_rows(x: torch.Tensor):
    """x [M, K] → (e4m3 [M, K], FP32 scale [M, 1]): each row's largest magnitude maps to FP8_MAX."""
    amax = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / FP8_MAX
    return (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(FP8), scale


def fp8_linear(x, w, epilogue="none", residual=None):
    """x [..., K] · (values [N, K] e4m3, scale [N] FP32)ᵀ with the activations quantised per row; BF16 out."""
    values, scale = w
    lead = x.shape[:-1]
    x8, xs = quantize_rows(x.reshape(-1, x.shape[-1]))
    y = torch._scaled_mm(x8, values.t(), scale_a=xs, scale_b=scale[None], out_dtype=x.dtype).reshape(*lead, -1)
    if epilogue == "add":
        return residual + y
    if epilogue == "silu_mul":
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    return y


def _head8(x, in_norm, qkv8, qkv_s, q_norm, k_norm, cos, sin, d):
    w = BranchWeights(in_norm, (qkv8, qkv_s), q_norm, k_norm, None, None, None, None)
    return layer_head(x, w, cos, sin, d, linear=fp8_linear)


def _tail8(x, attn, o8, o_s, post_norm, gu8, gu_s, down8, down_s, d):
    w = BranchWeights(None, None, None, None, (o8, o_s), post_norm, (gu8, gu_s), (down8, down_s))
    return layer_tail(x, attn, w, d, linear=fp8_linear)


def fp8_engine(net, layout) -> AcousticEngine:
    """An acoustic engine whose NAR products run in FP8 (weights quantised per output channel once, here)."""
    table = {}
    for w in branch_weights(net, NAR):
        for m in (w.qkv, w.o, w.gate_up, w.down):
            table[m.data_ptr()] = quantize_fp8(m)
    head = compiled(_head8, fullgraph=True, dynamic=False)
    tail = compiled(_tail8, fullgraph=True, dynamic=False)

    def run_head(h, w, cos, sin, d):
        acoustic._length_dynamic((h, 1), (cos, 0), (sin, 0))
        return head(h, w.in_norm, *table[w.qkv.data_ptr()], w.q_norm, w.k_norm, cos, sin, d)

    def run_tail(h, attn, w, d):
        acoustic._length_dynamic((h, 1), (attn, 2))
        return tail(h, attn, *table[w.o.data_ptr()], w.post_norm, *table[w.gate_up.data_ptr()],
                    *table[w.down.data_ptr()], d)

    engine = AcousticEngine(net, layout)
    engine.head, engine.tail = run_head, run_tail
    engine._warm_up()
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


def products(net, rows: int) -> None:
    print(f"1. the NAR products at {rows} rows (ms; TFLOP/s)")
    w = branch_weights(net, NAR)[0]
    x = {k: torch.randn(rows, k, device="cuda", dtype=torch.bfloat16) for k in (2048, 6144)}
    quantise = compiled(quantize_rows, fullgraph=True, dynamic=False)
    total = {"bf16": 0.0, "fp8": 0.0, "fp8 fast accumulation": 0.0, "fp8+q": 0.0}
    for name, m in (("qkv", w.qkv), ("o", w.o), ("gate_up", w.gate_up), ("down", w.down)):
        a = x[m.shape[1]]
        values, scale = quantize_fp8(m)
        a8, as_ = quantise(a)
        flop = 2 * rows * m.shape[0] * m.shape[1]
        t = {"bf16": timed(lambda: F.linear(a, m), 50),
             "fp8": timed(lambda: torch._scaled_mm(a8, values.t(), scale_a=as_, scale_b=scale[None],
                                                   out_dtype=torch.bfloat16), 50),
             "fp8 fast accumulation": timed(lambda: torch._scaled_mm(
                 a8, values.t(), scale_a=as_, scale_b=scale[None], out_dtype=torch.bfloat16, use_fast_accum=True), 50),
             "fp8+q": timed(lambda: quantised_product(quantise, a, values, scale), 50)}
        for k in total:
            total[k] += t[k]
        print(f"  {name:8} {tuple(m.shape)}: " + ", ".join(f"{k} {v * 1e3:.3f} ({flop / v / 1e12:.0f})"
                                                       for k, v in t.items()))
    print(f"  a layer's four products: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in total.items())
          + f"; × 28 layers: bf16 {total['bf16'] * 28e3:.1f} ms, fp8 {total['fp8'] * 28e3:.1f}, "
          f"fp8 with quantisation {total['fp8+q'] * 28e3:.1f}")


def quantised_product(quantise, a, values, scale):
    a8, scale_a = quantise(a)
    return torch._scaled_mm(a8, values.t(), scale_a=scale_a, scale_b=scale[None], out_dtype=torch.bfloat16)


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
        print(f"2. a velocity evaluation, reference chunk ({len(ids)} AR tokens, {frames} frames), attention "
              f"{next(iter(engines.values())).attention.name}")
        out = {}
        for name, engine in engines.items():
            v = engine.evaluator(len(ids), len(ids), buffers)
            s = timed(lambda: v(x, 0.5), 20)
            out[name] = v(x, 0.5).float()
            print(f"  {name}: {s * 1e3:.2f} ms an evaluation, × 64 = {s * 64:.2f} s a chunk")
        if len(out) == 2:
            a, b = out.values()
            print(f"  the two velocities differ by max abs {(a - b).abs().max():.4f}, mean abs "
                  f"{(a - b).abs().mean():.5f} (velocity mean abs {a.abs().mean():.4f})")


def numerics(paths, cfg) -> None:
    rng = np.random.default_rng(1)
    prefix, frames = 3000, 1500
    request = AcousticRequest("numerics", tuple(int(t) for t in rng.integers(0, cfg.tokens.codec_offset, prefix)),
                              rng.integers(0, cfg.tokens.codebook, frames).astype(np.int32), seed=7, ode_steps=8)
    out = {}
    for name, dtype in (("fp32", torch.float32), ("bf16 engine", torch.bfloat16), ("fp8 engine", torch.bfloat16)):
        net = load_model(paths.model_dir, cfg, {AR, NAR}, device="cuda", dtype=dtype)
        if name == "fp8 engine":
            engine = fp8_engine(net, cfg.tokens)
        else:
            engine = AcousticEngine(net, cfg.tokens)
            if dtype == torch.float32:
                engine.head, engine.tail, engine.graphs = layer_head, layer_tail, False
        out[name] = engine.synthesize(request)
        del net, engine
        torch.cuda.empty_cache()
    print("3. latents of a 1,500-frame request (8 ODE steps) against FP32")
    for name in ("bf16 engine", "fp8 engine"):
        d = np.abs(out[name] - out["fp32"])
        print(f"  {name}: max abs {d.max():.4f}, mean abs {d.mean():.5f}")
    d = np.abs(out["fp8 engine"] - out["bf16 engine"])
    print(f"  fp8 against bf16: max abs {d.max():.4f}, mean abs {d.mean():.5f}; "
          f"latent mean abs {np.abs(out['fp32']).mean():.4f}")


def main(model_dir: str) -> None:
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    paths = resolve_model(model_dir, None)
    cfg = open_checkpoint(paths.model_dir, paths.vae_dir).cfg
    net = load_model(paths.model_dir, cfg, {AR, NAR}, device="cuda")
    with torch.inference_mode():
        products(net, 5373)
    engines = {"bf16 engine": AcousticEngine(net, cfg.tokens), "fp8 engine": fp8_engine(net, cfg.tokens)}
    evaluation(net, cfg, engines)
    del engines, net
    torch.cuda.empty_cache()
    numerics(paths, cfg)


if __name__ == "__main__":
    main(sys.argv[1])
