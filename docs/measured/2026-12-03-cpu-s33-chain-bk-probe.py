"""The layer chain with k-tiles of 256 columns, and the gate/up product by k (2026-12-03, session s33; written on
the CPU box, to run on an H200). The chain's per-k-tile handshakes (a full/empty barrier pair on each of its two
rings for each of the 128 k-tiles of 128 columns a program multiplies per layer) look like what its time goes to
(docs/ar-engine.md); k-tiles of 256 halve their number, with fewer ring slots in the same shared memory
(`ChainTiling(bk=256, stages=6 or 8, xstages=3 or 2)`: 193 KB, as the default's 12 and 6 slots of 128 columns).
Beside them the gate/up product k-tile by k-tile over a program's three tiles (`ChainTiling(gate_up_by_k=True)`:
each x k-tile copied and waited for once, not three times; 96 activation handshakes per layer instead of 128).
1. Kernel level, yue2-3b shapes, 28 layers of random weights, 32 rows, µs per layer in a CUDA graph, and whether
   the outputs are the default's bits.
2. `--engine`: ms per step of engines with the default tiles, k-tiles of 256 (6/3 slots) and gate/up by k, one
   row at 450 keys and 24 at 7,680, two rounds.
Run from the repository root: python docs/measured/2026-12-03-cpu-s33-chain-bk-probe.py [--engine]
Run in session s34 (`…-h200-s34-chain-bk-{kernel,engine,gpu-test}.log`): k-tiles of 256 level, gate/up by k slower;
the gate/up-by-k variant was taken out again after commit b0c4e38, so the probe runs at that commit."""
import pathlib
import sys
from dataclasses import replace

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, _time_graph, copy_rate, weight_bytes  # noqa: E402
from stages import layer_chain  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
BASE = layer_chain.TILING
WIDE = {"bk 256, 6/3 slots": replace(BASE, bk=256, stages=6, xstages=3),
        "bk 256, 8/2 slots": replace(BASE, bk=256, stages=8, xstages=2),
        "gate/up by k": replace(BASE, gate_up_by_k=True),
        "gate/up by k, bk 256, 6/3 slots": replace(BASE, gate_up_by_k=True, bk=256, stages=6, xstages=3)}


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
    base = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"], EPS, state)
    for rnd in range(2):
        for name, t in (("default (bk 128, 12/6 slots)", BASE), *WIDE.items()):
            got = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"], EPS,
                                      state, t)
            same = all(torch.equal(g, b) for g, b in zip(got, base))
            worst = max((g.float() - b.float()).abs().max().item() for g, b in zip(got, base))

            def run_chain():
                x = x0
                for layer in range(L):
                    x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                               layers[layer + 1]["q"], EPS, state, t)
            us = _time_graph(run_chain) / L * 1e6
            print(f"round {rnd} {name}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); the default's bits: "
                  f"{same} (max abs {worst:.3e}); spins that gave up {int(state[0])}", flush=True)


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
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    engines = {}
    for name, t in (("default", BASE), ("bk 256, 6/3 slots", WIDE["bk 256, 6/3 slots"]),
                    ("gate/up by k", WIDE["gate/up by k"])):
        layer_chain.TILING = t       # the engine's graphs keep the tiles they captured
        engines[name] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                 compile=True)
    layer_chain.TILING = BASE
    wbytes = weight_bytes(engines["default"])
    for rnd in range(2):
        for case, ctx, kind, rows in (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 24)):
            ms = {n: _measure(e, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate) for n, e in engines.items()}
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for n, r in ms.items()), flush=True)


if __name__ == "__main__":
    kernel_level()
    if "--engine" in sys.argv:
        engine_level()
