"""Decode attention in one launch per layer instead of two, and its first page read before the wait (2026-12-04,
session s39; written on the CPU box, checked there under Triton's interpreter and compiled for sm_90 with Triton
3.6; not yet run on a GPU — for the next session's device time).
Why: at one plan row of 450 keys the two attention kernels of a layer take ~13 µs of kernel time (split 9.1, merge
5.2; `…-s36-bench-ar.log`'s profile) for ~1.8 MB of keys, and leaving attention out of the step saves 0.18 ms
(`…-s34-no-attention-probe.py`): the time is launches and serial waits, not bytes. Two changes, alone and together
(`fused_attention`'s FUSED and PRELOAD):
- fused: the merge happens inside the split kernel. Every span program stores its partial and adds one to its
  (row, KV head)'s counter (acq_rel); the program that brings the last span merges the group's query heads — the
  new key first, then the spans in span order, as the merge kernel does, so a row's bits still depend on its own
  length alone — stores the output and the new key and value, and resets the counter (skinny_gemm's split-K uses
  the same pattern). A row with no cached keys is merged by its span-0 program alone; an idle row's span-0 program
  writes zeros. One launch a layer: the chain after it waits for one kernel, not two. (Its merge sums the group's
  heads together, so its bits differ from the tree's merge kernel's; it is compared with the reference.)
- first page before the wait: a span's first block-table entry and its first page of keys and values are read
  before `griddepcontrol.wait` — those pages were written by earlier steps, which every kernel since has waited
  for, and this step's new key is stored only after the spans are read — so they are in flight while the chain
  before finishes; the sums are the same, in the same order (the same bits as without it: checked).
Modes:
  --interpret  (any box; sets TRITON_INTERPRET=1 itself): every mode against `paged_attention.reference` on the
               interpreter test's cases (FP32), twice in a row (the counters reset), a row alone against the same
               row among others, and the first page before the wait against the same kernel without it (bitwise);
  (default)    an H200 from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device
               cuda`: the same checks on yue2-3b shapes (BF16), then AREngine steps with the tree's two kernels and
               each mode (the registered op's `_launch` given the probe's body), ms per step, two rounds."""
import os
import sys

if "--interpret" in sys.argv:
    os.environ["TRITON_INTERPRET"] = "1"

import math  # noqa: E402
import pathlib  # noqa: E402

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

sys.path.insert(0, ".")
from stages import paged_attention as pa  # noqa: E402
from stages._paged_attention_triton import _norm_rope, _span  # noqa: E402


@triton.jit
def _page(q, k, v, m, total, acc, kmask, qk_scale, FP8: tl.constexpr, IEEE: tl.constexpr):
    """One page of a span into the running (max, sum, output): the committed split kernel's loop body, as is."""
    if FP8:
        s = tl.dot(q.to(tl.float16), tl.trans(k.to(tl.float16))) * qk_scale
    elif IEEE:
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
def fused_attention(QKV, QW, KW, COS, SIN, K, V, BT, LENS, PART, LSE, COUNT, OUT,
                    s_r, scs_r, sk_p, sk_h, sk_t, sbt_r, sp_r, sp_h, sp_s, sl_r, sl_h, so_r, so_h, qk_scale, eps,
                    HEADS: tl.constexpr, KV: tl.constexpr, GROUP_PAD: tl.constexpr, G2: tl.constexpr,
                    D: tl.constexpr, PAGE: tl.constexpr, IEEE: tl.constexpr, PROGRAMS: tl.constexpr,
                    STAGES: tl.constexpr, PDL: tl.constexpr, FUSED: tl.constexpr, PRELOAD: tl.constexpr,
                    FP8: tl.constexpr = False):
    """FUSED: the program that brings a (row, KV head)'s last span merges (else only the spans, for the tree's
    merge kernel). PRELOAD: a span's first page of keys and values (and its block-table entry) is read before the
    wait for the kernel before — those pages were written by earlier steps, so nothing the kernel before does
    can change them — and the rest after; the sums are the same, in the same order."""
    GROUPS: tl.constexpr = HEADS // KV
    row, kvh, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    length = tl.load(LENS + row)        # written before the kernel before began: readable before the wait
    past = length - 1
    span = _span(past, PROGRAMS, PAGE)
    spans = tl.cdiv(tl.maximum(past, 0), span)
    start = split * span
    busy = start < past
    alone = FUSED & (split == 0) & (spans == 0) & (length > 0)     # only the new key: merged by this program
    idle = FUSED & (split == 0) & (length == 0)
    d = tl.arange(0, D)
    last = alone
    if busy:
        g = tl.arange(0, GROUP_PAD)
        n = tl.arange(0, PAGE)
        heads = kvh * GROUPS + g
        qmask = g < GROUPS
        end = tl.minimum(start + span, past)
        kmask = start + n < end
        offsets = (tl.load(BT + row * sbt_r + start // PAGE).to(tl.int64) * sk_p + kvh * sk_h + n[:, None] * sk_t
                   + d[None, :])
        if PRELOAD:
            k = tl.load(K + offsets, mask=kmask[:, None], other=0.0)
            v = tl.load(V + offsets, mask=kmask[:, None], other=0.0)
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
        if not PRELOAD:
            k = tl.load(K + offsets, mask=kmask[:, None], other=0.0)
            v = tl.load(V + offsets, mask=kmask[:, None], other=0.0)
        q = _norm_rope(QKV, QW, COS, SIN, row * s_r, row * scs_r, heads, qmask, eps, D)
        m, total, acc = _page(q, k, v, tl.full([GROUP_PAD], float("-inf"), tl.float32),
                              tl.zeros([GROUP_PAD], tl.float32), tl.zeros([GROUP_PAD, D], tl.float32), kmask,
                              qk_scale, FP8, IEEE)
        for pos in tl.range(start + PAGE, end, PAGE, num_stages=STAGES):
            page_id = tl.load(BT + row * sbt_r + pos // PAGE)
            kmask = pos + n < end
            offsets = page_id.to(tl.int64) * sk_p + kvh * sk_h + n[:, None] * sk_t + d[None, :]
            k = tl.load(K + offsets, mask=kmask[:, None], other=0.0)
            v = tl.load(V + offsets, mask=kmask[:, None], other=0.0)
            m, total, acc = _page(q, k, v, m, total, acc, kmask, qk_scale, FP8, IEEE)
        part = PART + row * sp_r + heads[:, None] * sp_h + split * sp_s + d[None, :]
        tl.store(part, acc / total[:, None], mask=qmask[:, None])
        tl.store(LSE + row * sl_r + heads * sl_h + split, m + tl.log2(total), mask=qmask)
        if FUSED:
            done = tl.atomic_add(COUNT + row * KV + kvh, 1, sem="acq_rel")
            last = done == spans - 1
            if last:
                tl.store(COUNT + row * KV + kvh, 0)     # ready for the next layer (and graph replay)
    elif alone | idle:
        if PDL:
            tl.extra.cuda.gdc_wait()
            tl.extra.cuda.gdc_launch_dependents()
    if last:    # the group's heads: the new key first, then the spans in order (the merge kernel's sums)
        h = tl.arange(0, G2)
        hmask = h < GROUPS
        heads2 = kvh * GROUPS + h
        one = tl.arange(0, 1)
        everywhere = one < 1
        qg = _norm_rope(QKV, QW, COS, SIN, row * s_r, row * scs_r, heads2, hmask, eps, D).to(tl.float32)
        k_new = tl.sum(_norm_rope(QKV, KW, COS, SIN, row * s_r, row * scs_r, HEADS + kvh + one, everywhere, eps,
                                  D), 0).to(QKV.dtype.element_ty)
        v_new = tl.load(QKV + row * s_r + (HEADS + KV + kvh) * D + d)
        if FP8:
            k_new = tl.clamp(k_new.to(tl.float32), -448.0, 448.0).to(K.dtype.element_ty)
            v_new = tl.clamp(v_new.to(tl.float32), -448.0, 448.0).to(V.dtype.element_ty)
        mk = tl.sum(qg * k_new.to(tl.float32)[None, :], 1) * qk_scale
        sp = tl.arange(0, PROGRAMS)
        smask = hmask[:, None] & (sp < spans)[None, :]
        lse = tl.load(LSE + row * sl_r + heads2[:, None] * sl_h + sp[None, :], mask=smask, other=float("-inf"),
                      cache_modifier=".cg")
        m_new = tl.maximum(mk, tl.max(lse, 1))
        alpha = tl.exp2(mk - m_new)
        w = tl.where(smask, tl.exp2(lse - m_new[:, None]), 0.0)
        part = tl.load(PART + row * sp_r + heads2[:, None, None] * sp_h + sp[None, :, None] * sp_s
                       + d[None, None, :], mask=smask[:, :, None], other=0.0, cache_modifier=".cg")
        acc = v_new.to(tl.float32)[None, :] * alpha[:, None] + tl.sum(part * w[:, :, None], 1)
        total = alpha + tl.sum(w, 1)
        tl.store(OUT + row * so_r + heads2[:, None] * so_h + d[None, :],
                 (acc / total[:, None]).to(OUT.dtype.element_ty), mask=hmask[:, None])
        page_id = tl.load(BT + row * sbt_r + past // PAGE).to(tl.int64)
        place = page_id * sk_p + kvh * sk_h + (past % PAGE) * sk_t + d
        tl.store(K + place, k_new)
        tl.store(V + place, v_new)
    if idle:
        h = tl.arange(0, G2)
        tl.store(OUT + row * so_r + (kvh * GROUPS + h)[:, None] * so_h + d[None, :],
                 tl.zeros([G2, D], tl.float32).to(OUT.dtype.element_ty), mask=(h < GROUPS)[:, None])


_COUNTERS: dict = {}
MODES = {"two kernels (the tree)": None, "first page before the wait": (False, True), "fused": (True, False),
         "fused, first page before the wait": (True, True)}


def probe_launch(qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, eps) -> torch.Tensor:
    """The tree's `_launch` signature, run with `stages.paged_attention`'s globals (the probe gives the registered
    op this body, and puts `fused_attention`, `_COUNTERS` and `PROBE_MODE` = (FUSED, PRELOAD) there)."""
    import triton

    from stages._paged_attention_triton import merge_and_store
    from stages.skinny_gemm import pdl

    fused, preload = PROBE_MODE
    kv, page, d = k_pool.shape[1], k_pool.shape[2], k_pool.shape[3]
    rows, heads = qkv.shape[0], qkv.shape[1] // d - 2 * kv
    groups = heads // kv
    early = pdl(qkv.device)
    key = (qkv.device, k_pool.data_ptr(), rows)          # one counter row per layer's pool: calls never share
    if key not in _COUNTERS:
        _COUNTERS[key] = torch.zeros(rows * kv, dtype=torch.int32, device=qkv.device)
    part = torch.empty(rows, heads, PROGRAMS, d, dtype=torch.float32, device=qkv.device)
    lse = torch.empty(rows, heads, PROGRAMS, dtype=torch.float32, device=qkv.device)
    out = torch.empty(rows, heads, d, dtype=qkv.dtype, device=qkv.device)
    qk_scale = 1.0 / math.sqrt(d) * 1.4426950408889634
    fp8 = k_pool.dtype == torch.float8_e4m3fn
    fused_attention[(rows, kv, PROGRAMS)](
        qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, part, lse, _COUNTERS[key], out,
        qkv.stride(0), cos.stride(0), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2), block_table.stride(0),
        part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1), out.stride(0), out.stride(1),
        qk_scale, eps, HEADS=heads, KV=kv, GROUP_PAD=max(16, triton.next_power_of_2(groups)),
        G2=triton.next_power_of_2(groups), D=d, PAGE=page, IEEE=qkv.dtype == torch.float32, PROGRAMS=PROGRAMS,
        STAGES=STAGES, PDL=early, FUSED=fused, PRELOAD=preload, launch_pdl=early, FP8=fp8)
    if not fused:     # the tree's merge kernel, as `_launch` calls it
        merge_and_store[(rows, heads)](
            qkv, q_norm, k_norm, cos, sin, k_pool, v_pool, block_table, seq_lens, part, lse, out,
            qkv.stride(0), cos.stride(0), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2),
            block_table.stride(0), part.stride(0), part.stride(1), part.stride(2), lse.stride(0), lse.stride(1),
            out.stride(0), out.stride(1), qk_scale, eps, HEADS=heads, KV=kv, D=d, PAGE=page, PROGRAMS=PROGRAMS,
            PDL=early, launch_pdl=early, FP8=fp8)
    return out


def _inputs(rows, heads, kv, d, page, pages, per_row, lens, device, dtype, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    qkv = torch.randn(rows, (heads + 2 * kv) * d, generator=g, device=device).to(dtype)
    q_norm, k_norm = ((1 + 0.1 * torch.randn(d, generator=g, device=device)).to(dtype) for _ in range(2))
    k = torch.randn(pages, kv, page, d, generator=g, device=device).to(dtype)
    v = torch.randn(pages, kv, page, d, generator=g, device=device).to(dtype)
    table = (torch.randperm(pages - 1, generator=g, device=device)[:rows * per_row] + 1).int().reshape(rows, per_row)
    lens = torch.tensor(lens, dtype=torch.int32, device=device)
    angles = (lens.clamp(min=1) - 1).float()[:, None] * 10000.0 ** (-torch.arange(0, d, 2, device=device) / d)
    cos, sin = (f(torch.cat([angles, angles], -1)).to(dtype) for f in (torch.cos, torch.sin))
    return qkv, q_norm, k_norm, cos, sin, k, v, table, lens


def _use(mode) -> None:
    pa.__dict__.update(fused_attention=fused_attention, _COUNTERS=_COUNTERS, PROBE_MODE=MODES[mode] or (False, False))


def check(device, dtype, cases, tol) -> None:
    """Each mode against the reference, repeatable, a row alone the same; the first page before the wait gives the
    bits of the same kernel without it (and of the tree's kernels, when not fused)."""
    launch = type(probe_launch)(probe_launch.__code__, pa.__dict__)
    for rows, heads, kv, d, page, pages, per_row, lens in cases:
        got = {}
        for mode, setting in MODES.items():
            x = _inputs(rows, heads, kv, d, page, pages, per_row, lens, device, dtype)
            k2, v2 = x[5].clone(), x[6].clone()
            _use(mode)
            run = pa._launch if setting is None else launch
            out = run(*x, 1e-6)
            want = pa.reference(*x[:5], k2, v2, *x[7:], 1e-6)
            err = (out.float() - want.float()).abs().max().item()
            assert err <= tol, (mode, lens, err)
            kerr = (x[5].float() - k2.float()).abs().max().item()   # the new key: norm and RoPE, one BF16 ulp apart
            assert torch.equal(x[6].float(), v2.float()) and kerr <= tol, (mode, kerr)
            assert out[lens.index(0)].abs().max() == 0                      # the idle row
            assert torch.equal(run(*x, 1e-6), out), mode                    # again (the counters were reset)
            r = max(range(rows), key=lambda i: lens[i])                     # the longest row, alone in the step
            alone = list(x)
            alone[8] = torch.where(torch.arange(rows, device=device) == r, x[8], 0).int()
            assert torch.equal(run(*alone, 1e-6)[r], out[r]), mode
            got[mode] = out
            print(f"{mode}: rows {rows} page {page} lens {lens}: max abs {err:.2e} from the reference; repeatable; "
                  f"row {r} alone the same", flush=True)
        print("first page before the wait, same bits: unfused", torch.equal(got["first page before the wait"],
              got["two kernels (the tree)"]), "fused", torch.equal(got["fused, first page before the wait"],
                                                                 got["fused"]), flush=True)


def engines() -> None:
    import gc
    import time

    from farm.bench.ar import _measure, copy_rate, weight_bytes
    from stages.ar import AREngine
    from stages.kv_cache import token_bytes
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD
    from stages.weights import load_model

    tree_code = pa._launch.__code__
    cases = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("plan-ref", 2720, "plan", 12),
             ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 24))
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    results = {}
    try:
        for rnd in range(2):
            for mode, setting in MODES.items():
                _use(mode)
                pa._launch.__code__ = tree_code if setting is None else probe_launch.__code__
                t = time.perf_counter()
                engine = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                                  compile=True)
                wbytes = weight_bytes(engine)
                for case, ctx, kind, rows in cases:
                    ms = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)["step_ms"]
                    results.setdefault((case, rows), {}).setdefault(mode, []).append(ms)
                del engine
                gc.collect()
                torch.cuda.empty_cache()
                print(f"round {rnd} {mode}: {time.perf_counter() - t:.1f} s", flush=True)
    finally:
        pa._launch.__code__ = tree_code
    print("ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)


def main() -> None:
    if "--interpret" in sys.argv:
        # the interpreter test's cases (FP32: the interpreter has no BF16 dot), and a page of 8 keys with spans of
        # three pages ending mid-page
        check("cpu", torch.float32, [(4, 4, 2, 16, 64, 24, 5, [0, 1, 129, 300]),
                                     (4, 4, 2, 16, 16, 96, 20, [0, 1, 129, 300]),
                                     (4, 4, 2, 16, 8, 200, 45, [129, 0, 350, 1])], 1e-5)
        print("ok")
        return
    check("cuda", torch.bfloat16, [(6, 16, 8, 128, 64, 256, 40, [0, 1, 63, 129, 960, 2500])], 2e-2)
    engines()


if __name__ == "__main__":
    main()
