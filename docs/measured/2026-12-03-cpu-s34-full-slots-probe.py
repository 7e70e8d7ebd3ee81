"""Weight slots filled for every product (2026-12-03, session s34; written on the CPU box, run on an H200). A ring
slot holds 32 weight rows; the o and down tiles have 16, so until now half of each of their slots stayed empty and
the ring held only ~48 KB ahead while the grid waited before o or down (~1.5 µs of a program's share of the copy
rate), against ~96 KB for gate/up and q/k/v. The chain's parts measured alone (`…-s34-chain-parts-probe.py`)
suggest those waits are where the weight stream stalls. Now a 16-row tile puts two consecutive k-tiles in each slot
(`_weights`, `_product`: PER); the sums run in the same order, so the bits must not change.
1. Kernel level (28 layers, 32 rows, µs per layer in a CUDA graph): the kernel before (commit 841cade's source,
   imported from a temporary file) and now, and whether the outputs are equal.
2. The engine with each: ms per step at one plan row of 450 keys, one semantic row of 7,680 and 24 of them.
Run from the repository root (after `farm init-checkpoint out/ck --config yue2-3b --device cuda`):
python docs/measured/2026-12-03-cpu-s34-full-slots-probe.py
Result (`…-h200-s34-full-slots.log`): the same bits, 37.35 against 37.58 µs per layer; kept. The probe compares
commit 841cade with the tree of df4839e."""
import importlib.util
import pathlib
import subprocess
import sys
import tempfile

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from farm.bench.ar import _measure, _time_graph, copy_rate, weight_bytes  # noqa: E402
from stages import _layer_chain_gluon as now, layer_chain  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6


def before():
    got = subprocess.run(["git", "show", "841cade:stages/_layer_chain_gluon.py"], capture_output=True, text=True)
    src = got.stdout if got.returncode == 0 else pathlib.Path(".gpu/chain_before.py").read_text()  # a copy, no .git
    path = pathlib.Path(tempfile.mkdtemp()) / "chain_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


KERNELS = {"half-filled slots (before)": before(), "full slots (now)": now}


def kernel_level() -> None:
    torch.manual_seed(0)
    dev = torch.device("cuda")
    layers = [dict(o=torch.randn(H, H, device=dev, dtype=torch.bfloat16) * H ** -0.5,
                   gup=layer_chain.pair_rows(torch.randn(2 * I, H, device=dev, dtype=torch.bfloat16) * H ** -0.5),
                   d=torch.randn(H, I, device=dev, dtype=torch.bfloat16) * I ** -0.5,
                   q=torch.randn(Q, H, device=dev, dtype=torch.bfloat16) * H ** -0.5) for _ in range(L + 1)]
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    nbytes = sum(layers[0][k].numel() * 2 for k in ("o", "gup", "d", "q"))
    outs = {}
    for rnd in range(2):
        for name, mod in KERNELS.items():
            stages._layer_chain_gluon = mod
            state = layer_chain.words(dev)
            outs[name] = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"],
                                             EPS, state)

            def run_chain():
                x = x0
                for layer in range(L):
                    x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                               layers[layer + 1]["q"], EPS, state)
            us = _time_graph(run_chain) / L * 1e6
            print(f"round {rnd} {name}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); spins that gave up "
                  f"{int(state[0])}", flush=True)
    same = all(torch.equal(p, q) for p, q in zip(*outs.values()))
    print(f"the same bits: {same}", flush=True)


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
    for name, mod in KERNELS.items():
        stages._layer_chain_gluon = mod      # the engine's graphs keep the kernel they captured
        engines[name] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                 compile=True)
    wbytes = weight_bytes(next(iter(engines.values())))
    cases = (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 1),
             ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for case, ctx, kind, rows in cases:
            ms = {}
            for name, engine in engines.items():
                stages._layer_chain_gluon = KERNELS[name]
                ms[name] = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for n, r in ms.items()), flush=True)
    stages._layer_chain_gluon = now


if __name__ == "__main__":
    kernel_level()
    engine_level()
