"""Prepared on a CPU box (2026-12-03, session s32), run on the H200: the candidate kernels of `fast_sampling.best`
(stages/_topk_triton.py) at several chunk sizes and warp counts, against the compiled PyTorch path they replace
(`reference_best` under torch.compile: the scores' fused kernels and a radix top-k), each captured as a CUDA graph
of 16 calls and replayed. µs per call for one drawing slot and for all 32, on the yue2-3b plan and semantic spans,
and whether each variant's candidates are the canonical first 256 (`canonical_first`).
Run from the repository root: python docs/measured/2026-12-03-cpu-s32-candidates-probe.py [--probes]
(the first run had one threshold per pass: `…-h200-s32-candidates-probe.log`; `--probes`, several)"""
import sys

import torch

sys.path.insert(0, ".")
from stages import _topk_triton as kern  # noqa: E402
from stages import fast_sampling as fs  # noqa: E402
from stages.compiled import shared  # noqa: E402

SLOTS, VOCAB, CALLS = 32, 184704, 16
SPANS = {"plan": (0, 151_424), "semantic": (151_389, 184_704)}
# (columns per chunk, warps per chunk program, warps per row program, thresholds per pass of the search)
VARIANTS = [(8192, 8, 16, 1), (8192, 4, 8, 1), (4096, 4, 16, 1), (4096, 8, 8, 1), (2048, 4, 16, 1), (2048, 2, 8, 1),
            (16384, 8, 8, 1)]
if "--probes" in sys.argv:   # the second run: several thresholds per pass (the tree of commit "candidate kernels:
    # the search counts PROBES thresholds per pass"; measured slower, and gone since)
    VARIANTS = [(4096, 8, 8, 1), (4096, 8, 8, 2), (4096, 8, 8, 4), (4096, 8, 8, 8), (4096, 8, 8, 16), (8192, 8, 16, 8),
                (2048, 4, 16, 8), (2048, 4, 8, 4)]


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
    compiled = shared(fs.reference_best)
    for name, (first, last) in SPANS.items():
        logits = (torch.randn(SLOTS, last - first, device="cuda") * 3).bfloat16()
        for drawing in (1, 32):
            t = table(drawing)
            print(f"{name} span ({last - first} ids), {drawing} drawing slot(s) of {SLOTS}:")
            print(f"  compiled scores + torch.topk           {timed(lambda: compiled(logits, t, first)):7.1f} µs")
            want = fs.canonical_first(fs.scores(logits, t, first), fs.CANDIDATES)[:drawing].sort(dim=1).values
            for chunk, warps, row_warps, probes in VARIANTS:
                if probes != 1 and not hasattr(kern, "PROBES"):
                    print(f"  ({probes} probes: not in this tree)")
                    continue
                kern.CHUNK, kern.CHUNK_WARPS, kern.ROW_WARPS, kern.PROBES = chunk, warps, row_warps, probes
                ok = torch.equal((fs.best(logits, t, first)[1][:drawing] - first).sort(dim=1).values, want)
                us = timed(lambda: fs.best(logits, t, first))
                print(f"  chunk {chunk:5d} × {warps} warps, row {row_warps:2d} warps, {probes:2d} probes   {us:7.1f} µs"
                      f"   canonical: {ok}")


if __name__ == "__main__":
    main()
