"""32 spans with one or two per program, against 16 spans (2026-12-03, session s35; written on the CPU box and run on
an H200 the same session). The idle-spans probe (`…-s34-idle-spans-probe.py`, `…-s35-idle-spans.log`) found 32
spans per row 9 % faster than 16 at one semantic row of 7,680 keys but 1 % slower at 12 and 24 rows. Here the split
kernel cuts a row into at most 32 spans, and while more than WIDE_ROWS (4) rows are live each program takes two
consecutive spans (each summed and stored on its own: the same bits either way) — so few rows get 32 programs and
many rows the 16 programs' work. Engine level as in the idle-spans probe: the committed 16-span kernel (c7b2d6b, from
`.gpu/pa_16spans.py`, given the new launch's two extra constants) against the new one; ms per step.
Run from the repository root at commit b2bb1ab (the new kernel, reverted after this measurement): python
docs/measured/2026-12-03-cpu-s35-span-regimes-probe.py (needs out/ck). Result (`…-h200-s35-span-regimes.log`): slower
everywhere but one long row (1.734 against 1.837 ms), 2-7 % slower from 4 rows up."""
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

OLD = pathlib.Path(".gpu/pa_16spans.py").read_text().replace(
    "PDL: tl.constexpr, FP8: tl.constexpr = False):\n    \"\"\"Program (row, kv head, p) handles span p",
    "PDL: tl.constexpr, FP8: tl.constexpr = False, WIDE_ROWS: tl.constexpr = 4,\n"
    "                       ROWS_PAD: tl.constexpr = 32):\n    \"\"\"Program (row, kv head, p) handles span p")
assert "ROWS_PAD" in OLD


def module(src: str):
    path = pathlib.Path(tempfile.mkdtemp()) / "attention_16.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


from stages import _paged_attention_triton as NEW  # noqa: E402
VARIANTS = {"16 spans": (16, module(OLD)), "32 spans, 1-2 per program": (32, NEW)}


def use(name: str) -> None:
    paged_attention.PROGRAMS, mod = VARIANTS[name]
    sys.modules["stages._paged_attention_triton"] = stages._paged_attention_triton = mod


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
    wbytes = weight_bytes(engines["16 spans"])
    cases = (("semantic-ref", 7680, "semantic", 1), ("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 2),
             ("semantic-ref", 7680, "semantic", 4), ("semantic-ref", 7680, "semantic", 8),
             ("plan-ref", 2720, "plan", 12), ("semantic-ref", 7680, "semantic", 24))
    for case, ctx, kind, rows in cases:
        ms = {}
        for name, engine in engines.items():
            use(name)
            ms[name] = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {r['step_ms']:.3f} ms" for n, r in ms.items()), flush=True)
    use("32 spans, 1-2 per program")


if __name__ == "__main__":
    main()
