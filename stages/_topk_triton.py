"""The Triton kernels behind `fast_sampling.best` on CUDA (imported only there, or in the interpreter): each drawing
row's scores and its `CANDIDATES` best ids in two launches, where PyTorch took ~25 (the scores' fused kernels, then
a radix top-k of four passes over every slot's whole span: ~125 µs of a one-row step on an H200).

- `chunk_best`, one program per (slot, chunk of the span): the scores of `fast_sampling.scores` for the chunk — CFG
  combine, allowed ids, min_tokens, window penalty, temperature — with the same roundings, then the chunk's K best by
  their order-preserving 32-bit keys: the K-th largest key by bisection (at most 32 counts over the chunk), every
  key above it, and the lowest columns among the keys equal to it. Stored in column order.
- `row_best`, one program per slot: the same selection over its chunks' candidates, which lie in column order, so
  ties again go to the lowest ids. A bound first shrinks what the search reads (`_floor`): every key at or above
  the row's K-th largest is at or above it, and those (~1,600 of the plan span's 9,472 at its 37 chunks, for
  Gaussian scores) are compacted, in order, to at most FEW; the search then counts over FEW keys instead of all.
  When more pass the bound (ties, the allowed ids in a few chunks), the search runs over all of them as before.
  Measured on an H200 (docs/benchmarks.md, 2026-12-03 fourth session): both launches 44.6 µs for one plan row
  against 55.3 without the bound (a pass of the search over all 16,384 keys costs ~0.75 µs).
So a row's K candidates are exactly the first K of its span in the canonical order (score descending, id ascending),
found from its own scores only (batch invariance). Slots that draw nothing this step (inactive, or the
unconditional half of a CFG pair) are skipped: their candidates are −∞ at the span's first id, never read.
"""
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

NEG = tl.constexpr(-2147483648)    # below the key of −∞: what padding columns are given
CHUNK, CHUNK_WARPS = 4096, 8    # columns and warps per program of `chunk_best` (measured best, 2026-12-03)
ROW_WARPS = 8                   # warps per program of `row_best`
FEW = 2048                      # the candidates `row_best` searches after its bound, at most


@triton.jit
def _key(v):
    """FP32 → int32 with the same order (−∞ lowest)."""
    bits = v.to(tl.int32, bitcast=True)
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _select(key, K: tl.constexpr):
    """Which of `key` (≥ K of them) are the K largest, ties at the K-th going to the first positions; and the
    position among the chosen of each chosen one (in the order of `key`)."""
    # the largest t with at least K keys ≥ t, by bisection between the least of K group maxima (each group has a
    # key ≥ it) and the greatest key; mid stays within int32. Counting several thresholds per pass was slower
    # (docs/benchmarks.md, 2026-12-03 third session): the passes cost their compares, not their barriers.
    lo = tl.min(tl.max(tl.reshape(key, [K, key.shape[0] // K]), 1), 0).to(tl.int64)
    hi = tl.max(key, 0).to(tl.int64)
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2
        ok = tl.sum((key >= mid.to(tl.int32)).to(tl.int32), 0) >= K
        lo = tl.where(ok, mid, lo)
        hi = tl.where(ok, hi, mid - 1)
    kth = lo.to(tl.int32)
    above = key > kth
    tie = key == kth
    chosen = above | (tie & (tl.cumsum(tie.to(tl.int32), 0) <= K - tl.sum(above.to(tl.int32), 0)))
    return chosen, tl.cumsum(chosen.to(tl.int32), 0) - 1


@triton.jit
def _floor(key, K: tl.constexpr, G: tl.constexpr):
    """A key at most the K-th largest of `key` ([chunks · K], each chunk's K candidates in a row): in each chunk
    the least of the maxima of its G groups has G keys at or above it, so the (K / G)-th largest of those chunk
    values has K keys at or above it. −2³¹ when there are fewer chunks than K / G."""
    n: tl.constexpr = key.shape[0] // K
    if K // G > n:
        bound = tl.full((), NEG, tl.int32)
    else:
        per_chunk = tl.min(tl.max(tl.reshape(key, [n, G, K // G]), 2), 1)
        ranked = tl.sort(per_chunk, 0, descending=True)
        bound = tl.sum(tl.where(tl.arange(0, n) == K // G - 1, ranked, 0), 0)
    return bound


@triton.jit
def _round(v, BF16: tl.constexpr):
    """FP32 rounded to BF16 (to nearest, ties to even) and back, by its bits: the interpreter's own conversion
    truncates."""
    if BF16:
        bits = v.to(tl.int32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
        return bits.to(tl.float32, bitcast=True)
    return v


@triton.jit
def _div(a, b, PRECISE: tl.constexpr):
    """IEEE division as PyTorch's; the interpreter's is already."""
    if PRECISE:
        return tl.math.div_rn(a, b)
    return a / b


@triton.jit
def _pow(a, b, PRECISE: tl.constexpr):
    """powf as PyTorch computes it on CUDA (libdevice); exp2 · log2 in the interpreter."""
    if PRECISE:
        return libdevice.pow(a, b)
    return tl.exp2(b * tl.log2(a))


@triton.jit
def chunk_best(L, PARTNER, CFG, USE_CFG, END, LO, HI, COUNT, MIN_TOKENS, COUNTS, PENALTY, TEMP, ACTIVE, IS_COND,
               OUT_V, OUT_C, W, first, s_l, s_counts, s_out, CHUNK: tl.constexpr, K: tl.constexpr,
               BF16: tl.constexpr, PRECISE: tl.constexpr, PDL: tl.constexpr):
    r = tl.program_id(0)
    c = tl.program_id(1)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if tl.load(ACTIVE + r).to(tl.int1) & tl.load(IS_COND + r).to(tl.int1):
        col = c * CHUNK + tl.arange(0, CHUNK)
        valid = col < W
        ids = first + col
        x = tl.load(L + r * s_l + col, mask=valid, other=0.0).to(tl.float32)
        if tl.load(USE_CFG + r).to(tl.int1):     # fast_sampling.scores, rounded to the logits' dtype where it is
            u = tl.load(L + tl.load(PARTNER + r) * s_l + col, mask=valid, other=0.0).to(tl.float32)
            diff = _round(x - u, BF16)
            x = _round(u + _round(tl.load(CFG + r) * diff, BF16), BF16)
        end = tl.load(END + r)
        allowed = ((ids >= tl.load(LO + r)) & (ids < tl.load(HI + r))) | (ids == end)
        allowed = allowed & ~((ids == end) & (tl.load(COUNT + r) < tl.load(MIN_TOKENS + r)))
        x = tl.where(allowed, x, float("-inf"))
        seen = tl.load(COUNTS + r * s_counts + ids, mask=valid, other=0.0)   # > 0 exactly for ids in the window
        factor = _pow(tl.load(PENALTY + r) + tl.zeros_like(seen), seen, PRECISE)
        x = tl.where(seen > 0, tl.where(x < 0, x * factor, _div(x, factor, PRECISE)), x)
        temp = tl.load(TEMP + r)
        x = _div(x, tl.where(temp == 0, 1.0, temp) + tl.zeros_like(x), PRECISE)
        key = tl.where(valid, _key(x), NEG)
        chosen, at = _select(key, K)
        out = r * s_out + c * K + at
        tl.store(OUT_V + out, x, mask=chosen)
        tl.store(OUT_C + out, col, mask=chosen)


@triton.jit
def _keep_best(IN_V, IN_C, VALUES, IDS, r, s_in, s_v, s_i, first, at, held, K: tl.constexpr):
    """The K best of the candidates at positions `at` (where `held`), stored in their order."""
    v = tl.load(IN_V + r * s_in + at, mask=held, other=float("-inf"))
    col = tl.load(IN_C + r * s_in + at, mask=held, other=0)
    chosen, to = _select(tl.where(held, _key(v), NEG), K)
    tl.store(VALUES + r * s_v + to, v, mask=chosen)
    tl.store(IDS + r * s_i + to, first + col.to(tl.int64), mask=chosen)


@triton.jit
def row_best(IN_V, IN_C, ACTIVE, IS_COND, VALUES, IDS, PICKED, first, n, s_in, s_v, s_i, s_p, BLOCK: tl.constexpr,
             K: tl.constexpr, FEW: tl.constexpr, PDL: tl.constexpr):
    r = tl.program_id(0)
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    rank = tl.arange(0, K)
    if tl.load(ACTIVE + r).to(tl.int1) & tl.load(IS_COND + r).to(tl.int1):
        i = tl.arange(0, BLOCK)
        valid = i < n
        if BLOCK > FEW:
            key = tl.where(valid, _key(tl.load(IN_V + r * s_in + i, mask=valid, other=float("-inf"))), NEG)
            bound = _floor(key, K, 16)     # (the best of three such floors cost more than it saved)
            keep = key >= bound
            count = tl.sum(keep.to(tl.int32), 0)
            if count <= FEW:    # the positions that pass, in order; then the search over those only
                tl.store(PICKED + r * s_p + tl.cumsum(keep.to(tl.int32), 0) - 1, i, mask=keep)
                tl.debug_barrier()
                j = tl.arange(0, FEW)
                held = j < count
                _keep_best(IN_V, IN_C, VALUES, IDS, r, s_in, s_v, s_i, first,
                           tl.load(PICKED + r * s_p + j, mask=held, other=0), held, K)
            else:
                _keep_best(IN_V, IN_C, VALUES, IDS, r, s_in, s_v, s_i, first, i, valid, K)
        else:
            _keep_best(IN_V, IN_C, VALUES, IDS, r, s_in, s_v, s_i, first, i, valid, K)
    else:
        tl.store(VALUES + r * s_v + rank, tl.full([K], float("-inf"), tl.float32))
        tl.store(IDS + r * s_i + rank, tl.full([K], 0, tl.int64) + first)


def launch(logits: torch.Tensor, t, first: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [S, W] of the ids first … first + W − 1 (W ≥ k) → each drawing slot's k best (values [S, k] FP32, ids
    [S, k] int64), in no particular order."""
    from .skinny_gemm import pdl

    assert logits.dtype in (torch.bfloat16, torch.float32), logits.dtype
    slots, width = logits.shape
    chunks = triton.cdiv(width, CHUNK)
    part_v = torch.empty(slots, chunks * k, dtype=torch.float32, device=logits.device)
    part_c = torch.empty(slots, chunks * k, dtype=torch.int32, device=logits.device)
    values = torch.empty(slots, k, dtype=torch.float32, device=logits.device)
    ids = torch.empty(slots, k, dtype=torch.long, device=logits.device)
    precise, early = logits.is_cuda, pdl(logits.device)
    chunk_best[(slots, chunks)](
        logits, t.partner, t.cfg_scale, t.use_cfg, t.end, t.lo, t.hi, t.count, t.min_tokens, t.counts, t.penalty,
        t.temperature, t.active, t.is_cond, part_v, part_c, width, first, logits.stride(0), t.counts.stride(0),
        part_v.stride(0), CHUNK=CHUNK, K=k, BF16=logits.dtype == torch.bfloat16, PRECISE=precise, PDL=early,
        num_warps=CHUNK_WARPS, launch_pdl=early)
    picked = torch.empty(slots, FEW, dtype=torch.int32, device=logits.device)
    row_best[(slots,)](
        part_v, part_c, t.active, t.is_cond, values, ids, picked, first, chunks * k, part_v.stride(0),
        values.stride(0), ids.stride(0), picked.stride(0), BLOCK=triton.next_power_of_2(chunks * k), K=k, FEW=FEW,
        PDL=early, num_warps=ROW_WARPS, launch_pdl=early)
    return values, ids
