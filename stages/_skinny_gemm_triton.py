"""Triton kernel behind `skinny_gemm.linear` (imported only on CUDA hosts, or in the interpreter).

The weight is the big operand and is read once; the few activation rows ride along. A program computes the
transposed tile out[m, n-tile]ᵀ = W[n-tile, k-range] · X[m, k-range]ᵀ, so the weight tile is the MMA's tall side.
With SPLIT > 1 the K range is cut into SPLIT parts whose FP32 partials go to a workspace; the program that finishes
last for an n-tile (an atomic counter tells it) sums the partials in the order 0, 1, …, SPLIT − 1 and applies the
epilogue. That order never depends on which program finished first, so the result is deterministic, and a row's
result never depends on the other rows. EPI is the epilogue's index in `skinny_gemm.EPILOGUES`: 0 none, 1 residual
add, 2 SiLU(gate)·up.
With SCALED, W holds FP8 values (quant.py) and the MMA runs in FP16: e4m3 → fp16 is exact and one hardware
conversion per two values (e4m3 → bf16 takes several, and made the kernel slower than reading BF16 weights:
docs/benchmarks.md, 2026-12-01), and BF16 activations fit FP16's mantissa exactly — but not its range: a magnitude
above 65,504 would overflow (the CPU reference computes in FP32). The FP32 product of each output channel is then
multiplied by its scale, before the norm factor and the epilogue.
With FP4 (and SCALED), W holds NVFP4 values (quant.py): e2m1 codes two to a byte, element 2j in the low nibble, and
G an e4m3 scale per 16 values of a row. A tile's low and high nibbles are widened separately, each code to FP16 by
placing its three magnitude bits under FP16's exponent and multiplying by 2¹⁴ (exact), then by its group scale
(exact too: at most six significant bits, within FP16's range), and the two halves meet the even and the odd
columns of x in two MMAs — no interleaving of registers.
With NORM, x is to be RMS-normalised first and W already holds the norm's weight (`skinny_gemm.fold_norm`): the
program sums x² over the x tiles it loads for the product (it reads all of K) and scales its FP32 result by each
row's factor rsqrt(mean(x²) + eps) before the epilogue. The norm then costs no launch of its own, and x stays an
unmodified MMA operand (multiplying x by the norm weight in registers was measured slower; summing x² from a second,
row-major load of x too).
"""
import triton
import triton.language as tl


@triton.jit
def _tile(X, W, M, sx, sw, n, k_lo, w_first, K_PART: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
          BK: tl.constexpr, STAGES: tl.constexpr, NORM: tl.constexpr, MMA: tl.constexpr):
    """W[n, k_lo : k_lo + K_PART] · X[:M, same]ᵀ → FP32 [BN, BM], and with NORM each row's Σx² over the range
    ([BM]); the first weight tile is already loaded."""
    m = tl.arange(0, BM)
    kk = tl.arange(0, BK)
    xt = tl.load(X + m[None, :] * sx + (k_lo + kk)[:, None], mask=m[None, :] < M, other=0.0)
    acc = tl.dot(w_first.to(MMA), xt.to(MMA), tl.zeros([BN, BM], tl.float32))
    squares = tl.zeros([BM], tl.float32)
    if NORM:
        squares += tl.sum(xt.to(tl.float32) * xt.to(tl.float32), 0)
    for i in tl.range(BK, K_PART, BK, num_stages=STAGES):
        k = k_lo + i
        xt = tl.load(X + m[None, :] * sx + (k + kk)[:, None], mask=m[None, :] < M, other=0.0)
        w = tl.load(W + n[:, None].to(tl.int64) * sw + (k + kk)[None, :])
        acc = tl.dot(w.to(MMA), xt.to(MMA), acc)
        if NORM:
            squares += tl.sum(xt.to(tl.float32) * xt.to(tl.float32), 0)
    return acc, squares


@triton.jit
def _e2m1(code, FOLD: tl.constexpr):
    """e2m1 codes (uint8, sign in bit 3) → their FP16 values (FOLD: times 2⁻¹⁴, the bits as they fall)."""
    c = code.to(tl.uint16)
    bits = ((c & 7) << 9) | ((c & 8) << 12)
    if FOLD:
        return bits.to(tl.float16, bitcast=True)
    return bits.to(tl.float16, bitcast=True) * tl.full([1], 16384.0, tl.float16)


@triton.jit
def _fp4_halves(packed, scales, BN: tl.constexpr, BK: tl.constexpr, FOLD: tl.constexpr):
    """A loaded tile ([BN, BK/2] bytes, [BN, BK/16] e4m3 group scales) → (even, odd) columns as FP16 values.
    FOLD: the codes stay 2¹⁴ too small and the group scales are taken 2⁷ too large (exact: the products are
    multiples of 2⁻¹⁷ below 22), so the product is 2⁷ too small and the epilogue multiplies by 2⁷."""
    g = scales.to(tl.float16)
    if FOLD:
        g = g * tl.full([1], 128.0, tl.float16)
    g = tl.reshape(tl.broadcast_to(g[:, :, None], (BN, BK // 16, 8)), (BN, BK // 2))
    return _e2m1(packed & 15, FOLD) * g, _e2m1(packed >> 4, FOLD) * g


@triton.jit
def _load_fp4(W, G, n, k, sw, sg, BK: tl.constexpr):
    j = tl.arange(0, BK // 2)
    packed = tl.load(W + n[:, None].to(tl.int64) * sw + (k // 2 + j)[None, :])
    scales = tl.load(G + n[:, None].to(tl.int64) * sg + (k // 16 + tl.arange(0, BK // 16))[None, :])
    return packed, scales


@triton.jit
def _tile_fp4(X, W, G, M, sx, sw, sg, n, k_lo, packed, scales, K_PART: tl.constexpr, BM: tl.constexpr,
              BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr, FOLD: tl.constexpr):
    """`_tile` over NVFP4 weights (no norm): the first tile's bytes and scales are already loaded."""
    m = tl.arange(0, BM)
    j = tl.arange(0, BK // 2)
    even, odd = _fp4_halves(packed, scales, BN, BK, FOLD)
    xe = tl.load(X + m[None, :] * sx + (k_lo + 2 * j)[:, None], mask=m[None, :] < M, other=0.0)
    xo = tl.load(X + m[None, :] * sx + (k_lo + 2 * j + 1)[:, None], mask=m[None, :] < M, other=0.0)
    acc = tl.dot(even, xe.to(tl.float16), tl.zeros([BN, BM], tl.float32))
    acc = tl.dot(odd, xo.to(tl.float16), acc)
    for i in tl.range(BK, K_PART, BK, num_stages=STAGES):
        k = k_lo + i
        packed, scales = _load_fp4(W, G, n, k, sw, sg, BK)
        xe = tl.load(X + m[None, :] * sx + (k + 2 * j)[:, None], mask=m[None, :] < M, other=0.0)
        xo = tl.load(X + m[None, :] * sx + (k + 2 * j + 1)[:, None], mask=m[None, :] < M, other=0.0)
        even, odd = _fp4_halves(packed, scales, BN, BK, FOLD)
        acc = tl.dot(even, xe.to(tl.float16), acc)
        acc = tl.dot(odd, xo.to(tl.float16), acc)
    return acc


@triton.jit
def _finish(acc, acc2, OUT, RES, M, so, sr, n, EPI: tl.constexpr, BM: tl.constexpr):
    """The epilogue, with the rounding of the unfused ops: each GEMM result is rounded to the output dtype first."""
    m = tl.arange(0, BM)
    dtype = OUT.dtype.element_ty
    y = acc.to(dtype)
    if EPI == 1:     # residual + x·Wᵀ
        r = tl.load(RES + m[None, :] * sr + n[:, None], mask=m[None, :] < M, other=0.0)
        y = (y.to(tl.float32) + r.to(tl.float32)).to(dtype)
    if EPI == 2:     # silu(gate) · up
        g = y.to(tl.float32)
        s = (g * tl.sigmoid(g)).to(dtype)
        y = (s.to(tl.float32) * acc2.to(dtype).to(tl.float32)).to(dtype)
    tl.store(OUT + m[None, :] * so + n[:, None], y, mask=m[None, :] < M)


@triton.jit
def skinny_gemm(X, W, OUT, RES, PART, COUNT, SCALE, G, M, N, sx, sw, so, sr, sg, eps,
                K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
                EPI: tl.constexpr, NORM: tl.constexpr, SCALED: tl.constexpr, FP4: tl.constexpr,
                STAGES: tl.constexpr, PDL: tl.constexpr, FOLD: tl.constexpr = False):
    """Program (n-tile, part). N is the output width; with SILU_MUL the up rows of W start at row N. NORM needs
    SPLIT == 1 (a program must see all of K to know a row's factor); FP4 needs SCALED and no NORM.

    With PDL (programmatic dependent launch, sm90+) the kernel may start while the one before it finishes: it
    loads its first weight tiles (weights are never written), then waits for the previous kernel before it reads
    an activation or writes anything, and only then lets the next kernel start."""
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    part = tl.program_id(1)
    K_PART: tl.constexpr = K // SPLIT
    k_lo = part * K_PART
    kk = tl.arange(0, BK)
    if FP4:
        packed, scales = _load_fp4(W, G, n, k_lo, sw, sg, BK)
        packed2, scales2 = packed, scales
        if EPI == 2:
            packed2, scales2 = _load_fp4(W, G, n + N, k_lo, sw, sg, BK)
    else:
        w_first = tl.load(W + n[:, None].to(tl.int64) * sw + (k_lo + kk)[None, :])
        w_first2 = w_first
        if EPI == 2:
            w_first2 = tl.load(W + (n + N)[:, None].to(tl.int64) * sw + (k_lo + kk)[None, :])
    if PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
    if FP4:
        acc = _tile_fp4(X, W, G, M, sx, sw, sg, n, k_lo, packed, scales, K_PART, BM, BN, BK, STAGES, FOLD)
        squares = tl.zeros([BM], tl.float32)
        acc2 = acc
        if EPI == 2:
            acc2 = _tile_fp4(X, W, G, M, sx, sw, sg, n + N, k_lo, packed2, scales2, K_PART, BM, BN, BK, STAGES,
                             FOLD)
    else:
        MMA: tl.constexpr = tl.float16 if SCALED else X.dtype.element_ty
        acc, squares = _tile(X, W, M, sx, sw, n, k_lo, w_first, K_PART, BM, BN, BK, STAGES, NORM, MMA)
        acc2 = acc
        if EPI == 2:
            acc2, _ = _tile(X, W, M, sx, sw, n + N, k_lo, w_first2, K_PART, BM, BN, BK, STAGES, False, MMA)
    if SCALED:     # quantised W (quant.py): each output channel's scale, on the FP32 product
        acc = acc * tl.load(SCALE + n)[:, None]
        if EPI == 2:
            acc2 = acc2 * tl.load(SCALE + N + n)[:, None]
        if FP4:
            if FOLD:      # the 2⁷ the folded widening left out (exact)
                acc = acc * 128.0
                acc2 = acc2 * 128.0
    if NORM:
        factor = tl.rsqrt(squares / K + eps)[None, :]
        acc = acc * factor
        acc2 = acc2 * factor
    if SPLIT == 1:
        _finish(acc, acc2, OUT, RES, M, so, sr, n, EPI, BM)
    else:
        m = tl.arange(0, BM)
        cell = n[:, None] * BM + m[None, :]                       # PART is [SPLIT, 2, N, BM] FP32
        tl.store(PART + (part * 2) * N * BM + cell, acc)
        if EPI == 2:
            tl.store(PART + (part * 2 + 1) * N * BM + cell, acc2)
        done = tl.atomic_add(COUNT + tl.program_id(0), 1, sem="acq_rel")
        if done == SPLIT - 1:                                     # the last part of this n-tile to finish
            total = tl.zeros([BN, BM], tl.float32)
            total2 = tl.zeros([BN, BM], tl.float32)
            for s in tl.static_range(SPLIT):
                total += tl.load(PART + (s * 2) * N * BM + cell, cache_modifier=".cg")
                if EPI == 2:
                    total2 += tl.load(PART + (s * 2 + 1) * N * BM + cell, cache_modifier=".cg")
            tl.store(COUNT + tl.program_id(0), 0)                  # ready for the next call (and graph replay)
            _finish(total, total2, OUT, RES, M, so, sr, n, EPI, BM)
