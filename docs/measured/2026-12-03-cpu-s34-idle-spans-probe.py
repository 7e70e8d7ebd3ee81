"""Idle attention spans that leave at once (2026-12-03, session s34; written on the CPU box, not yet run: the
session's device time was spent). `…-s34-attention-spans-probe.py` found 32 spans per row 4–5 % faster than 16 at
one semantic row of 7,680 keys (2 % at two rows) but 7 % slower at one plan row of 450 keys, whose 8 pages need 8
spans whatever the cap: the grid is rows × KV heads × PROGRAMS, and every program first waits for the kernel before
(programmatic dependent launch) before it finds that its span is empty. Here a program reads its row's length
first (the step's lengths are written long before the kernel before begins, so no wait is needed for them) and an
empty span leaves at once. Variants of `stages/_paged_attention_triton.py` (by substitution, from a temporary file)
with `paged_attention.PROGRAMS` / `STAGES`; each an engine with CUDA graphs (they keep what they captured):
16/2 as it is; 16/2, 32/2 and 32/3 with idle spans leaving at once. Cases: one plan row at 450 keys, 12 plan rows
at 2,720, one and two semantic rows at 7,680, 24 semantic rows at 7,680; ms per step, two rounds. The spans depend
on a row's own length only, so any of these is batch-invariant; 32 spans change the sums' order (other bits).
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-03-cpu-s34-idle-spans-probe.py"""
import importlib.util
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from farm.bench.ar import _measure, copy_rate, weight_bytes  # noqa: E402
from stages import paged_attention  # noqa: E402
from stages.ar import AREngine  # noqa: E402
from stages.kv_cache import token_bytes  # noqa: E402
from stages.requests import open_checkpoint  # noqa: E402
from stages.transformer import AR, HEAD  # noqa: E402
from stages.weights import load_model  # noqa: E402

SOURCE = pathlib.Path("stages/_paged_attention_triton.py").read_text()
EARLY = [("""    if PDL:    # launched early: wait for the kernel before (it wrote q), then let the next one launch
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    GROUPS: tl.constexpr = HEADS // KV
    row, kvh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    past = tl.load(LENS + row) - 1
    span = _span(past, PROGRAMS, PAGE)
    start = split * span
""", """    GROUPS: tl.constexpr = HEADS // KV
    row, kvh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    past = tl.load(LENS + row) - 1      # the step's lengths: written before the kernel before began
    span = _span(past, PROGRAMS, PAGE)
    start = split * span
    if PDL:    # a span with keys waits for the kernel before (it wrote q); an empty one leaves at once
        if start < past:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
""")]
VARIANTS = {"16/2 as is": (16, 2, []), "16/2 idle leave": (16, 2, EARLY), "32/2 idle leave": (32, 2, EARLY),
            "32/3 idle leave": (32, 3, EARLY)}
TMP = pathlib.Path(tempfile.mkdtemp())


def kernels(subs):
    src = SOURCE
    for old, new in subs:
        assert old in src, old
        src = src.replace(old, new)
    path = TMP / f"attention_{len(list(TMP.iterdir()))}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MODULES = {name: kernels(subs) for name, (_, _, subs) in VARIANTS.items()}


def use(name: str) -> None:
    paged_attention.PROGRAMS, paged_attention.STAGES, _ = VARIANTS[name]
    # paged_attention._launch imports the kernels from the package's module at each call
    sys.modules["stages._paged_attention_triton"] = stages._paged_attention_triton = MODULES[name]


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
    wbytes = weight_bytes(engines["16/2 as is"])
    cases = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 12), ("semantic-ref", 7680, "semantic", 1),
             ("semantic-ref", 7680, "semantic", 2), ("semantic-ref", 7680, "semantic", 24))
    for rnd in range(2):
        for case, ctx, kind, rows in cases:
            ms = {}
            for name, engine in engines.items():
                use(name)
                ms[name] = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms" for n, r in ms.items()), flush=True)
    use("16/2 as is")


if __name__ == "__main__":
    main()
