"""The layer chain copying only the step's live rows of its activations (2026-12-03, session s33; written on the CPU
box, run on an H200). Until now every program copied all 32 rows of every activation k-tile for each of its weight
tiles, so at one live row 31 of every 32 copied rows were idle slots', and the copies (from L2) outweighed the
weights for the o and down products. `layer_chain.set_rows` now tells the kernel how many rows to compute.
1. Kernel level, yue2-3b shapes, 28 layers of random weights in turn, µs per layer in a CUDA graph: the old copies
   (one 32-row box, `xrows` 32) against 8-row boxes with 32, 16 and 8 live rows; the computed rows' bits equal the
   full computation's.
2. The engine (`--engine`, after `farm init-checkpoint out/ck --config yue2-3b --device cuda`): ms per step with the
   rows following the live slots (the default now) against all 32 rows, two rounds.
Run from the repository root: python docs/measured/2026-12-03-cpu-s33-live-rows-probe.py [--engine]
Result (…-h200-s33-live-rows-probe.log): no gain — the copies' bytes are not what the chain waits for — so the code
it measures (`set_rows`, `ChainTiling.xrows`, the engine's lowest-slot-first order) was taken out again; it runs at
commit 59ce58c."""
import pathlib
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, _time_graph, copy_rate, weight_bytes  # noqa: E402
from stages import layer_chain  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6


def kernel_level() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = [dict(o=torch.randn(H, H, device=dev, dtype=torch.bfloat16) * H ** -0.5,
                   gup=layer_chain.pair_rows(torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * H ** -0.5),
                   d=torch.randn(H, I, device=dev, dtype=torch.bfloat16) * I ** -0.5,
                   q=torch.randn(Q, H, device=dev, dtype=torch.bfloat16) * H ** -0.5) for _ in range(L + 1)]
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    state = layer_chain.words(dev)
    nbytes = sum(layers[0][k].numel() * 2 for k in ("o", "gup", "d", "q"))
    old = replace(layer_chain.TILING, xrows=32)
    full = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"], EPS, state, old)
    for t, live in ((old, 32), (layer_chain.TILING, 32), (layer_chain.TILING, 16), (layer_chain.TILING, 8),
                    (layer_chain.TILING, 1)):
        layer_chain.set_rows(state, live, t)
        got = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"], EPS, state,
                                  t)
        n = int(state[6])
        same = all(torch.equal(g[:n], f[:n]) for g, f in zip(got, full))

        def run_chain():
            x = x0
            for layer in range(L):
                x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                           layers[layer + 1]["q"], EPS, state, t)
        us = _time_graph(run_chain) / L * 1e6
        print(f"xrows {t.xrows} live {live} (rows computed {n}): {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} "
              f"TB/s); computed rows equal the full chain's: {same}; barrier errors {int(state[0])}", flush=True)
    layer_chain.set_rows(state, 32)


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
    engine = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True, compile=True)
    assert engine.chain
    wbytes = weight_bytes(engine)
    follow = engine._chain_rows

    def all_rows(slots=None):
        layer_chain.set_rows(engine.chain_state, 32)
    cases = (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 1), ("plan-ref", 2720, "plan", 12),
             ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for name, ctx, kind, rows in cases:
            ms = {}
            for mode, fn in (("all 32 rows", all_rows), ("live rows", follow)):
                engine._chain_rows = fn
                ms[mode] = _measure(engine, cfg, name, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {name} rows {rows}: " + "; ".join(
                f"{m} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for m, r in ms.items()), flush=True)
    engine._chain_rows = follow
    print(f"barrier errors {int(engine.chain_state[0])}", flush=True)


if __name__ == "__main__":
    kernel_level()
    if "--engine" in sys.argv:
        engine_level()
