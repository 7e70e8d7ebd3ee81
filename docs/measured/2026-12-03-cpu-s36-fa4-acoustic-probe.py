"""FlashAttention-4 (CuTe DSL, `flash-attn-4` 4.0.0b40, its SM90 path) against the cuDNN attention the acoustic stage
uses today (2026-12-03, session s36; written on the CPU box). Why: a velocity evaluation of the reference chunk spends
37 of its ~67 ms in cuDNN's flash attention at ~552 TFLOP/s (s27 profile), while the GEMMs beside it run at
~760; an FA3-class kernel is reported at 650-750 TFLOP/s for head dim 128 without a mask on Hopper.

(1) Kernel level, the reference chunk's shapes (5,373 NAR queries, 16 heads; 15,745 keys, 8 KV heads; dim 128;
non-causal, no mask): µs per call and TFLOP/s for SDPA as the engine calls it (cuDNN), FA4 (default, pack_gqa on and
off), SDPA routed to FA4 through `torch.nn.attention.activate_flash_attention_impl` where this torch has it; each
output's max / mean abs from an FP32 attention; repeatable; inside a CUDA graph.
(2) Engine level: `AcousticEngine.evaluator` (compiled layers, one CUDA graph per chunk) with attention "sdpa"
and "fa4" (stages/nar_attention.py, each with its own K/V buffer layout): ms per evaluation, twice each in turn, and the velocities' max / mean abs apart.

Run on an H200 from the repository root, with the FA4 wheels unpacked in out/fa4site and out/ck written by
`farm init-checkpoint out/ck --config yue2-3b --device cuda`."""
import os
import pathlib
import sys
import time

sys.path[:0] = [".", "out/fa4site", "out/fa4site/nvidia_cutlass_dsl/dsl_packages"]
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

LQ, LK, H, KVH, D = 5373, 15745, 16, 8, 128
FLOP = 4 * LQ * LK * H * D


def us(fn, n=20):
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / n * 1e6


def fp32_attention(q, k, v):
    qf, kf, vf = q.float(), k.float().repeat_interleave(H // KVH, 1), v.float().repeat_interleave(H // KVH, 1)
    out = torch.empty_like(qf)
    for a in range(0, LQ, 1024):     # by query tiles: the full FP32 score matrix is 5.4 GB
        s = (qf[:, :, a:a + 1024] @ kf.transpose(-1, -2)) / D ** 0.5
        out[:, :, a:a + 1024] = torch.softmax(s, -1) @ vf
    return out


def report(name, fn, ref):
    try:
        t = us(fn)
        o = fn().float()
        again = fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            held = fn()
        g.replay()
        torch.cuda.synchronize()
        err = (o - ref).abs()
        print(f"{name:<44} {t:8.1f} µs {FLOP / t / 1e6:6.1f} TFLOP/s  vs FP32 max {err.max().item():.3e} mean "
              f"{err.mean().item():.3e}  repeatable {torch.equal(o, again.float())}  graph == eager "
              f"{torch.equal(held.float(), o)}", flush=True)
    except Exception as e:  # a probe: say what failed and go on with the others
        print(f"{name:<44} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


def main() -> None:
    from flash_attn.cute.interface import flash_attn_func
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(torch.__version__, torch.cuda.get_device_name(), flush=True)
    q = torch.randn(1, H, LQ, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(1, KVH, LK, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(1, KVH, LK, D, device=dev, dtype=torch.bfloat16)
    ref = fp32_attention(q, k, v)

    # the same values stored [B, S, H, D] (FA4's own layout), seen as [B, H, S, D] views
    qs, ks, vs = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v))

    def fa4(pack=None, a=q, b=k, c=v):
        return lambda: flash_attn_func(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2),
                                       pack_gqa=pack)[0].transpose(1, 2)

    t0 = time.perf_counter()
    fa4()()
    torch.cuda.synchronize()
    print(f"FA4 first call (JIT compile) {time.perf_counter() - t0:.1f} s", flush=True)
    for rnd in range(2):
        print(f"-- round {rnd}", flush=True)
        report("SDPA as the engine calls it (cuDNN)", lambda: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
               ref)
        report("SDPA (cuDNN) over [B, S, H, D] storage", lambda: F.scaled_dot_product_attention(
            qs, ks, vs, enable_gqa=True), ref)
        report("FA4 flash_attn_func (defaults)", fa4(), ref)
        report("FA4 over [B, S, H, D] storage", fa4(None, qs, ks, vs), ref)
        report("FA4 flash_attn_func pack_gqa=True", fa4(True), ref)
        report("FA4 flash_attn_func pack_gqa=False", fa4(False), ref)
    try:
        from torch.nn.attention import SDPBackend, activate_flash_attention_impl, sdpa_kernel
        activate_flash_attention_impl("FA4")
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            report("SDPA flash backend routed to FA4", lambda: F.scaled_dot_product_attention(
                q, k, v, enable_gqa=True), ref)
    except Exception as e:
        print(f"SDPA routed to FA4: {type(e).__name__}: {str(e)[:300]}", flush=True)
    del ref
    torch.cuda.empty_cache()
    engine_level(flash_attn_func)


def engine_level(flash_attn_func) -> None:
    from stages.acoustic import AcousticEngine, chunk_tokens, song_noise
    from stages.requests import open_checkpoint
    from stages.transformer import AR, NAR, ar_prefill, nar_kv_buffers
    from stages.weights import load_model

    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, NAR}, device="cuda")
    engines = {"(a) SDPA attention (cuDNN)": AcousticEngine(net, cfg.tokens, "sdpa"),
               "(b) FA4 attention": AcousticEngine(net, cfg.tokens, "fa4")}
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(0, cfg.tokens.codec_offset, 5000)]
    codes = rng.integers(0, cfg.tokens.codebook, 5371).astype(np.int32)
    ids = chunk_tokens(prefix, codes, 0, 5371, cfg.tokens)
    torch.inference_mode().__enter__()
    _, kv = ar_prefill(net, torch.tensor(ids, device="cuda"))
    evals = {name: e.evaluator(len(ids), len(ids), nar_kv_buffers(kv, len(ids), 5371 + 2, e.attention.seq_major))
             for name, e in engines.items()}
    del kv
    x = song_noise(5371, cfg.model.latent_dim, 0).to(device="cuda", dtype=torch.bfloat16)
    outs = {}
    for rnd in range(2):
        for name, f in evals.items():
            t = us(lambda: f(x, 0.5), n=10) / 1e3
            outs[name] = f(x, 0.5).float()
            print(f"round {rnd} {name:<30} {t:7.2f} ms per evaluation", flush=True)
    a, b = outs.values()
    print(f"velocity (a) against (b): max abs {(a - b).abs().max().item():.4g}, mean abs "
          f"{(a - b).abs().mean().item():.4g}; |v| mean {a.abs().mean().item():.4g}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("CUTE_DSL_LOG_LEVEL", "0")
    main()
