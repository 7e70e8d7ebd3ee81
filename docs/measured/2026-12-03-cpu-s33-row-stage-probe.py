"""Where the candidate kernels' row stage spends its time (2026-12-03, session s33; written on the CPU box, run on
an H200). The bound of this session (three floors; commit 8f7eb2e's stages/_topk_triton.py) made `row_best` slower
at one plan row (82.8 µs against 66.5 in the step profile), although it searches 2,048 keys instead of 16,384.
Variants, each a module made from a kernel source by substitution, µs per call of both launches (CUDA graph of 16
calls) for 1 and 32 drawing slots on the yue2-3b plan span, canonical (the first 256 in score order, lowest ids on
ties) where the variant is meant to be right:
- "s32": session s32's kernels; with 4 and 16 warps per row program;
- "s32, N passes" (timing only): the search stopped after N passes — what a pass costs;
- "bound": the bound of three floors; "bound, one floor" (what the tree keeps since); "bound, no search" (timing
  only: the bound and the compaction, then no search) — what the bound costs.
The two sources lay in .gpu/ for the run (ignored by git): `git show 46fb47b:stages/_topk_triton.py >
.gpu/topk_s32.py` and `git show 8f7eb2e:stages/_topk_triton.py > .gpu/topk_bound.py`. The 32-slot rows ended in an
illegal memory access of a timing-only variant (a search cut short stores past its 256 places), which took the rest
of the run with it (`…-h200-s33-row-stage-probe.log`).
Run from the repository root: python docs/measured/2026-12-03-cpu-s33-row-stage-probe.py"""
import importlib.util
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from stages import fast_sampling as fs  # noqa: E402

SLOTS, VOCAB, CALLS = 32, 184704, 16
FIRST, LAST = 0, 151_424
TMP = pathlib.Path(tempfile.mkdtemp())
IMPORT = ("from .skinny_gemm import pdl", "from stages.skinny_gemm import pdl")
SEARCH = "    while lo < hi:\n        mid = "
VARIANTS = {    # name: (source, substitutions, row warps, meant to be right)
    "s32": ("topk_s32.py", [], 8, True),
    "s32, 4 row warps": ("topk_s32.py", [], 4, True),
    "s32, 16 row warps": ("topk_s32.py", [], 16, True),
    "s32, 8 passes": ("topk_s32.py", [(SEARCH, "    for _ in range(8):\n        mid = ")], 8, False),
    "s32, 16 passes": ("topk_s32.py", [(SEARCH, "    for _ in range(16):\n        mid = ")], 8, False),
    "s32, 1 pass": ("topk_s32.py", [(SEARCH, "    for _ in range(1):\n        mid = ")], 8, False),
    "bound": ("topk_bound.py", [], 8, True),
    "bound, one floor": ("topk_bound.py", [(
        "bound = tl.maximum(tl.maximum(_floor(key, K, 8), _floor(key, K, 16)), _floor(key, K, 32))",
        "bound = _floor(key, K, 16)")], 8, True),
    "bound, no search": ("topk_bound.py", [(
        "                _keep_best(IN_V, IN_C, VALUES, IDS, r, s_in, s_v, s_i, first,\n"
        "                           tl.load(PICKED + r * s_p + j, mask=held, other=0), held, K)",
        "                tl.store(VALUES + r * s_v + j, tl.load(PICKED + r * s_p + j, mask=held, other=0)"
        ".to(tl.float32), mask=j < K)")], 8, False),
}


def module(name: str):
    source, subs, warps, _ = VARIANTS[name]
    src = pathlib.Path(".gpu", source).read_text()
    for old, new in [IMPORT, *subs]:
        assert old in src, (name, old)
        src = src.replace(old, new)
    path = TMP / f"topk_{len(list(TMP.iterdir()))}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.ROW_WARPS = warps
    return mod


def table(drawing: int) -> fs.SlotTable:
    t = fs.SlotTable.empty(SLOTS, VOCAB, "cuda")
    for r in range(SLOTS):
        t.set_slot(r, {"temperature": 0.8, "penalty": 1.1, "window": 50, "min_tokens": 0, "max_tokens": 10_000,
                       "end": 5, "lo": 0, "hi": VOCAB, "is_cond": True, "active": r < drawing, "key": r})
    fs.book(t, torch.randint(100, 400, (SLOTS,), device="cuda"))
    return t


def timed(fn) -> float:
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(20):
        graph.replay()
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) * 1000 / (20 * CALLS)


def main() -> None:
    mods = {name: module(name) for name in VARIANTS}
    logits = (torch.randn(SLOTS, LAST - FIRST, device="cuda") * 3).bfloat16()
    for rnd in range(2):
        for drawing in (1, 32):
            t = table(drawing)
            want = fs.canonical_first(fs.scores(logits, t, FIRST), fs.CANDIDATES)[:drawing].sort(dim=1).values
            for name, mod in mods.items():
                sys.modules["stages._topk_triton"] = mod       # fast_sampling.best imports `launch` from it per call
                try:
                    got = fs.best(logits, t, FIRST)[1][:drawing]
                    ok = torch.equal((got - FIRST).sort(dim=1).values, want) if VARIANTS[name][3] else "timing only"
                    us = timed(lambda: fs.best(logits, t, FIRST))
                    print(f"round {rnd} plan span, {drawing:2d} drawing: {name:20s} {us:6.1f} µs (canonical: {ok})",
                          flush=True)
                except Exception as e:      # a probe: report and go on
                    print(f"round {rnd} {drawing} drawing: {name} failed: {type(e).__name__}: {str(e)[:200]}",
                          flush=True)


if __name__ == "__main__":
    main()
