"""A second consumer warpgroup in the layer chain (2026-12-03, session s34; written on the CPU box, run on an
H200). The chain's parts measured alone (`…-s34-chain-parts-probe.py`) show its one consumer warpgroup, handshakes
and MMAs one after the other, needing ~32 µs per layer by itself. `ChainTiling(consumers=2)`: a second warpgroup
(`partner`) takes every other weight slot of each tile and hands its FP32 sum over through shared memory; the
consumer adds it to its own (a fixed order, so still batch-invariant, but other bits than one consumer's).
1. Kernel level (28 layers, 32 rows, µs per layer in a CUDA graph): the kernel before (commit df4839e, from a
   temporary file), the kernel now with one consumer (its bits must equal the one before) and with two (as close
   to an FP32 chain as the separate products, printed; repeatable; a row's result independent of the others).
2. The engine with one and two consumers: ms per step at one plan row of 450 keys, one semantic row of 7,680 and
   24 of them.
Run from the repository root (after `farm init-checkpoint out/ck --config yue2-3b --device cuda`):
python docs/measured/2026-12-03-cpu-s34-two-consumers-probe.py [--engine]
Result (`…-h200-s34-two-consumers-{kernel,engine}.log`): two consumers correct but slower; they went again
after commit 647069e, so the probe runs at that commit."""
import importlib.util
import pathlib
import subprocess
import sys
import tempfile
from dataclasses import replace

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from farm.bench.ar import _measure, _time_graph, copy_rate, weight_bytes  # noqa: E402
from stages import _layer_chain_gluon as now, layer_chain, skinny_gemm as sg  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
BASE = layer_chain.TILING
TWO = replace(BASE, consumers=2)


def before():
    got = subprocess.run(["git", "show", "df4839e:stages/_layer_chain_gluon.py"], capture_output=True, text=True)
    src = got.stdout if got.returncode == 0 else pathlib.Path(".gpu/chain_before.py").read_text()  # a copy, no .git
    path = pathlib.Path(tempfile.mkdtemp()) / "chain_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    kernel = mod.layer_chain

    class _OneConsumer:         # that kernel has no CONSUMERS argument: `_launch` passes 1
        def __getitem__(self, grid):
            return lambda *args, CONSUMERS=1, **kwargs: kernel[grid](*args, **kwargs)
    mod.layer_chain = _OneConsumer()
    return mod


RUNS = {"before (df4839e)": (before(), BASE), "now, one consumer": (now, BASE), "now, two consumers": (now, TWO)}


def kernel_level() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = [dict(o=torch.randn(H, H, device=dev, dtype=torch.bfloat16) * H ** -0.5,
                   gup=layer_chain.pair_rows(torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * H ** -0.5),
                   d=torch.randn(H, I, device=dev, dtype=torch.bfloat16) * I ** -0.5,
                   q=torch.randn(Q, H, device=dev, dtype=torch.bfloat16) * H ** -0.5) for _ in range(L + 1)]
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    w = layers[0]
    nbytes = sum(w[k].numel() * 2 for k in ("o", "gup", "d", "q"))
    outs = {}
    for name, (mod, t) in RUNS.items():
        stages._layer_chain_gluon = mod
        state = layer_chain.words(dev)
        outs[name] = layer_chain._launch(a, x0, w["o"], w["gup"], w["d"], layers[1]["q"], EPS, state, t)
        again = layer_chain._launch(a, x0, w["o"], w["gup"], w["d"], layers[1]["q"], EPS, state, t)
        a2, x2 = torch.randn_like(a), torch.randn_like(x0)
        a2[3], x2[3] = a[3], x0[3]
        mixed = layer_chain._launch(a2, x2, w["o"], w["gup"], w["d"], layers[1]["q"], EPS, state, t)
        print(f"{name}: repeatable {all(torch.equal(p, q) for p, q in zip(outs[name], again))}, row 3 alone the same "
              f"{all(torch.equal(p[3], q[3]) for p, q in zip(outs[name], mixed))}, spins that gave up "
              f"{int(state[0])}", flush=True)
    gu = layer_chain.unpair_rows(w["gup"])
    mid = sg.linear(a, w["o"], "add", x0)
    out = sg.linear(sg.linear(mid, gu, "silu_mul", None, EPS), w["d"], "add", mid)
    separate = (out, sg.linear(out, layers[1]["q"], "none", None, EPS))
    f = [t.float() for t in (a, x0, w["o"], gu, w["d"], layers[1]["q"])]
    mid32 = f[1] + f[0] @ f[2].T
    g = (mid32 * torch.rsqrt(mid32.pow(2).mean(-1, keepdim=True) + EPS)) @ f[3].T
    out32 = mid32 + (torch.nn.functional.silu(g[:, :I]) * g[:, I:]) @ f[4].T
    fp32 = (out32, (out32 * torch.rsqrt(out32.pow(2).mean(-1, keepdim=True) + EPS)) @ f[5].T)
    for name, got in [("separate products", separate), *outs.items()]:
        print(f"{name} against FP32: " + ", ".join(f"max abs {(c.float() - r).abs().max().item():.4f}"
                                                  for c, r in zip(got, fp32)), flush=True)
    print("one consumer gives the bits before: "
          f"{all(torch.equal(p, q) for p, q in zip(outs['before (df4839e)'], outs['now, one consumer']))}", flush=True)
    for rnd in range(2):
        for name, (mod, t) in RUNS.items():
            stages._layer_chain_gluon = mod
            state = layer_chain.words(dev)

            def run_chain():
                x = x0
                for layer in range(L):
                    x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                               layers[layer + 1]["q"], EPS, state, t)
            us = _time_graph(run_chain) / L * 1e6
            print(f"round {rnd} {name}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); spins that gave up "
                  f"{int(state[0])}", flush=True)
    stages._layer_chain_gluon = now


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
    for name, t in (("one consumer", BASE), ("two consumers", TWO)):
        layer_chain.TILING = t      # the engine's graphs keep the tiles they captured
        engines[name] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                 compile=True)
    layer_chain.TILING = BASE
    wbytes = weight_bytes(engines["one consumer"])
    cases = (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 1),
             ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for case, ctx, kind, rows in cases:
            ms = {n: _measure(e, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate) for n, e in engines.items()}
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for n, r in ms.items()), flush=True)
    print("spins that gave up: " + ", ".join(f"{n} {int(e.chain_state[0])}" for n, e in engines.items()), flush=True)


if __name__ == "__main__":
    kernel_level()
    if "--engine" in sys.argv:
        engine_level()
