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
def _span(past, PROGRAMS: tl.constexpr, PAGE: tl.constexpr):
    """Keys per span for a row with `past` cached keys: whole pages, few enough that PROGRAMS spans cover the row
    (one span per program), never less than a page. It depends on the row's own length alone."""
    return tl.maximum(tl.cdiv(tl.cdiv(past, PROGRAMS), PAGE), 1) * PAGE


@triton.jit
def _page(q, k, v, m, total, acc, kmask, qk_scale, FP8: tl.constexpr, IEEE: tl.constexpr):
    """One page of keys and values into a span's running (max, sum, output): online softmax in FP32."""
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
    return m_new, total, acc


@triton.jit
def split_kv_attention(QKV, QW, COS, SIN, K, V, BT, LENS, PART, LSE,
                       s_r, scs_r, sk_p, sk_h, sk_t, sbt_r, sp_r, sp_h, sp_s, sl_r, sl_h, qk_scale, eps,
                       HEADS: tl.constexpr, KV: tl.constexpr, GROUP_PAD: tl.constexpr, D: tl.constexpr,
                       PAGE: tl.constexpr, IEEE: tl.constexpr, PROGRAMS: tl.constexpr, STAGES: tl.constexpr,
                       PDL: tl.constexpr, SLOTS: tl.constexpr, EARLY_ROWS: tl.constexpr, FP8: tl.constexpr = False):
    """Program (row, kv head, p) handles span p of the row's cached keys (`_span`), a page at a time: the query
    heads of one GQA group against the span's keys, online softmax in FP32. With at most EARLY_ROWS live rows of
    the step's SLOTS (a power of two ≥ its rows) the span's first page is read before the wait for the kernel
    before and the rest through a pipelined loop; with more, every page through the loop. The same sums in the
    same order either way: which path a row takes never changes its numbers."""
    GROUPS: tl.constexpr = HEADS // KV
    row, kvh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    # The step's lengths and block table are written before the kernel before begins (each kernel of the step waits
    # for its own kernel before, then lets the next launch), and the cached pages by earlier steps, whose kernels
    # every kernel since has waited for (this step's new key is stored by the merge kernel, after the spans are
    # read). So a span's first page can be read before the wait: with few live rows most programs are resident
    # beside the layer chain (layer_chain.ChainTiling), and the page is in flight while the chain ends (2026-12-04,
    # thirteenth session). With many, most programs launch only after the chain, and a first page taken through
    # registers costs more than the pipelined loop (fourteenth session: 16-32 rows of 450 keys 2-5 % slower).
    # A span with no keys leaves at once instead of holding an SM while it waits (2026-12-03).
    past = tl.load(LENS + row) - 1
    span = _span(past, PROGRAMS, PAGE)
    start = split * span
    if start < past:
        g = tl.arange(0, GROUP_PAD)
        d = tl.arange(0, D)
        n = tl.arange(0, PAGE)
        heads = kvh * GROUPS + g
        qmask = g < GROUPS
        end = tl.minimum(start + span, past)
        slots = tl.arange(0, SLOTS)
        live = tl.sum((tl.load(LENS + slots, mask=slots < tl.num_programs(0), other=0) > 0).to(tl.int32), 0)
        if live <= EARLY_ROWS:
            kmask = start + n < end
            offsets = (tl.load(BT + row * sbt_r + start // PAGE).to(tl.int64) * sk_p + kvh * sk_h
                       + n[:, None] * sk_t + d[None, :])
            k = tl.load(K + offsets, mask=kmask[:, None], other=0.0)
            v = tl.load(V + offsets, mask=kmask[:, None], other=0.0)
            if PDL:    # launched early: wait for the kernel before (it wrote q), then let the next one launch
                tl.extra.cuda.gdc_wait()
                tl.extra.cuda.gdc_launch_dependents()
            q = _norm_rope(QKV, QW, COS, SIN, row * s_r, row * scs_r, heads, qmask, eps, D)
            m, total, acc = _page(q, k, v, tl.full([GROUP_PAD], float("-inf"), tl.float32),
                                  tl.zeros([GROUP_PAD], tl.float32), tl.zeros([GROUP_PAD, D], tl.float32), kmask,
                                  qk_scale, FP8, IEEE)
            first = start + PAGE
        else:
            if PDL:
                tl.extra.cuda.gdc_wait()
                tl.extra.cuda.gdc_launch_dependents()
            q = _norm_rope(QKV, QW, COS, SIN, row * s_r, row * scs_r, heads, qmask, eps, D)
            m = tl.full([GROUP_PAD], float("-inf"), tl.float32)
            total = tl.zeros([GROUP_PAD], tl.float32)
            acc = tl.zeros([GROUP_PAD, D], tl.float32)
            first = start
        for pos in tl.range(first, end, PAGE, num_stages=STAGES):
            page_id = tl.load(BT + row * sbt_r + pos // PAGE)
            kmask = pos + n < end
            offsets = page_id.to(tl.int64) * sk_p + kvh * sk_h + n[:, None] * sk_t + d[None, :]
            k = tl.load(K + offsets, mask=kmask[:, None], other=0.0)
            v = tl.load(V + offsets, mask=kmask[:, None], other=0.0)
            m, total, acc = _page(q, k, v, m, total, acc, kmask, qk_scale, FP8, IEEE)
        part = PART + row * sp_r + heads[:, None] * sp_h + split * sp_s + d[None, :]
        tl.store(part, acc / total[:, None], mask=qmask[:, None])
        tl.store(LSE + row * sl_r + heads * sl_h + split, m + tl.log2(total), mask=qmask)


@triton.jit
def merge_and_store(QKV, QW, KW, COS, SIN, K, V, BT, LENS, PART, LSE, OUT,
                    s_r, scs_r, sk_p, sk_h, sk_t, sbt_r, sp_r, sp_h, sp_s, sl_r, sl_h, so_r, so_h, qk_scale, eps,
                    HEADS: tl.constexpr, KV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                    PROGRAMS: tl.constexpr, PDL: tl.constexpr, FP8: tl.constexpr = False):
    """Program (row, head): the new key first, then the row's spans, all at once in a fixed order (so
    batch-invariant); the first head of each GQA group also stores the new key and value into the cache."""
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
        splits = tl.cdiv(past, _span(past, PROGRAMS, PAGE))
        s = tl.arange(0, PROGRAMS)
        smask = s < splits
        lse = tl.load(LSE + row * sl_r + head * sl_h + s, mask=smask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(lse, 0))
        alpha = tl.exp2(m - m_new)
        w = tl.where(smask, tl.exp2(lse - m_new), 0.0)
        part = tl.load(PART + row * sp_r + head * sp_h + s[:, None] * sp_s + d[None, :], mask=smask[:, None],
                       other=0.0)
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
