"""A top-256 by radix selection in one Triton kernel, one program per row, idle rows skipped — built into the
sampler (`fast_sampling.top`, as a custom op) on 2026-12-02 (third session), measured on an H200 and taken out
again: the one-row step got 0.8 ms *slower* (2.618 against 1.825 ms; the kernel alone 887 µs at one plan row of
151,680 scores, against 96 µs for PyTorch's 19-kernel radix select over all 32 rows;
docs/measured/2026-12-02-h200-s28-topk-bench-ar{,-old-topk}.log). Its selection was right (the interpreter check
below, and all 26 GPU tests with it in the engine), its speed not: one program streams the whole row twice, and
the 2,048-bin histograms are shared-memory atomics into the few bins that the scores of a row crowd into, so they
serialise. What would be needed: many programs per row (a multi-block select as PyTorch's, but over the live rows
only) and per-warp histograms. Kept here as measured; `TRITON_INTERPRET=1 python …` checks it on the CPU.

The kernel's own description, as it stood:
Triton kernel behind `fast_sampling.top` on CUDA (imported only on CUDA hosts, or in the interpreter).

One program per row finds the row's K largest scores by radix selection on order-preserving keys (an FP32's bits
with the sign bit flipped for positives and all bits flipped for negatives, so that keys compare as the floats do;
−0 is taken as +0, as a sort sees them):
1. a histogram of the keys' top 11 bits over the row → the bin holding the K-th largest, and how many lie above;
2. a second pass writes the scores of the bins above straight to the output and copies the bin's own elements
   (ids in ascending order) to a scratch row;
3. two histograms over the scratch row (the next 11 bits, then the last 10) give the K-th largest key exactly;
4. a last pass over the scratch row writes the keys above it, then as many keys equal to it as are still needed,
   lowest ids first.
So the set is the one a stable descending sort's first K entries give — ties at the K-th score broken by lowest
id (`reference` below; in the tree it was `fast_sampling._top_reference`) — whichever rows share the call. Rows that are not live are skipped (their
output: scores 0, ids 0 … K − 1), which is what makes it fast at one live row of 32: PyTorch's radix select works
every row. The output order is the passes' order, not the scores'; the sampler sorts its candidates itself.
"""
import sys

import torch
import triton
import triton.language as tl

TOP_BINS = tl.constexpr(2048)       # 11 bits, then 11, then 10
LOW_BINS = tl.constexpr(1024)


@triton.jit
def _key(x):
    x = tl.where(x == 0.0, 0.0, x)
    b = x.to(tl.uint32, bitcast=True)
    return tl.where((b >> 31) != 0, ~b, b | 0x80000000)


@triton.jit
def _digit(h, need, NB: tl.constexpr):
    """Counts per digit [NB] → (the digit that holds the need-th largest key, how many keys lie in digits above)."""
    d = tl.arange(0, NB)
    at_or_above = tl.sum(h, 0) - tl.cumsum(h, 0) + h
    digit = tl.max(tl.where(at_or_above >= need, d, -1), 0)
    return digit, tl.sum(tl.where(d > digit, h, 0), 0)


@triton.jit
def top_candidates(X, LIVE, VALS, IDS, SV, SI, W, K: tl.constexpr, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """X [S, W] FP32 scores (W ≥ K), LIVE [S] bool → VALS [S, K] FP32, IDS [S, K] int64 (columns of X); SV, SI
    [S, W] scratch (FP32 scores, int32 columns)."""
    row = tl.program_id(0).to(tl.int64)
    out = tl.arange(0, K)
    lane = tl.arange(0, BLOCK)
    if tl.load(LIVE + row) == 0:
        tl.store(VALS + row * K + out, tl.zeros([K], tl.float32))
        tl.store(IDS + row * K + out, out.to(tl.int64))
    else:
        x_row, sv, si = X + row * W, SV + row * W, SI + row * W
        h = tl.zeros([TOP_BINS], tl.int32)
        for c in tl.range(0, W, BLOCK, num_stages=STAGES):
            i = c + lane
            ok = i < W
            key = _key(tl.load(x_row + i, mask=ok, other=0.0))
            h += tl.histogram((key >> 21).to(tl.int32), TOP_BINS, mask=ok)
        top, above = _digit(h, K, TOP_BINS)

        written = above * 0
        kept = above * 0
        for c in tl.range(0, W, BLOCK, num_stages=STAGES):
            i = c + lane
            ok = i < W
            x = tl.load(x_row + i, mask=ok, other=0.0)
            d = (_key(x) >> 21).to(tl.int32)
            gt = ok & (d > top)
            eq = ok & (d == top)
            at = written + tl.cumsum(gt.to(tl.int32), 0) - 1
            tl.store(VALS + row * K + at, x, mask=gt)
            tl.store(IDS + row * K + at, i.to(tl.int64), mask=gt)
            to = kept + tl.cumsum(eq.to(tl.int32), 0) - 1
            tl.store(sv + to, x, mask=eq)
            tl.store(si + to, i, mask=eq)
            written += tl.sum(gt.to(tl.int32), 0)
            kept += tl.sum(eq.to(tl.int32), 0)
        tl.debug_barrier()        # the scratch row is read by other threads of this program than wrote it
        need = K - above

        h = tl.zeros([TOP_BINS], tl.int32)
        for c in range(0, kept, BLOCK):
            j = c + lane
            ok = j < kept
            key = _key(tl.load(sv + j, mask=ok, other=0.0, cache_modifier=".cg"))
            h += tl.histogram(((key >> 10) & 2047).to(tl.int32), TOP_BINS, mask=ok)
        mid, above_mid = _digit(h, need, TOP_BINS)
        low_h = tl.zeros([LOW_BINS], tl.int32)
        for c in range(0, kept, BLOCK):
            j = c + lane
            ok = j < kept
            key = _key(tl.load(sv + j, mask=ok, other=0.0, cache_modifier=".cg"))
            inside = ok & (((key >> 10) & 2047).to(tl.int32) == mid)
            low_h += tl.histogram((key & 1023).to(tl.int32), LOW_BINS, mask=inside)
        low, above_low = _digit(low_h, need - above_mid, LOW_BINS)
        kth = (top.to(tl.uint32) << 21) | (mid.to(tl.uint32) << 10) | low.to(tl.uint32)
        ties = need - above_mid - above_low           # keys equal to the K-th still to take (≥ 1)

        greater = above * 0
        equal = above * 0
        for c in range(0, kept, BLOCK):
            j = c + lane
            ok = j < kept
            x = tl.load(sv + j, mask=ok, other=0.0, cache_modifier=".cg")
            col = tl.load(si + j, mask=ok, other=0, cache_modifier=".cg")
            key = _key(x)
            gt = ok & (key > kth)
            eq = ok & (key == kth)
            at = above + greater + tl.cumsum(gt.to(tl.int32), 0) - 1
            tl.store(VALS + row * K + at, x, mask=gt)
            tl.store(IDS + row * K + at, col.to(tl.int64), mask=gt)
            rank = equal + tl.cumsum(eq.to(tl.int32), 0) - 1
            take = eq & (rank < ties)
            at = K - ties + rank
            tl.store(VALS + row * K + at, x, mask=take)
            tl.store(IDS + row * K + at, col.to(tl.int64), mask=take)
            greater += tl.sum(gt.to(tl.int32), 0)
            equal += tl.sum(eq.to(tl.int32), 0)


def launch(x, live, k: int):
    """x [S, W] FP32 contiguous (W ≥ k), live [S] bool → (values [S, k] FP32, columns [S, k] int64)."""
    rows, width = x.shape
    values = torch.empty(rows, k, dtype=torch.float32, device=x.device)
    ids = torch.empty(rows, k, dtype=torch.long, device=x.device)
    sv = torch.empty(rows, width, dtype=torch.float32, device=x.device)
    si = torch.empty(rows, width, dtype=torch.int32, device=x.device)
    top_candidates[(rows,)](x, live, values, ids, sv, si, width, K=k, BLOCK=4096, STAGES=3, num_warps=8)
    return values, ids


def reference(x, live, k):
    """The first k entries of a stable descending sort (ties to the lowest columns); idle rows 0 and 0 … k − 1."""
    values, ids = x.sort(dim=1, descending=True, stable=True)
    values, ids = values[:, :k], ids[:, :k]
    idle = ~live[:, None]
    return values.masked_fill(idle, 0.0), torch.where(idle, torch.arange(k) % x.shape[1], ids)


def check_on_cpu():
    torch.manual_seed(0)
    K = 256
    rows = [torch.randn(9000) * 3,                                    # a plain row, W not a multiple of the block
            torch.full((5000,), 1.5),                                 # all equal: lowest columns win
            torch.cat([torch.randn(100), torch.full((4900,), float("-inf"))]),   # fewer finite scores than K
            torch.randint(0, 4, (6000,)).float(),                     # heavy ties at the K-th score
            torch.randn(K),                                           # W == K
            torch.where(torch.rand(7000) < 0.5, torch.zeros(7000), -torch.zeros(7000)) + (torch.rand(7000) < 0.01),
            torch.randn(8192) * 1e-30,                                # tiny magnitudes: the low key bits decide
            torch.randn(9000) * 3]
    for r, row in enumerate(rows):
        x = torch.full((3, row.numel()), float("nan"))
        x[1] = row
        live = torch.tensor([False, True, False])
        got_v, got_i = launch(x, live, K)
        want_v, want_i = reference(x, live, K)
        assert torch.equal(got_v[0], want_v[0]) and torch.equal(got_i[2], want_i[2]), r     # idle rows
        order = got_i[1].argsort()
        assert torch.equal(got_i[1][order], want_i[1].sort().values), r
        assert torch.equal(got_v[1][order], x[1][want_i[1].sort().values]), r
    print("ok", len(rows))


if __name__ == "__main__":
    check_on_cpu()
