"""Gluon kernel behind `layer_chain_w8a8.chain` (imported only on Hopper hosts): the layer chain of
`_layer_chain_gluon.py` — o (+ residual), gate/up (SiLU·up), down (+ residual), the next layer's q/k/v, one
persistent launch — with e4m3 weights and e4m3 activations (W8A8: Hopper's FP8 MMA takes both operands in FP8).

What differs from the BF16 chain (whose roles, counters and grid waits this kernel keeps; read that module first):
- the weights are e4m3 with an FP32 scale per output row (stages/quant.py's fp8), in k-tiles of 256 values: a ring
  slot holds the bytes of a BF16 k-tile of 128 and a k-tile is as many MMA instructions, so a layer has half the
  handshakes and half the weight bytes (24.0 against 36.8 µs per layer in the timing-only probe,
  docs/measured/2026-12-04-cpu-s37-fp8-chain-probe.py);
- every product's input is quantised per row, dynamically, as compressed-tensors' FP8_DYNAMIC scheme does:
  q = e4m3(u · 448 / amax(u)), u the input times the RMSNorm's weight where a norm comes before (the norm's per-row
  factor cancels in q; it is applied in the epilogue with the row's scale amax / 448). The products store BF16 as
  before (the residual stream, the attention's q/k/v), and each o / gate-up / down tile also stores its rows' partial
  maxima of what the next product quantises, as the o and down tiles store partial sums of squares; the signal warp
  takes the maximum over tiles (order-free, so a row's scale is its own: batch invariance) into shared memory. The
  first product's input, the attention output, comes with its rows' maxima (`am_a`, computed before the kernel);
- a *converter* warpgroup sits between the activation warp (the BF16 chain's, copying BF16 k-tiles into a staging
  ring) and the consumer: it scales each k-tile, rounds it to e4m3 into the MMA's slot and releases the slot, so the
  consumer's serial chain of handshakes and MMAs does no more work than in the timing-only probe;
- the epilogue multiplies the FP32 product by (row scale · norm factor) and the weight row's scale, then rounds as
  the BF16 chain does.
The weight warp, the activation warp and the consumer's k-loop (`_tile_mma`) are the BF16 chain's own: their byte
counts follow the descriptors, their MMAs the rings' element type.
Status: compiled for sm_90 with Triton 3.6 on the CPU box; not yet run on a GPU (docs/ar-engine.md).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier

from ._layer_chain_gluon import (_asm_zero, _done, _factor, _tile_mma, _wait_counter, _wait_kernel_before,
                                 activation_warp, weight_warp)

ROWS = gl.constexpr(32)     # layer_chain.ROWS: the step's slots; the MMA's M is 64, rows 32-63 zero


# ---- the converter warpgroup: BF16 k-tile → × norm weight × 448 / amax → e4m3, into the MMA's slot -------------

@gluon.jit
def _convert(st, sfull, sempty, xs, xfull, xempty, j, gamma, inv, pid, N: gl.constexpr, K: gl.constexpr,
             BN: gl.constexpr, BK: gl.constexpr, SSTAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr,
             NORM: gl.constexpr):
    lay: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, lay))
    scale = inv.slice(0, ROWS).load(gl.SliceLayout(1, lay))     # the rows' 448 / amax (0 for a row without one)
    for tile in range(pid, N // BN, G):
        for k in range(K // BK):
            s = j % SSTAGES
            mbarrier.wait(sfull.index(s), (j // SSTAGES) & 1)
            x = st.index(s).load(lay).to(gl.float32)
            gl.thread_barrier()                         # every warp has read the staging slot
            mbarrier.arrive(sempty.index(s))
            if NORM:
                x = x * gl.load(gamma + k * BK + cols).to(gl.float32)[None, :]
            q = gl.minimum(gl.maximum(x * scale[:, None], -448.0), 448.0).to(gl.float8e4nv)
            xsl = j % XSTAGES
            mbarrier.wait(xempty.index(xsl), ((j // XSTAGES) & 1) ^ 1)
            xs.index(xsl).slice(0, ROWS).store(q)
            fence_async_shared()
            gl.thread_barrier()                         # every warp's part is written before the one arrive
            mbarrier.arrive(xfull.index(xsl))
            j += 1
    return j


@gluon.jit
def converter(st, sfull, sempty, xs, xfull, xempty, cready, inv, gamma_post, gamma_in, pid, H: gl.constexpr,
              I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr, BN_GU: gl.constexpr, BN_D: gl.constexpr,
              BN_Q: gl.constexpr, BK: gl.constexpr, SSTAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr,
              NEXT: gl.constexpr):
    j = pid * 0
    mbarrier.wait(cready.index(0), 0)
    j = _convert(st, sfull, sempty, xs, xfull, xempty, j, gamma_post, inv.slice(0, 64), pid, H, H, BN_O, BK,
                 SSTAGES, XSTAGES, G, False)
    mbarrier.wait(cready.index(1), 0)
    j = _convert(st, sfull, sempty, xs, xfull, xempty, j, gamma_post, inv.slice(64, 64), pid, I, H, BN_GU, BK,
                 SSTAGES, XSTAGES, G, True)
    mbarrier.wait(cready.index(2), 0)
    j = _convert(st, sfull, sempty, xs, xfull, xempty, j, gamma_post, inv.slice(128, 64), pid, H, I, BN_D, BK,
                 SSTAGES, XSTAGES, G, False)
    if NEXT:
        mbarrier.wait(cready.index(3), 0)
        j = _convert(st, sfull, sempty, xs, xfull, xempty, j, gamma_in, inv.slice(192, 64), pid, Q, H, BN_Q, BK,
                     SSTAGES, XSTAGES, G, True)


# ---- the signal warp: norm factors and row scales -----------------------------------------------------------------

@gluon.jit
def _scales(am, M, scl, inv, TILES: gl.constexpr):
    """Each row's amax over the [TILES, 32] partial maxima (FP32, or the attention rows' own maxima in BF16 with
    TILES 1) → scl = amax / 448 (the epilogue's) and inv = 448 / amax (the converter's), 0 where a row has none."""
    pl: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, pl))
    best = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, pl))
    for c in gl.static_range((TILES + 15) // 16):
        t = c * 16 + gl.arange(0, 16, layout=gl.SliceLayout(0, pl))
        part = gl.load(am + t[None, :] * ROWS + r[:, None], mask=(r < M)[:, None] & (t < TILES)[None, :],
                       other=0.0, cache_modifier=".cg")
        best = gl.maximum(best, gl.max(part.to(gl.float32), axis=1))
    top = best * 0.0 + 448.0
    scl.slice(0, ROWS).store(gl.div_rn(best, top))                  # IEEE divisions: the reference's numbers
    inv.slice(0, ROWS).store(gl.where(best > 0, gl.div_rn(top, gl.maximum(best, 1e-30)), 0.0))
    gl.thread_barrier()


@gluon.jit
def signal_warp(counter, err, sq_h, sq_x, am_a, am_h, am_g, am_x, ready, cready, fac_h, fac_x, scl, inv, M, eps,
                H: gl.constexpr, I: gl.constexpr, BN_O: gl.constexpr, BN_GU: gl.constexpr, BN_D: gl.constexpr,
                G: gl.constexpr, NEXT: gl.constexpr):
    _wait_kernel_before(G * 0)
    _scales(am_a, M, scl.slice(0, 64), inv.slice(0, 64), 1)
    mbarrier.arrive(cready.index(0))
    mbarrier.arrive(ready.index(0))
    _wait_counter(counter, err, G)
    _factor(sq_h, fac_h, M, eps, H, H // BN_O)
    _scales(am_h, M, scl.slice(64, 64), inv.slice(64, 64), H // BN_O)
    mbarrier.arrive(cready.index(1))
    mbarrier.arrive(ready.index(1))
    _wait_counter(counter + 1, err, G)
    _scales(am_g, M, scl.slice(128, 64), inv.slice(128, 64), I // BN_GU)
    mbarrier.arrive(cready.index(2))
    mbarrier.arrive(ready.index(2))
    if NEXT:
        _wait_counter(counter + 2, err, G)
        _factor(sq_x, fac_x, M, eps, H, H // BN_D)
        _scales(am_x, M, scl.slice(192, 64), inv.slice(192, 64), H // BN_D)
        mbarrier.arrive(cready.index(3))
        mbarrier.arrive(ready.index(3))


# ---- the consumer warpgroup ----------------------------------------------------------------------------------------

@gluon.jit
def _product(xs, xfull, xempty, ring, full, empty, i, j, pid, out_ptr, res_ptr, wscale, sq_out, am_out, gamma_next,
             ready, fac, scl, M, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
             STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, PAIR: gl.constexpr, NORM: gl.constexpr,
             ADD: gl.constexpr, SQ: gl.constexpr, AM: gl.constexpr, AMG: gl.constexpr):
    """out[:M, N] = epilogue(q(x) · Wqᵀ · row scale · w_scale). ADD: + res; NORM: × the rows' norm factors; PAIR:
    SiLU(gate)·up; SQ: the tile's rows' sums of squares → sq_out; AM: the tile's rows' max |stored value| (× the
    next norm's weight when AMG) → am_out."""
    W: gl.constexpr = 2 * BN if PAIR else BN
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, W, 32])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, W, layout=gl.SliceLayout(0, mma))
    col = c // 2 if PAIR else c
    rows = (r < M)[:, None] & (c < W)[None, :]
    PER: gl.constexpr = 32 // W
    SLOTS: gl.constexpr = K // BK // PER
    mbarrier.wait(ready, 0)
    rscale = scl.load(gl.SliceLayout(1, mma))
    if NORM:
        rscale = rscale * fac.load(gl.SliceLayout(1, mma))
    for tile in range(pid, N // BN, G):
        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), W, PER,
                        SLOTS, STAGES, XSTAGES)
        i += SLOTS
        j += SLOTS * PER

        wrow = tile * W + c                             # the weight rows (paired for gate/up) of the tile's columns
        acc = acc * rscale[:, None] * gl.load(wscale + wrow)[None, :]
        offs = r[:, None] * N + (tile * BN + col)[None, :]
        if PAIR:
            gate, up = gl.split(acc.reshape([64, BN, 2]))
            where, _ = gl.split(offs.reshape([64, BN, 2]))
            g = gate.to(gl.bfloat16).to(gl.float32)
            silu = (g * (1.0 / (1.0 + gl.exp(-g)))).to(gl.bfloat16)
            y = (silu.to(gl.float32) * up.to(gl.bfloat16).to(gl.float32)).to(gl.bfloat16)
            gl.store(out_ptr + where, y, mask=where < M * N)
            peak = gl.convert_layout(gl.max(gl.abs(y.to(gl.float32)), axis=1), gl.SliceLayout(1, mma))
            gl.store(am_out + tile * ROWS + r, peak, mask=r < ROWS)
        else:
            y = acc.to(gl.bfloat16)
            if ADD:
                res = gl.load(res_ptr + offs, mask=rows, other=0.0, cache_modifier=".cg")
                y = (y.to(gl.float32) + res.to(gl.float32)).to(gl.bfloat16)
            gl.store(out_ptr + offs, y, mask=rows)
            yf = gl.where(rows, y.to(gl.float32), 0.0)
            if SQ:
                gl.store(sq_out + tile * ROWS + r, gl.sum(yf * yf, axis=1), mask=r < ROWS)
            if AM:
                if AMG:
                    yf = yf * gl.load(gamma_next + tile * BN + c).to(gl.float32)[None, :]
                gl.store(am_out + tile * ROWS + r, gl.max(gl.abs(yf), axis=1), mask=r < ROWS)
    return i, j


@gluon.jit
def consumer(xs, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, scl, a_res, h_out, g_out, x_out, q_out,
             so, sgu, sd, sq_, sq_h, sq_x, am_h, am_g, am_x, gamma_post, gamma_in, counter, err, M, pid,
             H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr, BN_GU: gl.constexpr,
             BN_D: gl.constexpr, BN_Q: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr,
             G: gl.constexpr, NEXT: gl.constexpr):
    i = pid * 0
    j = pid * 0
    _wait_kernel_before(i)
    _asm_zero(i, "griddepcontrol.launch_dependents;")
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, h_out, a_res, so, sq_h, am_h, gamma_post,
                    ready.index(0), fac_h, scl.slice(0, 64), M, H, H, BN_O, BK, STAGES, XSTAGES, G,
                    False, False, True, True, True, True)
    _done(counter, i)
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, g_out, g_out, sgu, sq_h, am_g, gamma_post,
                    ready.index(1), fac_h, scl.slice(64, 64), M, I, H, BN_GU, BK, STAGES, XSTAGES, G,
                    True, True, False, False, True, False)
    _done(counter + 1, i)
    _wait_counter(counter + 1, err, G)
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, x_out, h_out, sd, sq_x, am_x, gamma_in,
                    ready.index(2), fac_x, scl.slice(128, 64), M, H, I, BN_D, BK, STAGES, XSTAGES, G,
                    False, False, True, True, True, True)
    _done(counter + 2, i)
    if NEXT:
        i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, q_out, q_out, sq_, sq_x, am_x, gamma_in,
                        ready.index(3), fac_x, scl.slice(192, 64), M, Q, H, BN_Q, BK, STAGES, XSTAGES, G,
                        False, True, False, False, False, False)
        _done(counter + 3, i)


@gluon.jit
def w8a8_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, so, sgu, sd, sq_, gamma_post,
               gamma_in, sq_h, sq_x, am_a, am_h, am_g, am_x, counter, err, M, eps, H: gl.constexpr, I: gl.constexpr,
               Q: gl.constexpr, BN_O: gl.constexpr, BN_GU: gl.constexpr, BN_D: gl.constexpr, BN_Q: gl.constexpr,
               BK: gl.constexpr, STAGES: gl.constexpr, SSTAGES: gl.constexpr, XSTAGES: gl.constexpr,
               G: gl.constexpr, NEXT: gl.constexpr):
    """Grid (G,). wo/wgu/wd/wq: e4m3 weight descriptors ([BN, BK] blocks; gate/up rows paired), so/sgu/sd/sq_ their
    per-row FP32 scales (sgu paired as its rows); xa/xh/xg/xn: BF16 activation descriptors ([32, BK] blocks);
    gamma_post / gamma_in: the RMSNorm weights before gate/up and before the next q/k/v (BF16 [H]); am_a [M] (BF16):
    the attention output's row maxima; am_h [H / BN_O, 32], am_g [I / BN_GU, 32], am_x [H / BN_D, 32] FP32:
    workspaces for the partial maxima; NEXT: the next layer's q/k/v product runs too; the rest as in
    `_layer_chain_gluon.layer_chain`."""
    pid = gl.program_id(0)
    ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, 32, BK],
                                     gl.NVMMASharedLayout.get_default_for([32, BK], gl.float8e4nv))
    xs = gl.allocate_shared_memory(gl.float8e4nv, [XSTAGES, 64, BK],
                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.float8e4nv))
    st = gl.allocate_shared_memory(gl.bfloat16, [SSTAGES, 32, BK],
                                   gl.NVMMASharedLayout.get_default_for([32, BK], gl.bfloat16))
    flat: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    fac_h = gl.allocate_shared_memory(gl.float32, [64], flat)
    fac_x = gl.allocate_shared_memory(gl.float32, [64], flat)
    scl = gl.allocate_shared_memory(gl.float32, [256], flat)   # per product p: [64 p, 64 p + 64)
    inv = gl.allocate_shared_memory(gl.float32, [256], flat)
    ready = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    cready = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    sfull = gl.allocate_shared_memory(gl.int64, [SSTAGES, 1], mbarrier.MBarrierLayout())
    sempty = gl.allocate_shared_memory(gl.int64, [SSTAGES, 1], mbarrier.MBarrierLayout())
    xfull = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    xempty = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for s in gl.static_range(SSTAGES):
        mbarrier.init(sfull.index(s), count=1)
        mbarrier.init(sempty.index(s), count=1)
    for s in gl.static_range(XSTAGES):
        mbarrier.init(xfull.index(s), count=1)
        mbarrier.init(xempty.index(s), count=1)
    for s in gl.static_range(4):
        mbarrier.init(ready.index(s), count=1)
        mbarrier.init(cready.index(s), count=1)
    vec: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    fac_h.store(gl.zeros([64], gl.float32, vec))
    fac_x.store(gl.zeros([64], gl.float32, vec))
    for p in gl.static_range(4):
        scl.slice(p * 64, 64).store(gl.zeros([64], gl.float32, vec))
        inv.slice(p * 64, 64).store(gl.zeros([64], gl.float32, vec))
    zero: gl.constexpr = gl.BlockedLayout([1, 16], [4, 8], [4, 1], [1, 0])
    for s in gl.static_range(XSTAGES):      # rows 32-63 stay zero: the converter writes rows 0-31
        xs.index(s).store(gl.zeros([64, BK], gl.float8e4nv, zero))
    fence_async_shared()
    gl.warp_specialize([
        (consumer, (xs, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, scl, a_res, h_out, g_out, x_out, q_out,
                    so, sgu, sd, sq_, sq_h, sq_x, am_h, am_g, am_x, gamma_post, gamma_in, counter, err, M, pid,
                    H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, XSTAGES, G, NEXT)),
        (weight_warp, (wo, wgu, wd, wq, ring, full, empty, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, G,
                       NEXT, True)),
        (activation_warp, (xa, xh, xg, xn, st, sfull, sempty, counter, err, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q,
                           BK, SSTAGES, G, NEXT)),
        (signal_warp, (counter, err, sq_h, sq_x, am_a, am_h, am_g, am_x, ready, cready, fac_h, fac_x, scl, inv, M,
                       eps, H, I, BN_O, BN_GU, BN_D, G, NEXT)),
        (converter, (st, sfull, sempty, xs, xfull, xempty, cready, inv, gamma_post, gamma_in, pid, H, I, Q, BN_O,
                     BN_GU, BN_D, BN_Q, BK, SSTAGES, XSTAGES, G, NEXT)),
    ], [1, 1, 1, 4], [40, 40, 80, 128])
    old = gl.atomic_add(counter + 4, 1, sem="acq_rel", scope="gpu")
    if old == G - 1:
        for p in gl.static_range(5):
            gl.atomic_xchg(counter + p, 0, sem="relaxed", scope="gpu")
