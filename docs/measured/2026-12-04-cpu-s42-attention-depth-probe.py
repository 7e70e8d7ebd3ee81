"""The split-KV page loop with more pages in flight (2026-12-04, session s42; written on the CPU box).
Why: compiled for sm_90 with Triton 3.6 (this session, the strides divisible by 16 as the JIT specialises them), the
split kernel's key and value tiles do go through shared memory by `cp.async` (the tenth session's reading, "only the
block-table reads", was of another specialisation): `STAGES` 2-4 give one buffer of each (38.9 KB of shared memory),
6 two (71.7 KB: the tree), 8 three (104.5 KB), 10 four (137 KB). At one semantic row of 7,680 keys the grid is
8 KV heads x 15 spans of 8 pages on 132 SMs, so pages in flight per program is what the loop can overlap; more
buffers cost programs per SM where many rows fill the grid. The depth changes no sum (the same pages in the same
order), so any depth gives the same ids: checked here against the tree's depth for one request. 32 spans (another
numerics: a row's spans set its bits) measured beside them. Each an AREngine with CUDA graphs, built, measured and
freed in turn; ms per step, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s42-attention-depth-probe.py"""
import gc
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, bench_request, copy_rate, weight_bytes  # noqa: E402
from stages import paged_attention as pa  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

VARIANTS = {"16 spans, 6 deep (tree)": (16, 6), "16 spans, 8 deep": (16, 8), "16 spans, 10 deep": (16, 10),
            "32 spans, 6 deep": (32, 6), "32 spans, 8 deep": (32, 8)}
CASES = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("plan-ref", 2720, "plan", 12),
         ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 2),
         ("semantic-ref", 7680, "semantic", 12), ("semantic-ref", 7680, "semantic", 24))


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results, ids = {}, {}
    for rnd in range(2):
        for name, (programs, stages) in VARIANTS.items():
            pa.PROGRAMS, pa.STAGES = programs, stages
            t = time.perf_counter()
            engine = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                              compile=True)
            wbytes = weight_bytes(engine)
            if rnd == 0:
                probe = [bench_request(cfg, "bits-sem", 3000, "semantic", 96, 7),
                         bench_request(cfg, "bits-plan", 900, "plan", 96, 8)]
                ids[name] = {r.key: list(r.ids) for r in engine.generate(probe)}
            for case, ctx, kind, rows in CASES:
                ms = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)["step_ms"]
                results.setdefault((case, rows), {}).setdefault(name, []).append(ms)
            del engine
            gc.collect()
            torch.cuda.empty_cache()
            print(f"round {rnd} {name}: {time.perf_counter() - t:.1f} s", flush=True)
    base = {p: n for n, (p, s) in reversed(list(VARIANTS.items()))}      # the first variant of each span count
    for name, (programs, _) in VARIANTS.items():
        same = ids[name] == ids[base[programs]]
        print(f"ids of {name} == {base[programs]}: {same}", flush=True)
    print("ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)
    pa.PROGRAMS, pa.STAGES = 16, 6


if __name__ == "__main__":
    main()
