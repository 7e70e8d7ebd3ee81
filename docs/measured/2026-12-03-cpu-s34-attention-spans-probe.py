"""More spans and deeper pipelines for the decode attention at one and two rows (2026-12-03, session s34; written
on the CPU box, run on an H200). Leaving the attention out of the engine's step (`…-s34-no-attention-probe.py`)
saved 0.18 ms at one plan row of 450 keys but 0.60 ms at one semantic row of 7,680 keys: there the two kernels
take ~21 µs a layer for 31.5 MB of keys and values (~1.5 TB/s), where 24 rows read at 96 % of the copy rate. At
one row a layer's split kernel has 8 KV heads × 15 spans = 120 programs, each walking 8 pages two at a time —
too few bytes in flight. The span count may grow with a row's own length (batch invariance needs no more), and the
pipeline depth changes no sum. Variants (`paged_attention.PROGRAMS`, the most spans a row is cut into, and
`STAGES`, pages in flight per program; each an engine with CUDA graphs, which keep what they captured):
default 16/2, 16/4, 32/2, 64/2, 64/3. Cases: one plan row at 450 keys, one and two semantic rows at 7,680 (the
track's semantic stage runs two rows, CFG), 24 semantic rows at 7,680; ms per step, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-03-cpu-s34-attention-spans-probe.py"""
import pathlib
import sys

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import paged_attention  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

VARIANTS = {"16/2 (default)": (16, 2), "16/4": (16, 4), "32/2": (32, 2), "64/2": (64, 2), "64/3": (64, 3)}


def use(name: str) -> None:
    paged_attention.PROGRAMS, paged_attention.STAGES = VARIANTS[name]


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    engines = {}
    for name in VARIANTS:
        use(name)
        engines[name] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                 compile=True)
    wbytes = weight_bytes(engines["16/2 (default)"])
    cases = (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 1),
             ("semantic-ref", 7680, "semantic", 2), ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for case, ctx, kind, rows in cases:
            ms = {}
            for name, engine in engines.items():
                use(name)
                ms[name] = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms" for n, r in ms.items()), flush=True)
    use("16/2 (default)")


if __name__ == "__main__":
    main()
