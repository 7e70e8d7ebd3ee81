"""Triton kernel behind `vae_tf32x3`: a 1-D convolution over channels-last FP32 activations as an implicit GEMM on
tensor cores, with FP32-level accuracy from three TF32 products (imported only on CUDA hosts, or in the
interpreter).

y[b, t, n] = bias[n] (+ r[b, t, n]) + Σ_j Σ_c x[b, t + OFF0 + j·DIL, c] · W_j[n, c], x zero outside [0, L).

Time is the MMA's M and output channels its N, so both operands are K-major (channels contiguous): what Hopper's
TF32 MMA takes from shared memory, and what TMA loads. The x tile of tap j is the same rows shifted by j·DIL; TMA
fills rows outside the tensor with zeros, which is the convolution's padding, per batch entry (the descriptor is
3-D). A program walks (channel block, tap) pairs with the taps inner, so consecutive loads reuse the same channels.
Each x value is split in registers into a head with TF32's 11 significant bits (rounded to nearest) and the exact
remainder; the weights come split the same way (`vae_tf32x3.split`). acc += lo·W_hi + hi·W_lo + hi·W_hi leaves
out lo·lo, ~2⁻²² of a product, so the result sits within FP32 rounding noise of an FP32 convolution.
"""
import triton
import triton.language as tl


@triton.jit
def _split(a):
    """a = hi + lo exactly: hi keeps TF32's bits, rounded to nearest; lo (truncated to TF32 by the MMA) the rest."""
    hi = ((a.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)
    return hi, a - hi


@triton.jit
def conv_cl(X, WH, WL, Y, R, BIAS, N_PAD, C_IN, OFF0, DIL, TAPS: tl.constexpr, HAS_RES: tl.constexpr,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, STAGES: tl.constexpr):
    t0 = tl.program_id(0) * BM
    n0 = tl.program_id(1) * BN
    b = tl.program_id(2)
    acc = tl.zeros([BM, BN], tl.float32)
    for i in tl.range(0, TAPS * (C_IN // BK), num_stages=STAGES):
        j = i % TAPS
        c0 = (i // TAPS) * BK
        a_hi, a_lo = _split(X.load([b, t0 + OFF0 + j * DIL, c0]).reshape(BM, BK))
        w_hi = WH.load([j * N_PAD + n0, c0])
        w_lo = WL.load([j * N_PAD + n0, c0])
        # The step's three products in a fresh accumulator, the small terms first, then one add: chained straight
        # into the running sum, ptxas serialised the MMAs (its warning C7515).
        part = tl.dot(a_lo, w_hi.T, input_precision="tf32")
        part = tl.dot(a_hi, w_lo.T, part, input_precision="tf32")
        acc += tl.dot(a_hi, w_hi.T, part, input_precision="tf32")
    acc += tl.load(BIAS + n0 + tl.arange(0, BN))[None, :]
    if HAS_RES:
        acc += R.load([b, t0, n0]).reshape(BM, BN)
    Y.store([b, t0, n0], acc.reshape(1, BM, BN))
