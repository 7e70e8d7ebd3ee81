"""Triton kernels behind `paged_attention.decode_attention` (imported only on CUDA hosts, or in the interpreter).

Both kernels read the raw q/k/v product of the step ([rows, (HEADS + 2·KV)·D]: q heads, then k, then v) and
apply the per-head RMSNorm and RoPE themselves (`_norm_rope`). Scores are kept in base 2: `qk_scale` already
holds 1/√d · log₂e. A row of length L attends to its L − 1 cached keys (the split kernel, span by span) and to
the step's own new key (the merge kernel, which also stores that key and its value into the row's page: nothing
reads that place during the split kernel, so there is no race). With FP8, the pools hold e4m3 keys and values
(kv_cache.py): the split kernel widens them to FP16 for its products, and the merge kernel rounds the new key and
value to e4m3 before it uses and stores them."""
import triton
import triton.language as tl


@triton.jit
def _norm_rope(QKV, W, COS, SIN, row_at, cs_at, heads, hmask, eps, D: tl.constexpr):
    """Heads `heads` of one row of the raw q/k/v product → RMSNorm per head (weight W), then rotate-half RoPE, each
    op rounded to the activation dtype where the eager ops of `transformer.qk_norm_rope` round → [len(heads), D]."""
    dtype = QKV.dtype.element_ty
    half: tl.constexpr = D // 2
    d = tl.arange(0, D)
    partner = (d + half) % D
    x = tl.load(QKV + row_at + heads[:, None] * D + d[None, :], mask=hmask[:, None], other=0.0).to(tl.float32)
    xp = tl.load(QKV + row_at + heads[:, None] * D + partner[None, :], mask=hmask[:, None], other=0.0).to(tl.float32)
    factor = tl.rsqrt(tl.sum(x * x, 1) / D + eps).to(dtype).to(tl.float32)[:, None]
    w = tl.load(W + d).to(tl.float32)[None, :]
    wp = tl.load(W + partner).to(tl.float32)[None, :]
    n = ((x * factor).to(dtype).to(tl.float32) * w).to(dtype).to(tl.float32)
    npart = ((xp * factor).to(dtype).to(tl.float32) * wp).to(dtype).to(tl.float32)
    rot = tl.where(d[None, :] < half, -npart, npart)
    cos = tl.load(COS + cs_at + d).to(tl.float32)[None, :]
    sin = tl.load(SIN + cs_at + d).to(tl.float32)[None, :]
    return ((n * cos).to(dtype).to(tl.float32) + (rot * sin).to(dtype).to(tl.float32)).to(dtype)


@triton.jit
def _chunk_pages(past, PROGRAMS: tl.constexpr, PAGE: tl.constexpr):
    """Pages per chunk for a row with `past` cached keys: the fewest that PROGRAMS chunks cover the row with, never
    less than one. It depends on the row's own length alone."""
    return tl.maximum(tl.cdiv(tl.cdiv(past, PROGRAMS), PAGE), 1)


@triton.jit
def _units(chunk_pages, SPLIT: tl.constexpr):
    """A chunk's units: pages per unit (the chunk cut into at most SPLIT), and units per full chunk."""
    unit_pages = tl.cdiv(chunk_pages, SPLIT)
    return unit_pages, tl.cdiv(chunk_pages, unit_pages)


@triton.jit
def _fold(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Two partial softmax sums, each over its own maximum, as one: the same operations wherever it runs (the fused
    multiply-adds spelt out), so a chunk folded in one program and one folded from stored units agree bit for bit.
    With a = (−inf, 0, 0) it returns b exactly."""
    m = tl.maximum(m_a, m_b)
    alpha = tl.where(m_a == m, 1.0, tl.exp2(m_a - m))     # exactly 1 for the larger one, whatever exp2 gives at 0
    beta = tl.where(m_b == m, 1.0, tl.exp2(m_b - m))
    return m, tl.fma(l_a, alpha, l_b * beta), tl.fma(acc_a, alpha[:, None], acc_b * beta[:, None])


@triton.jit
def _step(LENS, ROWS, ROWS_PAD: tl.constexpr, PROGRAMS: tl.constexpr, PAGE: tl.constexpr, SPLIT: tl.constexpr,
          WIDE_UP_TO):
    """What every program of both kernels works out alike from the step's lengths: each row's cached keys, its
    unit places (units per chunk times chunks), the places before it, and whether the step is `wide` (one program
    per unit: few units in all) or not (one per chunk)."""
    r = tl.arange(0, ROWS_PAD)
    pasts = tl.maximum(tl.load(LENS + r, mask=r < ROWS, other=0) - 1, 0)
    chunk_pages = _chunk_pages(pasts, PROGRAMS, PAGE)
    _, per_chunk = _units(chunk_pages, SPLIT)
    places = tl.cdiv(tl.cdiv(pasts, PAGE), chunk_pages) * per_chunk
    cum = tl.cumsum(places, 0)
    return r, pasts, places, cum, tl.sum(places, 0) <= WIDE_UP_TO


@triton.jit
def split_kv_attention(QKV, QW, COS, SIN, K, V, BT, LENS, PM, PL, PACC,
                       s_r, scs_r, sk_p, sk_h, sk_t, sbt_r, sm_u, sa_u, sa_h, qk_scale, eps, ROWS, WIDE_UP_TO,
                       HEADS: tl.constexpr, KV: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr,
                       PAGE: tl.constexpr, IEEE: tl.constexpr, PROGRAMS: tl.constexpr, STAGES: tl.constexpr,
                       PDL: tl.constexpr, SPLIT: tl.constexpr, ROWS_PAD: tl.constexpr, FP8: tl.constexpr = False):
    """Program (row slot, kv head, p): the query heads of one GQA group against some of a row's cached keys. The
    keys fall into at most PROGRAMS chunks of whole pages (`_chunk_pages`), each chunk into at most SPLIT units
    (`_units`); a unit is summed a page at a time (online softmax in FP32, a pipelined loop) and a chunk folds its
    units in order (`_fold`). When the step is `wide`, program number row slot · PROGRAMS + p takes the unit place
    of that number among all live rows' places and stores its unit; otherwise program (row, p) takes chunk p of
    that row, folds its units itself and stores the chunk. The merge kernel folds stored units into chunks the same
    way, so a row's chunks — and its result — do not depend on which way the step ran (batch invariance)."""
    GROUPS: tl.constexpr = HEADS // KV
    slot, kvh, p = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    # The step's lengths are written before the kernel before begins (each kernel of the step waits for its own
    # kernel before, then lets the next launch), so they can be read before the wait; a program without keys
    # leaves at once instead of holding an SM while it waits (2026-12-03: 1.5-2 % off a one-row step).
    r, pasts, places, cum, wide = _step(LENS, ROWS, ROWS_PAD, PROGRAMS, PAGE, SPLIT, WIDE_UP_TO)
    if wide:
        out = slot * PROGRAMS + p
        row = tl.sum((cum <= out).to(tl.int32), 0)
        mine = r == row
        past = tl.sum(tl.where(mine, pasts, 0), 0)
        place = out - tl.sum(tl.where(mine, cum - places, 0), 0)
        chunk_pages = _chunk_pages(past, PROGRAMS, PAGE)
        unit_pages, per_chunk = _units(chunk_pages, SPLIT)
        chunk_start = place // per_chunk * chunk_pages * PAGE
        start = chunk_start + place % per_chunk * unit_pages * PAGE
        end = tl.minimum(tl.minimum(start + unit_pages * PAGE, chunk_start + chunk_pages * PAGE), past)
    else:
        out = slot * PROGRAMS + p
        row = slot
        past = tl.sum(tl.where(r == row, pasts, 0), 0)
        chunk_pages = _chunk_pages(past, PROGRAMS, PAGE)
        unit_pages, per_chunk = _units(chunk_pages, SPLIT)
        chunk_start = p * chunk_pages * PAGE
        start = chunk_start
        end = tl.minimum(start + chunk_pages * PAGE, past)
    busy = start < end
    if PDL:    # launched early: wait for the kernel before (it wrote q), then let the next one launch
        if busy:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
    if busy:
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, D)
        n = tl.arange(0, PAGE)
        heads = kvh * GROUPS + g
        qmask = g < GROUPS
        q = _norm_rope(QKV, QW, COS, SIN, row * s_r, row * scs_r, heads, qmask, eps, D)
        none = tl.full([GROUP_PAD], float("-inf"), tl.float32)
        zero = tl.zeros([GROUP_PAD], tl.float32)
        zeros = tl.zeros([GROUP_PAD, D], tl.float32)
        cm, cl, cacc = none, zero, zeros          # the chunk so far (its units folded)
        m, total, acc = none, zero, zeros         # the unit so far
        for pos in tl.range(start, end, PAGE, num_stages=STAGES):
            page_id = tl.load(BT + row * sbt_r + pos // PAGE)
            kmask = pos + n < end
            offsets = page_id.to(tl.int64) * sk_p + kvh * sk_h + n[:, None] * sk_t + d[None, :]
            k = tl.load(K + offsets, mask=kmask[:, None], other=0.0)
            v = tl.load(V + offsets, mask=kmask[:, None], other=0.0)
            if FP8:    # e4m3 caches: widened to FP16 (exact, one conversion per two values)
                s = tl.dot(q.to(tl.float16), tl.trans(k.to(tl.float16))) * qk_scale
            elif IEEE:   # FP32 caches: no TF32 rounding
                s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
            else:
                s = tl.dot(q, tl.trans(k)) * qk_scale
            s = tl.where(kmask[None, :], s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            alpha = tl.exp2(m - m_new)
            weights = tl.exp2(s - m_new[:, None])
            total = total * alpha + tl.sum(weights, 1)
            if FP8:
                acc = acc * alpha[:, None] + tl.dot(weights.to(tl.float16), v.to(tl.float16))
            elif IEEE:
                acc = acc * alpha[:, None] + tl.dot(weights, v, input_precision="ieee")
            else:
                acc = acc * alpha[:, None] + tl.dot(weights.to(v.dtype), v)
            m = m_new
            # the unit ends here: at the range's end, or after its unit_pages-th page of the chunk
            done = ((pos - chunk_start) // PAGE % unit_pages == unit_pages - 1) | (pos + PAGE >= end)
            fm, fl, facc = _fold(cm, cl, cacc, m, total, acc)
            cm, cl, cacc = tl.where(done, fm, cm), tl.where(done, fl, cl), tl.where(done, facc, cacc)
            m, total, acc = tl.where(done, none, m), tl.where(done, zero, total), tl.where(done, zeros, acc)
        at = out * sm_u + heads
        tl.store(PM + at, cm, mask=qmask)
        tl.store(PL + at, cl, mask=qmask)
        tl.store(PACC + out * sa_u + heads[:, None] * sa_h + d[None, :], cacc, mask=qmask[:, None])


@triton.jit
def merge_and_store(QKV, QW, KW, COS, SIN, K, V, BT, LENS, PM, PL, PACC, OUT,
                    s_r, scs_r, sk_p, sk_h, sk_t, sbt_r, sm_u, sa_u, sa_h, so_r, so_h, qk_scale, eps, ROWS,
                    WIDE_UP_TO, HEADS: tl.constexpr, KV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                    PROGRAMS: tl.constexpr, PDL: tl.constexpr, SPLIT: tl.constexpr, ROWS_PAD: tl.constexpr,
                    FP8: tl.constexpr = False):
    """Program (row, head): the row's chunks (folded here from their stored units when the step was wide, as
    stored otherwise), then the new key and the chunks at once in a fixed order (so batch-invariant); the first
    head of each GQA group also stores the new key and value into the cache."""
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    GROUPS: tl.constexpr = HEADS // KV
    row, head = tl.program_id(0), tl.program_id(1)
    length = tl.load(LENS + row)
    d = tl.arange(0, D)
    if length > 0:
        kvh = head // GROUPS
        one = tl.arange(0, 1)
        everywhere = one < 1
        q = tl.sum(_norm_rope(QKV, QW, COS, SIN, row * s_r, row * scs_r, head + one, everywhere, eps, D), 0)
        k_new = tl.sum(_norm_rope(QKV, KW, COS, SIN, row * s_r, row * scs_r, HEADS + kvh + one, everywhere, eps,
                                  D), 0).to(QKV.dtype.element_ty)
        v_new = tl.load(QKV + row * s_r + (HEADS + KV + kvh) * D + d)
        if FP8:    # the new key and value as the cache will hold them, so every key is seen the same way
            k_new = tl.clamp(k_new.to(tl.float32), -448.0, 448.0).to(K.dtype.element_ty)
            v_new = tl.clamp(v_new.to(tl.float32), -448.0, 448.0).to(V.dtype.element_ty)
        q = q.to(tl.float32)
        m = tl.sum(q * k_new.to(tl.float32), 0) * qk_scale
        total = tl.full([], 1.0, tl.float32)
        acc = v_new.to(tl.float32)
        past = length - 1
        r, pasts, places, cum, wide = _step(LENS, ROWS, ROWS_PAD, PROGRAMS, PAGE, SPLIT, WIDE_UP_TO)
        chunk_pages = _chunk_pages(past, PROGRAMS, PAGE)
        unit_pages, per_chunk = _units(chunk_pages, SPLIT)
        c = tl.arange(0, PROGRAMS)
        chunks = c * chunk_pages * PAGE < past
        if wide:   # unit j of every chunk at once: at most SPLIT folds
            first = tl.sum(tl.where(r == row, cum - places, 0), 0)
            cm = tl.full([PROGRAMS], float("-inf"), tl.float32)
            cl = tl.zeros([PROGRAMS], tl.float32)
            cacc = tl.zeros([PROGRAMS, D], tl.float32)
            for j in tl.static_range(SPLIT):
                there = chunks & (c * 0 + j < per_chunk) & ((c * chunk_pages + j * unit_pages) * PAGE < past)
                at = first + c * per_chunk + j
                um = tl.load(PM + at * sm_u + head, mask=there, other=float("-inf"))
                ul = tl.load(PL + at * sm_u + head, mask=there, other=0.0)
                uacc = tl.load(PACC + at[:, None] * sa_u + head * sa_h + d[None, :], mask=there[:, None], other=0.0)
                fm, fl, facc = _fold(cm, cl, cacc, um, ul, uacc)
                cm, cl, cacc = tl.where(there, fm, cm), tl.where(there, fl, cl), tl.where(there[:, None], facc, cacc)
        else:
            at = row * PROGRAMS + c
            cm = tl.load(PM + at * sm_u + head, mask=chunks, other=float("-inf"))
            cl = tl.load(PL + at * sm_u + head, mask=chunks, other=1.0)
            cacc = tl.load(PACC + at[:, None] * sa_u + head * sa_h + d[None, :], mask=chunks[:, None], other=0.0)
        lse = tl.where(chunks, cm + tl.log2(tl.where(chunks, cl, 1.0)), float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, 0))
        alpha = tl.exp2(m - m_new)
        w = tl.where(chunks, tl.exp2(lse - m_new), 0.0)
        part = tl.where(chunks[:, None], cacc / tl.where(chunks, cl, 1.0)[:, None], 0.0)
        acc = acc * alpha + tl.sum(part * w[:, None], 0)
        total = total * alpha + tl.sum(w, 0)
        tl.store(OUT + row * so_r + head * so_h + d, (acc / total).to(OUT.dtype.element_ty))
        if head % GROUPS == 0:
            pos = length - 1
            page_id = tl.load(BT + row * sbt_r + pos // PAGE).to(tl.int64)
            place = page_id * sk_p + kvh * sk_h + (pos % PAGE) * sk_t + d
            tl.store(K + place, k_new)
            tl.store(V + place, v_new)
    else:
        tl.store(OUT + row * so_r + head * so_h + d, tl.zeros([D], tl.float32).to(OUT.dtype.element_ty))
