"""How the layer chain's grid-wide waits poll (2026-12-03, session s33; written on the CPU box, run on an H200).
Until now every waiting warp of every program polled its product's counter with an atomic read
(`atomic_add(counter, 0)`, a read-modify-write): ~400 warps' polls of one word queue at its L2 slice, behind each
other and behind the programs' own counts. The kernel now polls with acquire loads (`_acquire`). Variants of the
kernel are made here from its source by substitution and imported from a temporary file:
- "atomic polls": the previous kernel;
- "acquire loads": the kernel as it is now;
- "no waits" (timing only, wrong numbers): the spins end at once — what all the grid barriers cost;
- "no activation-warp waits" (timing only): only the warp that copies the inputs stops waiting — what the waits
  cost on the data path (the norm factors' and the down epilogue's waits stay);
- "acquire loads, flow" (`ChainTiling.flow`): the inputs wait chunk by chunk for the product before.
1. Kernel level, yue2-3b shapes, 28 layers of random weights in turn, 32 rows, µs per layer in a CUDA graph, and
   the bits of both real variants against each other.
2. `--engine` (after `farm init-checkpoint out/ck --config yue2-3b --device cuda`): the engine with each real variant,
   and with the acquire loads at deeper weight rings (fewer activation slots: the shared memory is full) — in the
   engine the weight warp streams while the attention kernels before it run, which the kernel-level loop above
   (chains back to back) does not show — ms per step, two rounds.
Run from the repository root: python docs/measured/2026-12-03-cpu-s33-chain-poll-probe.py [--engine]
Result (`…-h200-s33-b-poll-probe.log`): the acquire loads no faster, the flow mode slower, the deeper ring slower;
all three were taken out again in e2a30c9, so the probe runs at commit ef4bf6d."""
import importlib.util
import pathlib
import sys
import tempfile
from dataclasses import replace

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from farm.bench.ar import _measure, _time_graph, batch_invariance, copy_rate, weight_bytes  # noqa: E402
from stages import layer_chain  # noqa: E402

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
SOURCE = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
SUBSTITUTIONS = {
    "atomic polls": [("seen = _acquire(counter)", 'seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")')],
    "acquire loads": [],
    "no waits": [("while (seen < target) & (n < 100000000):", "while (seen < target) & (n < 0):")],
    "no activation-warp waits": [("    _wait_counter(counter, err, G)\n    j = _activations(xh", "    j = _activations(xh"),
                                 ("    _wait_counter(counter + 1, err, G)\n    j = _activations(xg",
                                  "    j = _activations(xg"),
                                 ("        _wait_counter(counter + 2, err, G)\n        j = _activations(xn",
                                  "        j = _activations(xn")],
}
TMP = pathlib.Path(tempfile.mkdtemp())


def variant(name: str):
    src = SOURCE
    for old, new in SUBSTITUTIONS[name]:
        assert old in src, old
        src = src.replace(old, new)
    path = TMP / f"chain_{name.replace(' ', '_')}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def use(mod) -> None:
    stages._layer_chain_gluon = mod          # layer_chain._launch imports it from the package at each call


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
    runs = [(name, name, layer_chain.TILING) for name in SUBSTITUTIONS]
    runs.append(("acquire loads, flow", "acquire loads", replace(layer_chain.TILING, flow=True)))
    for rnd in range(2):
        for name, kernel, tiling in runs:
            use(variant(kernel))
            state = layer_chain.words(dev)
            outs[name] = layer_chain._launch(a, x0, layers[0]["o"], layers[0]["gup"], layers[0]["d"], layers[1]["q"],
                                             EPS, state, tiling)

            def run_chain():
                x = x0
                for layer in range(L):
                    x, _ = layer_chain._launch(a, x, layers[layer]["o"], layers[layer]["gup"], layers[layer]["d"],
                                               layers[layer + 1]["q"], EPS, state, tiling)
            us = _time_graph(run_chain) / L * 1e6
            print(f"round {rnd} {name}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); spins that gave up "
                  f"{int(state[0])}", flush=True)
    for name in ("acquire loads", "acquire loads, flow"):
        same = all(torch.equal(p, q) for p, q in zip(outs["atomic polls"], outs[name]))
        print(f"{name} give the atomic polls' bits: {same}", flush=True)


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
    engines = {}
    base = layer_chain.TILING
    for name, kernel, tiling in (("atomic polls", "atomic polls", base), ("acquire loads", "acquire loads", base),
                                 ("acquire, 18/3 slots", "acquire loads", replace(base, stages=18, xstages=3)),
                                 ("acquire, flow", "acquire loads", replace(base, flow=True))):
        use(variant(kernel))     # the engine's graphs keep the kernel and tiles they captured
        layer_chain.TILING = tiling
        engines[name] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                 compile=True)
        assert engines[name].chain
    layer_chain.TILING = base
    wbytes = weight_bytes(engines["atomic polls"])
    cases = (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 1), ("plan-ref", 2720, "plan", 12),
             ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for case, ctx, kind, rows in cases:
            ms = {name: _measure(e, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate) for name, e in engines.items()}
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for n, r in ms.items()), flush=True)
    print("spins that gave up: " + ", ".join(f"{n} {int(e.chain_state[0])}" for n, e in engines.items()), flush=True)
    layer_chain.TILING = replace(base, flow=True)    # (the graphs hold their tiles; eager calls read TILING)
    print(f"flow engine: batch invariance {batch_invariance(engines['acquire, flow'], cfg)}", flush=True)
    layer_chain.TILING = base


if __name__ == "__main__":
    kernel_level()
    if "--engine" in sys.argv:
        engine_level()
