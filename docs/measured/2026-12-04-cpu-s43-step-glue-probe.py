"""The AR step's glue between the draw and the first layer compiled, against eager PyTorch (2026-12-04, session s43;
written on the CPU box). Why: the one-row step's profile shows a dozen small PyTorch kernels between the sampler and
the first layer (the owner's go and ids copied to each slot, the key counts, the embedding and the RoPE rows), each
launched only once the one before has ended; compiled (`ar.step_inputs`, `ar.follow`, with Inductor's programmatic
dependent launch) they are a few. Same ids either way (integer ops and row copies). Here both in one process:
engines built with CUDA graphs in turn, the tree's and one whose `_inputs` / `_follow` are the plain functions, ms
per step at 1, 8 and 24 rows of three contexts, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s43-step-glue-probe.py"""
import gc
import pathlib
import sys
import time

import torch

sys.path.insert(0, ".")
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import ar  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

ROWS = (1, 8, 24)
CONTEXTS = (("prompt-450", 450, "plan"), ("plan-ref", 2720, "plan"), ("semantic-ref", 7680, "semantic"))


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results = {}
    for rnd in range(2):
        for name in ("compiled glue (tree)", "eager glue"):
            t = time.perf_counter()
            engine = ar.AREngine(net, cfg.tokens, kv_tokens=32 * (7680 + 12 * 16 + 64), cuda_graphs=False,
                                 compile=True)
            if name == "eager glue":
                engine._inputs, engine._follow = ar.step_inputs, ar.follow
            engine._capture()
            wbytes = weight_bytes(engine)
            for case, ctx, kind in CONTEXTS:
                for rows in ROWS:
                    ms = _measure(engine, cfg, case, ctx, kind, rows, 4, wbytes, kv_token, rate)["step_ms"]
                    results.setdefault((case, rows), {}).setdefault(name, []).append(ms)
            del engine
            gc.collect()
            torch.cuda.empty_cache()
            print(f"round {rnd} {name}: {time.perf_counter() - t:.1f} s", flush=True)
    print(f"copy rate {rate / 1e12:.2f} TB/s; ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)


if __name__ == "__main__":
    main()
