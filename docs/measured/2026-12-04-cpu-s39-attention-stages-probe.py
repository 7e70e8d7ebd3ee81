"""The split-KV page loop's pipeline depth at few rows (2026-12-04, session s39; written on the CPU box).
Why: at one semantic row of 7,680 keys the split kernel runs 8 KV heads × 15 spans of 8 pages, one program each
(120 programs on 132 SMs), its page loop pipelined `paged_attention.STAGES` = 2 deep; 32 spans per row
were 0.13 ms a step faster there (`…-s39-attention-programs.log`), but a row's spans set its bits and cost 1.5 % at
24 rows. The pipeline depth does not change a single sum (the same pages in the same order), so it is free to
choose: here 16 spans with depth 2 (as it is), 3, 4 and 6, and 32 spans with 2 beside them. (Compiled for sm_90
afterwards, the depth turned out to pipeline only the block-table reads: docs/benchmarks.md, tenth session.) Each an
AREngine with CUDA graphs, built, measured and freed in turn; ms per step, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s39-attention-stages-probe.py"""
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

VARIANTS = {"16 spans, 2 deep": (16, 2), "16 spans, 3 deep": (16, 3), "16 spans, 4 deep": (16, 4),
            "16 spans, 6 deep": (16, 6), "32 spans, 2 deep": (32, 2)}
CASES = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("plan-ref", 2720, "plan", 12),
         ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 2),
         ("semantic-ref", 7680, "semantic", 24))


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results = {}
    for rnd in range(2):
        for name, (programs, stages) in VARIANTS.items():
            pa.PROGRAMS, pa.STAGES = programs, stages
            t = time.perf_counter()
            engine = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                              compile=True)
            wbytes = weight_bytes(engine)
            for case, ctx, kind, rows in CASES:
                ms = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)["step_ms"]
                results.setdefault((case, rows), {}).setdefault(name, []).append(ms)
            del engine
            gc.collect()
            torch.cuda.empty_cache()
            print(f"round {rnd} {name}: {time.perf_counter() - t:.1f} s", flush=True)
    print("ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)
    pa.PROGRAMS, pa.STAGES = 16, 2


if __name__ == "__main__":
    main()
