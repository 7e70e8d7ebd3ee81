"""How much more split-KV parallelism buys a step with few rows (2026-12-04, session s39; written on the CPU box).
Why: at one semantic row of 7,680 keys a layer's split kernel runs 8 KV heads × 15 spans of 8 pages, one program
each, and every program walks its 8 pages one after another; session s35 measured 32 spans per row 8 % faster there
than 16, but 1 % slower at 12 and 24 rows, and a row's spans may not follow the batch (its bits would). Before a
scheme whose bits do not depend on how pages are grouped into programs is built, this measures what the grouping is
worth: the committed kernels with `paged_attention.PROGRAMS` = 16 (as it is), 32, 64 and 128 (at 128 every page of
a 7,680-key row is its own program). Each an AREngine with CUDA graphs; ms per step, two rounds; the bits differ
between variants (other sums), which is not what is measured here.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s39-attention-programs-probe.py"""
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import paged_attention  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

VARIANTS = (16, 32, 64, 128)
CASES = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("plan-ref", 2720, "plan", 12),
         ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 2),
         ("semantic-ref", 7680, "semantic", 24))


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    engines = {}
    for programs in VARIANTS:
        t = time.perf_counter()
        paged_attention.PROGRAMS = programs
        engines[programs] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                     compile=True)
        print(f"engine {programs}: {time.perf_counter() - t:.1f} s", flush=True)
    wbytes = weight_bytes(engines[16])
    for rnd in range(2):
        for case, ctx, kind, rows in CASES:
            ms = {}
            for programs, engine in engines.items():
                paged_attention.PROGRAMS = programs     # read by the op at each launch (graphs keep their own)
                ms[programs] = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)["step_ms"]
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(f"{p} spans {v:.3f} ms" for p, v in ms.items()),
                  flush=True)
    paged_attention.PROGRAMS = 16


if __name__ == "__main__":
    main()
