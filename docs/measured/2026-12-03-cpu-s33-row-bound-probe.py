"""The row stage of the candidate kernels with a bound (2026-12-03, session s33; written on the CPU box, run on an
H200): `row_best` first narrows each drawing row's chunk candidates to those at or above a bound on its 256th key
(`_floor`; ~1,100–1,600 of the plan span's 9,472) and searches those only. Against the previous kernels (session
s32's stages/_topk_triton.py, commit 46fb47b, copied to .gpu/topk_s32.py for the run), in one process: µs per call
of `fast_sampling.best`'s two launches for one drawing slot and for all 32 on the yue2-3b plan and semantic spans
(CUDA graphs of 16 calls), and whether each gives the canonical first 256.
Run from the repository root: python docs/measured/2026-12-03-cpu-s33-row-bound-probe.py"""
import importlib.util
import pathlib
import sys

import torch

sys.path.insert(0, ".")
import stages  # noqa: E402
from stages import _topk_triton as now  # noqa: E402
from stages import fast_sampling as fs  # noqa: E402

SLOTS, VOCAB, CALLS = 32, 184704, 16
SPANS = {"plan": (0, 151_424), "semantic": (151_389, 184_704)}


def previous():
    spec = importlib.util.spec_from_file_location("topk_s32", pathlib.Path(".gpu/topk_s32.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def table(drawing: int) -> fs.SlotTable:
    t = fs.SlotTable.empty(SLOTS, VOCAB, "cuda")
    for r in range(SLOTS):
        t.set_slot(r, {"temperature": 0.8, "penalty": 1.1, "window": 50, "min_tokens": 0, "max_tokens": 10_000,
                       "end": 151_389 if r % 2 else 5, "lo": 0, "hi": VOCAB, "is_cond": True, "active": r < drawing,
                       "key": r})
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
    kernels = {"s32 (no bound)": previous(), "bound": now}
    for rnd in range(2):
        for name, (first, last) in SPANS.items():
            for scale, what in ((3.0, "randn·3"), (0.3, "randn·0.3")):
                logits = (torch.randn(SLOTS, last - first, device="cuda") * scale).bfloat16()
                for drawing in (1, 32):
                    t = table(drawing)
                    want = fs.canonical_first(fs.scores(logits, t, first), fs.CANDIDATES)[:drawing].sort(dim=1).values
                    line = []
                    for label, mod in kernels.items():
                        stages._topk_triton = mod       # fast_sampling.best imports it from the package per call
                        sys.modules["stages._topk_triton"] = mod
                        ok = torch.equal((fs.best(logits, t, first)[1][:drawing] - first).sort(dim=1).values, want)
                        line.append(f"{label} {timed(lambda: fs.best(logits, t, first)):6.1f} µs (canonical: {ok})")
                    print(f"round {rnd} {name} span, logits {what}, {drawing:2d} drawing: " + "; ".join(line),
                          flush=True)
    stages._topk_triton = now
    sys.modules["stages._topk_triton"] = now


if __name__ == "__main__":
    main()
