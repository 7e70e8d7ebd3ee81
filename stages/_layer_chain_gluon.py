"""Gluon kernel behind `layer_chain.chain` (imported only on Hopper hosts): one persistent launch for the four
products that follow a layer's attention in the AR decode step — o (+ residual), gate/up (+ the folded RMSNorm,
SiLU(gate)·up), down (+ residual) and the next layer's q/k/v (+ the folded RMSNorm).

Why one launch: at a step's 32 rows each product only reads its weight, and separate kernels each pay a start and a
drain that the weight stream does not cover (docs/ar-engine.md). Here every program (one per SM) has four roles:
- a *weight* warp walks every weight tile this program multiplies, for all four products in order, and copies
  each [BN, BK] piece with TMA into a ring of STAGES slots of 32 rows (a 16-row tile puts two consecutive k-tiles
  in a slot, so the ring holds as many bytes ahead for every product). It waits only for a free slot, never for
  the other programs, so the next product's weights are on their way while the grid waits for the product before;
- an *activation* warp waits until every program has finished the product whose output is the next one's input
  (that product's grid-wide counter, acquire loads), then copies the input's [32, BK] k-tiles with TMA into a
  ring of XSTAGES slots (rows 32-63 of each slot stay zero: the warpgroup MMA's M is 64);
- a *signal* warp waits for the same counts, computes the norm factors the next product needs into shared memory
  and arrives on that product's `ready` barrier, so the consumer gets them without a global round trip;
- the *consumer* warpgroup multiplies acc[64, BN] += x[64, BK] · w[BN, BK]ᵀ, runs the epilogue with the rounding
  of the unfused ops (skinny_gemm.reference), stores its tile, and after a product's last tile adds one to the
  product's counter with release semantics. Before the down product it acquires the gate/up counter itself: its
  epilogue adds the o output, which other programs stored, with plain loads (from L2). The o and down residuals
  are loaded before a tile's MMAs, not after them: the consumer is the chain's bottleneck, and the round trip then
  runs under the MMAs (−0.7 µs a layer, the same bits: docs/measured/2026-12-04-h200-s43-chain-early-residual.log).
Each product has a counter of its own: a program with no tile of a product counts it done at once, and with one
counter for all four (session s30's kernel) the 4 programs of 132 without a q/k/v tile counted q/k/v before the
last down tiles were stored, so the q/k/v product could start on a stale down output — a race that the kernel alone
never showed and the engine did (its batch invariance failed). A product's tiles are dealt round robin to the
programs; every tile spans the whole of K, so no sum crosses programs and a row's numbers depend only on its own
inputs (batch invariance). The gate/up matrix comes with its rows paired (`layer_chain.pair_rows`: gate row n,
then up row n), so a tile of BN_GU outputs is one TMA copy of 2·BN_GU rows and one 2·BN_GU-wide MMA per k-tile,
and each thread holds a gate value beside its up value: the accumulator splits into the two in registers for
SiLU(gate)·up. (Session s30's kernel copied 16 gate rows and 16 up rows into each slot and ran two 16-wide MMAs
per k-tile.)
The norms: each tile of the o and down products also stores its rows' sums of squares of the values it stored;
the gate/up and q/k/v products sum those partials (in tile order) into each row's rsqrt(mean(x²) + eps) and scale
their FP32 products by it, as `skinny_gemm` does for a folded norm. (Summing x² from the shared-memory k-tiles
instead, in every tile, made the chain slower than separate launches: 58 against 44 µs per layer.)

Programmatic dependent launch: the kernel may start while the attention kernels before it run. The weight warp
starts at once (weights are never written); the other three first wait for the kernel before
(griddepcontrol.wait), which transitively covers every earlier kernel of the step. The counters are reset by
the last program to leave (every one of its warps past its last wait), so the next chain finds them at zero.
Measured in docs/measured/2026-12-02-cpu-s29-gluon-stream.py and 2026-12-03-*-layer-chain-* (docs/benchmarks.md).
"""
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

ROWS = gl.constexpr(32)     # skinny_gemm.MAX_ROWS, the step's slots; the MMA's M is 64, rows 32-63 zero


@gluon.jit
def _asm_zero(v, ASM: gl.constexpr):
    """Runs one PTX statement in every thread that gets here; v only gives the asm a shape (returns 0)."""
    return gl.inline_asm_elementwise(ASM + " mov.u32 $0, 0;", "=r,r", [v], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _wait_kernel_before(v):
    return _asm_zero(v, "griddepcontrol.wait;")


@gluon.jit
def _wait_counter(counter, err, target):
    """Spin (acquire loads) until every program has counted past `target`; then order this thread's later TMA
    reads after what it has seen (the data were written by other SMs' plain stores). A spin that runs ~10⁸
    polls (seconds) gives up and counts an error rather than hang the card (the caller checks `err`)."""
    n = 0
    seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
    while (seen < target) & (n < 100000000):
        seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
        n += 1
    if seen < target:
        gl.atomic_add(err, 1)
    _asm_zero(seen, "fence.proxy.async.global;")


# ---- the weight warp -------------------------------------------------------------------------------------------

@gluon.jit
def _weights(desc, ring, full, empty, i, pid, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr,
             BK: gl.constexpr, STAGES: gl.constexpr, G: gl.constexpr, PAIR: gl.constexpr):
    """PAIR: the matrix is [2N, K] with its gate and up rows paired, and a tile of BN outputs takes 2·BN rows. A
    slot holds 32 rows: a tile of fewer rows puts that many consecutive k-tiles in each slot (PER), so the ring
    holds as many bytes ahead for every product."""
    ROWS_W: gl.constexpr = 2 * BN if PAIR else BN
    PER: gl.constexpr = 32 // ROWS_W
    for tile in range(pid, N // BN, G):
        for kk in range(K // BK // PER):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(s), PER * desc.block_type.nbytes)
            for u in gl.static_range(PER):
                tma.async_copy_global_to_shared(desc, [tile * ROWS_W, (kk * PER + u) * BK], full.index(s),
                                                ring.index(s).slice(u * ROWS_W, ROWS_W))
            i += 1
    return i


@gluon.jit
def weight_warp(wo, wgu, wd, wq, ring, full, empty, pid, H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr,
                BN_O: gl.constexpr, BN_GU: gl.constexpr, BN_D: gl.constexpr, BN_Q: gl.constexpr, BK: gl.constexpr,
                STAGES: gl.constexpr, G: gl.constexpr, NEXT: gl.constexpr, EARLY: gl.constexpr):
    """EARLY: start streaming at once, beside the kernel before; else after it (griddepcontrol.wait)."""
    i = pid * 0
    if not EARLY:
        _wait_kernel_before(i)
    i = _weights(wo, ring, full, empty, i, pid, H, H, BN_O, BK, STAGES, G, False)
    i = _weights(wgu, ring, full, empty, i, pid, I, H, BN_GU, BK, STAGES, G, True)
    i = _weights(wd, ring, full, empty, i, pid, H, I, BN_D, BK, STAGES, G, False)
    if NEXT:
        i = _weights(wq, ring, full, empty, i, pid, Q, H, BN_Q, BK, STAGES, G, False)


# ---- the activation warp ---------------------------------------------------------------------------------------

@gluon.jit
def _activations(desc, xs, xfull, xempty, j, pid, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr,
                 BK: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr):
    """Rows 0-31 of each slot: the step's 32 rows (the MMA's rows 32-63 stay zero)."""
    for tile in range(pid, N // BN, G):
        for k in range(K // BK):
            s = j % XSTAGES
            mbarrier.wait(xempty.index(s), ((j // XSTAGES) & 1) ^ 1)
            mbarrier.expect(xfull.index(s), desc.block_type.nbytes)
            tma.async_copy_global_to_shared(desc, [0, k * BK], xfull.index(s), xs.index(s).slice(0, ROWS))
            j += 1
    return j


@gluon.jit
def activation_warp(xa, xh, xg, xn, xs, xfull, xempty, counter, err, pid, H: gl.constexpr, I: gl.constexpr,
                    Q: gl.constexpr, BN_O: gl.constexpr, BN_GU: gl.constexpr, BN_D: gl.constexpr,
                    BN_Q: gl.constexpr, BK: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr,
                    NEXT: gl.constexpr):
    j = pid * 0
    _asm_zero(_wait_kernel_before(j), "fence.proxy.async.global;")    # TMA reads what the kernel before stored
    j = _activations(xa, xs, xfull, xempty, j, pid, H, H, BN_O, BK, XSTAGES, G)
    _wait_counter(counter, err, G)
    j = _activations(xh, xs, xfull, xempty, j, pid, I, H, BN_GU, BK, XSTAGES, G)
    _wait_counter(counter + 1, err, G)
    j = _activations(xg, xs, xfull, xempty, j, pid, H, I, BN_D, BK, XSTAGES, G)
    if NEXT:
        _wait_counter(counter + 2, err, G)
        j = _activations(xn, xs, xfull, xempty, j, pid, Q, H, BN_Q, BK, XSTAGES, G)


# ---- the signal warp -------------------------------------------------------------------------------------------

@gluon.jit
def _factor(sq, fac, M, eps, K: gl.constexpr, TILES: gl.constexpr):
    """Each row's rsqrt(mean(x²) + eps) from the [TILES, 32] partial sums of squares the product before wrote
    (one per output tile, summed in tile order: deterministic, and a row's own numbers only) → fac[0:32]."""
    pl: gl.constexpr = gl.BlockedLayout([1, 1], [32, 1], [1, 1], [0, 1])
    r = gl.arange(0, ROWS, layout=gl.SliceLayout(1, pl))
    total = gl.zeros([ROWS], gl.float32, gl.SliceLayout(1, pl))
    for c in gl.static_range(TILES // 16):
        t = c * 16 + gl.arange(0, 16, layout=gl.SliceLayout(0, pl))
        total += gl.sum(gl.load(sq + t[None, :] * ROWS + r[:, None], mask=(r < M)[:, None] & (t < TILES)[None, :],
                                other=0.0, cache_modifier=".cg"), axis=1)
    fac.slice(0, ROWS).store(gl.rsqrt(total / K + eps))
    gl.thread_barrier()                     # every lane's factor is in shared memory before the arrive


@gluon.jit
def signal_warp(counter, err, sq_h, sq_x, ready, fac_h, fac_x, M, eps, H: gl.constexpr, BN_O: gl.constexpr,
                BN_D: gl.constexpr, G: gl.constexpr, NEXT: gl.constexpr):
    """Waits (acquire) for each product to be finished by every program, computes the norm factors the next
    product needs, then arrives on that product's `ready` barrier: the consumer's plain loads of other programs'
    outputs (the factors) come after it, with no global round trip of the consumer's own."""
    _wait_kernel_before(G * 0)
    _wait_counter(counter, err, G)
    _factor(sq_h, fac_h, M, eps, H, H // BN_O)
    mbarrier.arrive(ready.index(1))
    _wait_counter(counter + 1, err, G)
    mbarrier.arrive(ready.index(2))
    if NEXT:
        _wait_counter(counter + 2, err, G)
        _factor(sq_x, fac_x, M, eps, H, H // BN_D)
        mbarrier.arrive(ready.index(3))


# ---- the consumer warpgroup ------------------------------------------------------------------------------------

@gluon.jit
def _silu_up_store(acc, offs, out_ptr, M, N: gl.constexpr, BN: gl.constexpr):
    """A gate/up tile's SiLU(gate) · up, each rounded as the unfused ops round (a thread holds both of a pair), stored
    at offs' gate columns."""
    gate, up = gl.split(acc.reshape([64, BN, 2]))
    where, _ = gl.split(offs.reshape([64, BN, 2]))
    g = gate.to(gl.bfloat16).to(gl.float32)
    silu = (g * (1.0 / (1.0 + gl.exp(-g)))).to(gl.bfloat16)
    y = (silu.to(gl.float32) * up.to(gl.bfloat16).to(gl.float32)).to(gl.bfloat16)
    gl.store(out_ptr + where, y, mask=where < M * N)    # row < M


@gluon.jit
def _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, acc, W: gl.constexpr, PER: gl.constexpr,
              SLOTS: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr):
    """acc += x · Wᵀ over one tile's SLOTS weight slots (PER k-tiles each), weight slots from i and x k-tiles from j;
    every slot released once its MMA is done. Counters from the tile's start (i + kk, j + kk·PER + u) rather than
    stepped: 1 % faster, the same sums. The MMA's operand type (BF16 or e4m3) is the rings'."""
    for kk in range(SLOTS):
        si = i + kk
        s = si % STAGES
        mbarrier.wait(full.index(s), (si // STAGES) & 1)
        for u in gl.static_range(PER):
            xj = j + kk * PER + u
            xsl = xj % XSTAGES
            mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
            acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            # the MMA before this one is done: its x slot is free, and its weight slot if it was that slot's last
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return acc


@gluon.jit
def _product(xs, xfull, xempty, ring, full, empty, i, j, pid, out_ptr, res_ptr, sq_out, ready, fac, M,
             N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
             XSTAGES: gl.constexpr, G: gl.constexpr, PAIR: gl.constexpr, NORM: gl.constexpr, ADD: gl.constexpr,
             SQ: gl.constexpr, WAIT: gl.constexpr):
    """out[:M, N] = epilogue(x · Wᵀ) over this program's tiles. ADD: + res (rounded like the unfused add); NORM:
    the rows' factors of the folded RMSNorm (fac, in shared memory); PAIR: SiLU(gate)·up from the tile's paired
    gate and up columns; SQ: each tile also writes its rows' sums of squares of what it stored to sq_out. WAIT:
    the epilogue reads what other programs wrote (res, fac): it waits for the signal warp's `ready` first.
    i, j: the rings' counters (weight slots, x k-tiles), returned advanced past this product."""
    W: gl.constexpr = 2 * BN if PAIR else BN       # accumulator columns: a gate/up tile's are paired
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, W, 16])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, W, layout=gl.SliceLayout(0, mma))
    col = c // 2 if PAIR else c                     # each accumulator column's output column within the tile
    rows = (r < M)[:, None] & (c < W)[None, :]
    PER: gl.constexpr = 32 // W                     # k-tiles per weight slot (`_weights`)
    SLOTS: gl.constexpr = K // BK // PER
    for tile in range(pid, N // BN, G):
        offs = r[:, None] * N + (tile * BN + col)[None, :]
        if ADD:     # the kernel before, or other SMs, stored it (L2); loaded now, its round trip runs under the MMAs
            res = gl.load(res_ptr + offs, mask=rows, other=0.0, cache_modifier=".cg")
        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), W, PER,
                        SLOTS, STAGES, XSTAGES)
        i += SLOTS
        j += SLOTS * PER
        if WAIT:
            mbarrier.wait(ready, 0)
        if NORM:
            acc = acc * fac.load(gl.SliceLayout(1, mma))[:, None]
        if PAIR:
            _silu_up_store(acc, offs, out_ptr, M, N, BN)
        else:
            y = acc.to(gl.bfloat16)
            if ADD:     # residual + x·Wᵀ, the product rounded first
                y = (y.to(gl.float32) + res.to(gl.float32)).to(gl.bfloat16)
            gl.store(out_ptr + offs, y, mask=rows)
            if SQ:      # the next product's norm: this tile's share of each row's sum of squares
                yf = y.to(gl.float32)
                gl.store(sq_out + tile * ROWS + r, gl.sum(yf * yf, axis=1), mask=r < ROWS)
    return i, j


@gluon.jit
def _done(counter, i):
    """This program's part of a product is stored: count it (release)."""
    gl.thread_barrier()                     # every thread's stores are issued before the release
    _asm_zero(i, "fence.proxy.async.global;")
    gl.atomic_add(counter, 1, sem="release", scope="gpu")


@gluon.jit
def consumer(xs, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x,
             counter, err, M, pid, H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr,
             BN_GU: gl.constexpr, BN_D: gl.constexpr, BN_Q: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
             XSTAGES: gl.constexpr, G: gl.constexpr, NEXT: gl.constexpr):
    i = pid * 0
    j = pid * 0
    _wait_kernel_before(i)                  # the residual is the kernel before's (or an earlier one's) output
    _asm_zero(i, "griddepcontrol.launch_dependents;")  # the kernel after may launch (it waits for this one)
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, h_out, a_res, sq_h, ready.index(0), fac_h, M,
                    H, H, BN_O, BK, STAGES, XSTAGES, G, False, False, True, True, False)
    _done(counter, i)
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, g_out, g_out, sq_h, ready.index(1), fac_h, M,
                    I, H, BN_GU, BK, STAGES, XSTAGES, G, True, True, False, False, True)
    _done(counter + 1, i)
    _wait_counter(counter + 1, err, G)      # the down epilogue reads other programs' o output with plain loads
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, x_out, h_out, sq_x, ready.index(2), fac_x, M,
                    H, I, BN_D, BK, STAGES, XSTAGES, G, False, False, True, NEXT, True)
    _done(counter + 2, i)
    if NEXT:
        i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, q_out, q_out, sq_x, ready.index(3), fac_x,
                        M, Q, H, BN_Q, BK, STAGES, XSTAGES, G, False, True, False, False, True)
        _done(counter + 3, i)


@gluon.jit
def _start(full, empty, xfull, xempty, ready, fac_h, fac_x, STAGES: gl.constexpr, XSTAGES: gl.constexpr):
    """Every ring barrier and the four `ready` barriers initialised (one arrival each), the norm factors zero."""
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for s in gl.static_range(XSTAGES):
        mbarrier.init(xfull.index(s), count=1)
        mbarrier.init(xempty.index(s), count=1)
    for s in gl.static_range(4):
        mbarrier.init(ready.index(s), count=1)
    flat: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    fac_h.store(gl.zeros([64], gl.float32, flat))
    fac_x.store(gl.zeros([64], gl.float32, flat))


@gluon.jit
def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, err, M, eps,
                H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr, BN_GU: gl.constexpr,
                BN_D: gl.constexpr, BN_Q: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
                XSTAGES: gl.constexpr, G: gl.constexpr, NEXT: gl.constexpr, EARLY: gl.constexpr = True):
    """Grid (G,): G programs, one per SM. wo/wgu/wd/wq: TMA descriptors of the weights (blocks [BN_*, BK]; wgu
    [2·BN_GU, BK] over the [2I, H] gate/up matrix with its rows paired); xa/xh/xg/xn: TMA descriptors (blocks
    [32, BK]) of the attention output, the o output, the SiLU·up output and the down output; a_res: the residual
    the o product adds; h_out [M, H], g_out [M, I], x_out [M, H], q_out [M, Q]: the outputs; sq_h [H / BN_O, 32],
    sq_x [H / BN_D, 32] FP32: workspaces for the rows' sums of squares of h_out and x_out (the norms before gate/up
    and q/k/v); counter: five int32 words (one per product, then the programs that have left; zero at launch),
    err: an int32 word that counts spins that gave up. NEXT: the next layer's q/k/v product runs too. EARLY: the
    weight warp starts before the kernel before has finished."""
    pid = gl.program_id(0)
    ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 32, BK], gl.NVMMASharedLayout.get_default_for([32, BK],
                                                                                                       gl.bfloat16))
    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 64, BK],
                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16))
    fac: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, [0])
    fac_h = gl.allocate_shared_memory(gl.float32, [64], fac)    # the norm factors of gate/up's and q/k/v's rows;
    fac_x = gl.allocate_shared_memory(gl.float32, [64], fac)    # rows 32-63 (the MMA's padding) stay zero
    ready = gl.allocate_shared_memory(gl.int64, [4, 1], mbarrier.MBarrierLayout())
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xfull = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    xempty = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    _start(full, empty, xfull, xempty, ready, fac_h, fac_x, STAGES, XSTAGES)
    zero: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    for s in gl.static_range(XSTAGES):      # rows 32-63 stay zero: TMA fills rows 0-31 only
        xs.index(s).store(gl.zeros([64, BK], gl.bfloat16, zero))
    fence_async_shared()
    gl.warp_specialize([
        (consumer, (xs, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, a_res, h_out, g_out, x_out, q_out, sq_h,
                    sq_x, counter, err, M, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, XSTAGES, G, NEXT)),
        (weight_warp, (wo, wgu, wd, wq, ring, full, empty, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, G,
                       NEXT, EARLY)),
        (activation_warp, (xa, xh, xg, xn, xs, xfull, xempty, counter, err, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q,
                           BK, XSTAGES, G, NEXT)),
        (signal_warp, (counter, err, sq_h, sq_x, ready, fac_h, fac_x, M, eps, H, BN_O, BN_D, G, NEXT)),
    ], [1, 1, 1], [40, 40, 80])
    # every warp of this program is past its last wait: count that, and the last program to leave resets the
    # counters for the next launch (no program can still be waiting on one then)
    old = gl.atomic_add(counter + 4, 1, sem="acq_rel", scope="gpu")
    if old == G - 1:
        for p in gl.static_range(5):
            gl.atomic_xchg(counter + p, 0, sem="relaxed", scope="gpu")
