"""The split kernel's first page before the wait only while few rows are live (2026-12-04, session s43; written on
the CPU box). Why: the s42 sweep probe, run this session (`…-s43-preload-sweep.log`: both kernels in one process),
found the first page before the wait 1-3 % faster at 1-8 live rows and 1-5 % slower at 16-32 rows of 450 and 2,720
keys. The tree now chooses per step on the device (`paged_attention.EARLY_ROWS`: at most 8 live rows
→ first page early, else every page through the loop; the same sums either way). Here the three settings in one
process — 8 (the tree), 0 (always the loop: the kernel of 90a51ba) and 32 (always early: the kernel of s42) —
engines with CUDA graphs built in turn (the launch reads EARLY_ROWS at each call and a graph keeps what it
captured), ms per step at 1-32 rows of three contexts, two rounds; first the op's outputs and stored keys and values
compared bitwise across the three at 7 and 16 live rows.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s43-early-rows-probe.py"""
import gc
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import paged_attention as pa  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402
from tests.test_gpu import _attention_inputs  # noqa: E402

ROWS = (1, 2, 4, 8, 12, 16, 24, 32)
CONTEXTS = (("prompt-450", 450, "plan"), ("plan-ref", 2720, "plan"), ("semantic-ref", 7680, "semantic"))
SETTINGS = {"tree (early at <= 8 live rows)": 8, "always the loop (90a51ba)": 0, "always early (s42)": 32}


def bits() -> None:
    lens = [1, 63, 129, 450, 2720, 5000, 7680] + [300 + 97 * i for i in range(9)]
    for pool in ("bf16", "fp8"):
        for live in (7, 16):
            outs = []
            for early in SETTINGS.values():
                qkv, q_norm, k_norm, cos, sin, k, v, table, seq = _attention_inputs(pool, lens, 2048)
                seq[live:] = 0
                pa.EARLY_ROWS = early
                out = pa.decode_attention(qkv, q_norm, k_norm, cos, sin, k, v, table, seq, 1e-6)
                outs.append((out, k, v))
            same = all(torch.equal(a, b) for o in outs[1:] for a, b in zip(outs[0], o))
            print(f"{pool} pool, {live} live rows: the three settings give the same bits: {same}", flush=True)
    pa.EARLY_ROWS = 8


def main() -> None:
    bits()
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results = {}
    try:
        for rnd in range(2):
            for name, early in SETTINGS.items():
                pa.EARLY_ROWS = early
                t = time.perf_counter()
                engine = AREngine(net, cfg.tokens, kv_tokens=32 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                  compile=True)
                wbytes = weight_bytes(engine)
                for case, ctx, kind in CONTEXTS:
                    for rows in ROWS:
                        ms = _measure(engine, cfg, case, ctx, kind, rows, 4, wbytes, kv_token, rate)["step_ms"]
                        results.setdefault((case, rows), {}).setdefault(name, []).append(ms)
                del engine
                gc.collect()
                torch.cuda.empty_cache()
                print(f"round {rnd} {name}: {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        pa.EARLY_ROWS = 8
    print(f"copy rate {rate / 1e12:.2f} TB/s; ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)


if __name__ == "__main__":
    main()
