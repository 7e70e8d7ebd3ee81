"""The Triton kernel behind `fast_sampling.pick` (imported only on CUDA hosts, or in the interpreter).

One program per slot takes its row's candidates (the top-k's values and ids, in no order) and does what
`fast_sampling.keep`, `race` and `book` do, in the same order and FP32: the canonical order (score descending, id
ascending) by one sort of packed keys — the score's bits made order-preserving as a signed integer in the high
half, 2³² − 1 − id in the low half, so no two keys tie —, the top-k threshold, softmax, top-p, softmax again, the
exponential race with the same counter-based uniforms, then the booking of its own row (window ring, counts, the
step counter). A row touches only its own slot's state, so the rows never interact (batch invariance); which slot
goes on for an unconditional branch is left to the caller. Replaces some 40 launches of the PyTorch version.
"""
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _hash32(x):
    """lowbias32 on int64 holding 32-bit values, as fast_sampling.hash32 computes it (products wrap alike)."""
    x = x & 0xFFFFFFFF
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


@triton.jit
def _exp(x, PRECISE: tl.constexpr):
    """expf as PyTorch computes it on CUDA (libdevice); Triton's fast exp2-based one where libdevice is absent
    (the interpreter)."""
    if PRECISE:
        return libdevice.exp(x)
    return tl.exp(x)


@triton.jit
def _log(x, PRECISE: tl.constexpr):
    if PRECISE:
        return libdevice.log(x)
    return tl.log(x)


@triton.jit
def _softmax(v, PRECISE: tl.constexpr):
    e = _exp(v - tl.max(v, 0), PRECISE)
    return e / tl.sum(e, 0)


@triton.jit
def pick(VALUES, IDS, TEMP, TOP_P, TOP_K, WINDOW, MAX_TOKENS, MIN_KEEP, END, KEY, COUNT, ACTIVE, IS_COND, RING,
         COUNTS, LOG, DRAWN, GO, s_values, s_ids, s_ring, s_counts, C: tl.constexpr, PRECISE: tl.constexpr):
    r = tl.program_id(0)
    rank = tl.arange(0, C)
    v = tl.load(VALUES + r * s_values + rank)
    ids = tl.load(IDS + r * s_ids + rank).to(tl.int64)
    # the canonical order in one sort: order-preserving score bits above, 2^32 - 1 - id below
    bits = v.to(tl.int32, bitcast=True)
    ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    packed = (ordered.to(tl.int64) << 32) | (0xFFFFFFFF - ids)
    packed = tl.sort(packed, descending=True)
    ids = 0xFFFFFFFF - (packed & 0xFFFFFFFF)
    high = (packed >> 32).to(tl.int32)
    v = tl.where(high < 0, high ^ 0x7FFFFFFF, high).to(tl.float32, bitcast=True)
    # top-k (ties at the k-th score survive), top-p over the renormalised rest
    k = tl.minimum(tl.maximum(tl.load(TOP_K + r), 1), C)
    threshold = tl.sum(tl.where(rank == k - 1, v, 0.0), 0)
    v = tl.where(v < threshold, float("-inf"), v)
    probs = _softmax(v, PRECISE)
    top_p = tl.load(TOP_P + r)
    limit = tl.where(top_p < 1.0, top_p, float("inf"))          # top_p = 1 keeps every candidate
    removed = ((tl.cumsum(probs, 0) - probs) > limit) & (rank >= tl.load(MIN_KEEP + r))
    probs = _softmax(tl.where(removed, float("-inf"), v), PRECISE)
    # the race: argmax p / E with E = -log U, U from (key, step, id)
    count = tl.load(COUNT + r)
    row = _hash32(tl.load(KEY + r) ^ _hash32(count + 0x9E3779B9))
    hashed = _hash32(_hash32(row ^ _hash32(ids ^ 0x632BE5AB)) + 0x85EBCA6B)
    u = ((hashed >> 8).to(tl.float32) + 0.5) * (1.0 / 16777216.0)
    best = tl.argmax(probs / -_log(u, PRECISE), 0, tie_break_left=True)
    first = tl.sum(tl.where(rank == 0, ids, 0), 0)
    drawn = tl.where(tl.load(TEMP + r) == 0, first, tl.sum(tl.where(rank == best, ids, 0), 0))
    # the booking of this slot's own row (fast_sampling.book)
    emit = tl.load(ACTIVE + r).to(tl.int1) & tl.load(IS_COND + r).to(tl.int1)
    grow = emit & (drawn != tl.load(END + r))
    window = tl.load(WINDOW + r)
    if grow:
        at = count % window
        evicted = tl.load(RING + r * s_ring + at)
        seen = tl.load(COUNTS + r * s_counts + drawn)
        if count >= window:          # the window is full: the id it forgets loses one
            if evicted != drawn:
                tl.store(COUNTS + r * s_counts + evicted, tl.load(COUNTS + r * s_counts + evicted) - 1.0)
                tl.store(COUNTS + r * s_counts + drawn, seen + 1.0)
        else:
            tl.store(COUNTS + r * s_counts + drawn, seen + 1.0)
        tl.store(RING + r * s_ring + at, drawn)
        tl.store(COUNT + r, count + 1)
    goes_on = grow & (count + 1 < tl.load(MAX_TOKENS + r))
    tl.store(LOG + r, tl.where(emit, drawn, -1))
    tl.store(DRAWN + r, drawn)
    tl.store(GO + r, goes_on)


def launch(values: torch.Tensor, ids: torch.Tensor, t, log: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    slots, c = values.shape
    drawn = torch.empty(slots, dtype=torch.long, device=values.device)
    go = torch.empty(slots, dtype=torch.bool, device=values.device)
    pick[(slots,)](values, ids, t.temperature, t.top_p, t.top_k, t.window, t.max_tokens, t.min_keep, t.end, t.key,
                   t.count, t.active, t.is_cond, t.ring, t.counts, log, drawn, go, values.stride(0), ids.stride(0),
                   t.ring.stride(0), t.counts.stride(0), C=c, PRECISE=values.is_cuda, num_warps=4)
    return drawn, go
