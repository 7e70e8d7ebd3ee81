"""Attention whose bits do not depend on how a row's keys are spread over programs (2026-12-04, session s39;
written on the CPU box, checked there under Triton's interpreter).
Why: `…-s39-attention-programs-probe.py` measured 32 spans per row 0.13 ms faster than 16 at one semantic row of
7,680 keys and 0.1 ms slower at 24 such rows, and a row's spans may not follow the batch. The kernels of commit
9de110f (reverted in the next; run this probe at that commit) cut each of a row's (at most 16) chunks into at most
`paged_attention.SPLIT` units, sum a unit a page at a time (online softmax), and fold a chunk's units in a fixed
order with operations spelt out, so a chunk's bits are the same whether one program folds it or the merge kernel
folds it from units other programs stored: a step with few
units in all (`WIDE_UP_TO`) runs one program per unit, a step with many one per chunk, as before. Variants, each
an AREngine with CUDA graphs built, measured and freed in turn (ms per step, two rounds): the kernels of commit
c64449a (online softmax over spans, from `.gpu/old_pat.py` and `.gpu/old_launch.py`, written from `git show`
before the run); 9de110f's with SPLIT 2 and WIDE_UP_TO 0 (never wide: what the folds cost), 32 (one row of
7,680 keys: 30 units), 64 and 128; SPLIT 4 up to 128. (A first version, units of one or two pages whatever the
row's length and the merge folding up to 16 or 8 units per chunk, was slower everywhere it was wide:
`…-s39-wide-attention-units.log`; that kernel was not kept.)
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s39-wide-attention-probe.py"""
import gc
import pathlib
import sys
import time
import types

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import _paged_attention_triton as new_kernels  # noqa: E402
from stages import paged_attention as pa  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

OLD = types.ModuleType("stages._old_pat")
OLD.__file__ = str(pathlib.Path(".gpu/old_pat.py").resolve())
exec(compile(pathlib.Path(".gpu/old_pat.py").read_text(), OLD.__file__, "exec"), OLD.__dict__)
exec(pathlib.Path(".gpu/old_launch.py").read_text().replace("def _launch(", "def _old_launch("), pa.__dict__)
NEW_CODE, OLD_CODE = pa._launch.__code__, pa._old_launch.__code__
VARIANTS = {"c64449a spans": None, "never wide": (2, 0), "wide to 32": (2, 32), "wide to 64": (2, 64),
            "wide to 128": (2, 128), "split 4, wide to 128": (4, 128)}
CASES = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("plan-ref", 2720, "plan", 12),
         ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 2),
         ("semantic-ref", 7680, "semantic", 4), ("semantic-ref", 7680, "semantic", 24))


def use(name: str) -> None:
    setting = VARIANTS[name]
    if setting is None:     # the registered op calls pa._launch: give it the old body and the old kernels
        pa._launch.__code__ = OLD_CODE
        sys.modules["stages._paged_attention_triton"] = stages._paged_attention_triton = OLD
    else:
        pa._launch.__code__ = NEW_CODE
        sys.modules["stages._paged_attention_triton"] = stages._paged_attention_triton = new_kernels
        pa.SPLIT, pa.WIDE_UP_TO = setting


def main() -> None:
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results = {}
    for rnd in range(2):
        for name in VARIANTS:
            use(name)
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
    use("wide to 64")


if __name__ == "__main__":
    main()
