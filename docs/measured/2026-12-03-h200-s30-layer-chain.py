"""The layer-chain kernel on an H200 (2026-12-03, session s30): o → gate/up → down → next q/k/v as one persistent
Gluon launch (stages/layer_chain.py) against the same four products as separate skinny-GEMM launches.
1. Kernel level, yue2-3b shapes, 28 layers of random weights in turn (nothing served from L2), 32 rows:
   - numbers: the chain's outputs against the separate kernels' and against an FP32 product chain, max abs;
   - batch invariance: a row computed among 31 other random rows, alone as a 1-row call and among other rows gives
     the same bits;
   - µs per layer, CUDA graph over the 28 layers, for several tilings, the separate launches beside them.
2. The whole step (`--engine`): the engine with and without the chain on one loaded model, forced-length requests,
   ms per step at 1 row (three contexts) and 12 and 24 rows; batch invariance and the teacher-forced numerics of
   the chained engine.
--diag adds timing-only variants that leave out parts of the kernel (the DIAG flags of commits ed6e5d3 to a6725aa,
taken out again in 9cf0be7: 1 no norm factor, 2 no wait for the signal warp, 4 no residual and no sums of squares).
Run from the repository root on the GPU machine (after `farm init-checkpoint out/ck --config yue2-3b --device cuda`
for --engine): python docs/measured/2026-12-03-h200-s30-layer-chain.py [--engine] [--kernel]"""
import pathlib
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, _time_graph, batch_invariance, copy_rate, numerics, weight_bytes  # noqa: E402
from stages import layer_chain, skinny_gemm  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6


def kernel_level() -> None:
    torch.manual_seed(0)
    dev = "cuda"
    layers = [dict(o=torch.randn(H, H, device=dev, dtype=torch.bfloat16) * H ** -0.5,
                   gu=torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * H ** -0.5,
                   d=torch.randn(H, I, device=dev, dtype=torch.bfloat16) * I ** -0.5,
                   q=torch.randn(Q, H, device=dev, dtype=torch.bfloat16) * H ** -0.5) for _ in range(L + 1)]
    for w in layers:    # the chain reads gate/up with its rows paired (since session s31)
        w["gup"] = layer_chain.pair_rows(w["gu"])
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    state = layer_chain.words(torch.device(dev))

    def separate(x, w, nxt):
        h = skinny_gemm.linear(a, w["o"], "add", x)
        g = skinny_gemm.linear(h, w["gu"], "silu_mul", None, EPS)
        out = skinny_gemm.linear(g, w["d"], "add", h)
        return out, skinny_gemm.linear(out, nxt["q"], "none", None, EPS)

    def fp32(x, w, nxt):
        f = {k: v.float() for k, v in w.items()}
        h = x.float() + a.float() @ f["o"].T
        hn = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        gu = hn @ f["gu"].T
        g = torch.nn.functional.silu(gu[:, :I]) * gu[:, I:]
        out = h + g @ f["d"].T
        on = out * torch.rsqrt(out.pow(2).mean(-1, keepdim=True) + EPS)
        return out, on @ nxt["q"].float().T

    for t in (layer_chain.TILING,):
        got = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"], EPS, state,
                                  t)
        torch.cuda.synchronize()
        sep = separate(x0, layers[0], layers[1])
        ref = fp32(x0, layers[0], layers[1])
        for name, g_, s_, r_ in zip(("out", "qkv"), got, sep, ref):
            print(f"{name}: chain vs separate max abs {(g_.float() - s_.float()).abs().max().item():.3e}; chain vs "
                  f"FP32 {(g_.float() - r_).abs().max().item():.3e}; separate vs FP32 "
                  f"{(s_.float() - r_).abs().max().item():.3e} (max |FP32| {r_.abs().max().item():.2f}); "
                  f"barrier errors {int(state[0])}", flush=True)
        # batch invariance: row 5 among other rows, and alone
        other_a, other_x = torch.randn_like(a), torch.randn_like(x0)
        other_a[5], other_x[5] = a[5], x0[5]
        mixed = layer_chain._launch(other_a, other_x, layers[0]["o"], layers[0]["gup"], layers[0]["d"],
                                    layers[1]["q"], EPS, state, t)
        last = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], None, EPS, state, t)
        torch.cuda.synchronize()
        print(f"batch invariance: among other rows {all(torch.equal(g_[5], m_[5]) for g_, m_ in zip(got, mixed))}; "
              f"without the next q/k/v the same layer output {torch.equal(last[0], got[0])}; barrier errors "
              f"{int(state[0])}", flush=True)
        try:
            alone = layer_chain._launch(a[5:6], x0[5:6], layers[0]["o"], layers[0]["gup"], layers[0]["d"],
                                        layers[1]["q"], EPS, state, t)
            torch.cuda.synchronize()
            print(f"row 5 alone (a 1-row call): {all(torch.equal(g_[5], m_[0]) for g_, m_ in zip(got, alone))}",
                  flush=True)
        except Exception as e:
            print(f"a 1-row call failed: {type(e).__name__}: {str(e)[:300]}", flush=True)

    def run_separate():
        x = x0
        for layer in range(L):
            x, _ = separate(x, layers[layer], layers[layer + 1])

    us = _time_graph(run_separate) / L * 1e6
    nbytes = sum(layers[0][k].numel() * 2 for k in ("o", "gu", "d", "q"))
    print(f"separate launches (skinny GEMMs, engine tiles): {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s)",
          flush=True)
    tilings = [layer_chain.TILING] + [replace(layer_chain.TILING, **kw) for kw in (
        dict(bn_o=16, bn_d=16), dict(bn_o=16), dict(bn_d=16), dict(stages=14), dict(stages=16, xstages=5),
        dict(stages=10, xstages=8), dict(bn_q=16), dict(stages=8, xstages=4))]
    if "--diag" in sys.argv:    # timing-only variants: what each part of the epilogue and the waits costs
        tilings = [(layer_chain.TILING, d) for d in (0, 1, 2, 4, 7)]
        tilings += [(replace(layer_chain.TILING, xstages=8), 0), (replace(layer_chain.TILING, stages=16, xstages=4), 0),
                    (replace(layer_chain.TILING, bn_o=16, bn_d=16), 0)]
    else:
        tilings = [(t, 0) for t in tilings]
    for t, diag in tilings:
        def run_chain():
            x = x0
            for layer in range(L):
                x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                           layers[layer + 1]["q"], EPS, state, t, *((diag,) if diag else ()))
        try:
            us = _time_graph(run_chain) / L * 1e6
            print(f"chain {t} diag {diag}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); barrier errors "
                  f"{int(state[0])}", flush=True)
        except Exception as e:       # a probe: report and go on
            print(f"chain {t}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


def engine_level() -> None:
    from stages.ar import AREngine
    from stages.kv_cache import token_bytes
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD
    from stages.weights import load_model

    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    print(f"copy rate {rate / 1e12:.2f} TB/s", flush=True)
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    engines = {chain: AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                               compile=True, chain=chain) for chain in (False, True)}
    wbytes = weight_bytes(engines[False])
    cases = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("semantic-ref", 7680, "semantic", 1),
             ("plan-ref", 2720, "plan", 12), ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for name, ctx, kind, rows in cases:
            ms = {}
            for chain, engine in engines.items():
                ms[chain] = _measure(engine, cfg, name, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {name} rows {rows}: separate {ms[False]['step_ms']:.3f} ms (× floor "
                  f"{ms[False]['floor_ratio']:.2f}), chain {ms[True]['step_ms']:.3f} ms (× floor "
                  f"{ms[True]['floor_ratio']:.2f})", flush=True)
    print(f"chain engine: batch invariance {batch_invariance(engines[True], cfg)}; barrier errors "
          f"{int(engines[True].chain_state[0])}", flush=True)
    for chain, engine in engines.items():
        print(f"numerics, chain={chain}: {numerics(engine, ckpt, 'cuda', 512)}", flush=True)


if __name__ == "__main__":
    if "--kernel" in sys.argv or "--engine" not in sys.argv:
        kernel_level()
    if "--engine" in sys.argv:
        engine_level()
