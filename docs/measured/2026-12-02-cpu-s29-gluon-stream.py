"""A probe written on a CPU box (compiled for sm_90 with the GPU image's Triton 3.6, `--compile-only`) for the next
H200 run. Can a persistent kernel whose weights are streamed by a warp of their own, through a ring of TMA copies that
never waits for the grid barriers, keep the AR layers' products near the copy rate? (docs/ar-engine.md, "What the
compiler can do for a persistent kernel": the Triton-built persistent kernels of 2026-12-01 and 2026-12-02 lost 1.3×
and 5× against separate launches, because Triton's pipeliner cannot keep weight copies in flight across a barrier
while the activations wait for it. Gluon lets that be written out: here a producer warp and a consumer warpgroup.)

The chain: the four products of the 28 yue2-3b layers at 32 rows, each one's input the output of the one before (the
decode step's dependencies; attention, norms and epilogues left out: this measures streaming only), BF16 with FP32
accumulation. One program per SM (132). Every product is cut into tiles of BN weight rows over the whole of K, dealt
round robin to the programs (no sums cross programs).
- the *producer* (one warp) walks every tile's k-tiles of all 112 products in order and copies each [BN, BK] weight
  tile with TMA into a ring of STAGES slots, waiting only for a free slot — never for a barrier, so while the grid
  waits between two products the next product's weights are already on their way;
- the *consumer* (one warpgroup) waits at each product's barrier until every program has finished the product before
  (one counter, an acquire poll), then for each tile runs acc[64, BN] += x[64, BK] · w[BN, BK]ᵀ with wgmma — x's 32
  rows (rows 32–63 of the MMA's A are zero) copied from global memory with cp.async, XSTAGES deep, since they exist
  only once the barrier has passed — stores its tile and, after a CTA barrier, adds one to the counter with release
  semantics.

Baseline in the same run: the same chain as separate launches of the engine's skinny-GEMM kernel with the engine's
tiles (docs/ar-engine.md; ~40 µs per layer with the epilogues) replayed in a CUDA graph. Correctness: every product
of the chain against an FP32 product of the kernel's own input. GPU machine, repository root:
`python docs/measured/2026-12-02-cpu-s29-gluon-stream.py` (random weights, ~3 GB).
"""
import sys

import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

M, H, I, L = 32, 2048, 6144, 28
GEMMS = ((4096, H), (H, H), (2 * I, H), (H, I))     # (weight rows, depth) of q/k/v, o, gate/up, down
PROGRAMS = 132
LIMIT = 1 << 22                                     # polls before a spin gives up and counts an error


@gluon.jit
def _produce(desc, ring, full, empty, i, row0, pid, N: gl.constexpr, K: gl.constexpr, BN: gl.constexpr,
             BK: gl.constexpr, STAGES: gl.constexpr, G: gl.constexpr):
    for tile in range(pid, N // BN, G):
        for k in range(K // BK):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(s), BN * BK * 2)
            tma.async_copy_global_to_shared(desc, [row0 + tile * BN, k * BK], full.index(s), ring.index(s))
            i += 1
    return i


@gluon.jit
def producer(wq, wo, wgu, wd, ring, full, empty, layers, pid, BN: gl.constexpr, BK: gl.constexpr,
             STAGES: gl.constexpr, G: gl.constexpr):
    i = pid * 0
    for layer in range(layers):
        i = _produce(wq, ring, full, empty, i, layer * 4096, pid, 4096, 2048, BN, BK, STAGES, G)
        i = _produce(wo, ring, full, empty, i, layer * 2048, pid, 2048, 2048, BN, BK, STAGES, G)
        i = _produce(wgu, ring, full, empty, i, layer * 12288, pid, 12288, 2048, BN, BK, STAGES, G)
        i = _produce(wd, ring, full, empty, i, layer * 2048, pid, 2048, 6144, BN, BK, STAGES, G)


@gluon.jit
def _wait_grid(counter, err, target, WAIT: gl.constexpr):
    if WAIT:
        n = 0
        seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
        while (seen < target) & (n < 4194304):
            seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
            n += 1
        if seen < target:
            gl.atomic_add(err, 1)


@gluon.jit
def _consume(x_ptr, out_ptr, ring, full, empty, xs, i, counter, err, target, pid, N: gl.constexpr, K: gl.constexpr,
             XK: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr,
             G: gl.constexpr, WAIT: gl.constexpr, DEPTH: gl.constexpr, MODE: gl.constexpr):
    x_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    KT: gl.constexpr = K // BK
    # x k-tiles in flight: a buffer is refilled only once the MMA that read it is known to be done
    AHEAD: gl.constexpr = XSTAGES - 1 - DEPTH
    rows = gl.arange(0, 64, layout=gl.SliceLayout(1, x_layout))
    cols = gl.arange(0, BK, layout=gl.SliceLayout(0, x_layout))
    x_offs = rows[:, None] * XK + cols[None, :]
    x_rows = (rows < 32)[:, None] & (cols < BK)[None, :]
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    o_offs = r[:, None] * N + c[None, :]
    o_rows = (r < 32)[:, None] & (c < BN)[None, :]

    _wait_grid(counter, err, target, WAIT)
    for tile in range(pid, N // BN, G):
        if MODE == 0:
            for d in gl.static_range(AHEAD):
                async_copy.async_copy_global_to_shared(xs.index(d), x_ptr + x_offs + d * BK, mask=x_rows)
                async_copy.commit_group()
        acc = gl.zeros([64, BN], gl.float32, mma)
        for k in range(KT):
            if MODE == 0:
                kn = k + AHEAD
                async_copy.async_copy_global_to_shared(xs.index(kn % XSTAGES), x_ptr + x_offs + kn * BK,
                                                       mask=x_rows & (kn < KT))
                async_copy.commit_group()
                async_copy.wait_group(AHEAD)    # this thread's part of x k-tile k has landed
                gl.thread_barrier()             # and every thread's
                fence_async_shared()
            s = i % STAGES
            mbarrier.wait(full.index(s), (i // STAGES) & 1)
            if MODE < 2:
                acc = warpgroup_mma(xs.index(k % XSTAGES), ring.index(s).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=DEPTH, deps=(acc, ))
                # the MMA of k - DEPTH is done: its weight slot is free
                mbarrier.arrive(empty.index((i + STAGES - DEPTH) % STAGES), pred=k >= DEPTH)
            else:
                mbarrier.arrive(empty.index(s))
            i += 1
        if MODE < 2:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            for j in gl.static_range(DEPTH):
                mbarrier.arrive(empty.index((i + STAGES - DEPTH + j) % STAGES))
        if MODE == 0:
            async_copy.wait_group(0)
        gl.store(out_ptr + o_offs + tile * BN, acc.to(gl.bfloat16), mask=o_rows)
    gl.thread_barrier()                     # every thread's stores are issued before the release below
    gl.atomic_add(counter, 1, sem="release", scope="gpu")
    return i


@gluon.jit
def consumer(o0, o1, o2, o3, ring, full, empty, xs, counter, err, layers, pid, BN: gl.constexpr, BK: gl.constexpr,
             STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, WAIT: gl.constexpr, DEPTH: gl.constexpr,
             MODE: gl.constexpr):
    i = pid * 0
    for layer in range(layers):
        q = layer * 4
        # o3 holds layers + 1 blocks: block 0 is the chain's input, block l + 1 layer l's down output
        i = _consume(o3 + layer * (32 * 2048), o0 + layer * (32 * 4096), ring, full, empty, xs, i, counter, err,
                     q * G, pid, 4096, 2048, 2048, BN, BK, STAGES, XSTAGES, G, WAIT & (layer > 0), DEPTH, MODE)
        i = _consume(o0 + layer * (32 * 4096), o1 + layer * (32 * 2048), ring, full, empty, xs, i, counter, err,
                     (q + 1) * G, pid, 2048, 2048, 4096, BN, BK, STAGES, XSTAGES, G, WAIT, DEPTH, MODE)
        i = _consume(o1 + layer * (32 * 2048), o2 + layer * (32 * 12288), ring, full, empty, xs, i, counter, err,
                     (q + 2) * G, pid, 12288, 2048, 2048, BN, BK, STAGES, XSTAGES, G, WAIT, DEPTH, MODE)
        i = _consume(o2 + layer * (32 * 12288), o3 + (layer + 1) * (32 * 2048), ring, full, empty, xs, i, counter,
                     err, (q + 3) * G, pid, 2048, 6144, 12288, BN, BK, STAGES, XSTAGES, G, WAIT, DEPTH, MODE)


@gluon.jit
def chain(wq, wo, wgu, wd, o0, o1, o2, o3, counter, err, layers, BN: gl.constexpr, BK: gl.constexpr,
          STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, WAIT: gl.constexpr, DEPTH: gl.constexpr,
          MODE: gl.constexpr):
    pid = gl.program_id(0)
    ring = gl.allocate_shared_memory(wq.dtype, [STAGES, BN, BK], wq.layout)
    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 64, BK],
                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    zero_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    for d in gl.static_range(XSTAGES):      # the MMA's rows 32-63 stay zero: only rows 0-31 are ever copied
        xs.index(d).store(gl.zeros([64, BK], gl.bfloat16, zero_layout))
    fence_async_shared()
    gl.warp_specialize([
        (consumer, (o0, o1, o2, o3, ring, full, empty, xs, counter, err, layers, pid, BN, BK, STAGES, XSTAGES, G,
                    WAIT, DEPTH, MODE)),
        (producer, (wq, wo, wgu, wd, ring, full, empty, layers, pid, BN, BK, STAGES, G)),
    ], [1], [40])


# ---- variant 2: the activations too come by TMA, from a warp of their own ---------------------------------------
# The sweep of variant 1 (docs/measured/2026-12-02-h200-s29-gluon-stream-sweep.log) showed the weight stream alone at
# 28.8 µs per layer (3.5 TB/s, barriers included), the MMAs adding ~2 µs and the consumer's own x copies ~12: so here
# a second worker warp waits at the barriers and copies x k-tiles into a ring of their own, and the consumer only
# waits for its operands, multiplies and releases.


@gluon.jit
def _proxy_fence(v):
    """Orders this thread's generic-proxy view of global memory before its later TMA reads (the x a TMA copies was
    written by other SMs' plain stores). v only gives the asm a shape."""
    return gl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r,r", [v], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _load_x(desc, xs, xfull, xempty, j, row0, counter, err, target, pid, N: gl.constexpr, K: gl.constexpr,
            BN: gl.constexpr, BK: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, WAIT: gl.constexpr):
    if WAIT:
        n = 0
        seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
        while (seen < target) & (n < 4194304):
            seen = gl.atomic_add(counter, 0, sem="acquire", scope="gpu")
            n += 1
        if seen < target:
            gl.atomic_add(err, 1)
        _proxy_fence(seen)
    for tile in range(pid, N // BN, G):
        for k in range(K // BK):
            s = j % XSTAGES
            mbarrier.wait(xempty.index(s), ((j // XSTAGES) & 1) ^ 1)
            mbarrier.expect(xfull.index(s), 32 * BK * 2)
            tma.async_copy_global_to_shared(desc, [row0, k * BK], xfull.index(s), xs.index(s).slice(0, 32))
            j += 1
    return j


@gluon.jit
def x_loader(x0, x1, x2, x3, xs, xfull, xempty, counter, err, layers, pid, BN: gl.constexpr, BK: gl.constexpr,
             XSTAGES: gl.constexpr, G: gl.constexpr, WAIT: gl.constexpr):
    j = pid * 0
    for layer in range(layers):
        q = layer * 4
        # x3 is the down outputs' buffer: block 0 the chain's input, block l + 1 layer l's output
        j = _load_x(x3, xs, xfull, xempty, j, layer * 32, counter, err, q * G, pid, 4096, 2048, BN, BK, XSTAGES,
                    G, WAIT & (layer > 0))
        j = _load_x(x0, xs, xfull, xempty, j, layer * 32, counter, err, (q + 1) * G, pid, 2048, 2048, BN, BK,
                    XSTAGES, G, WAIT)
        j = _load_x(x1, xs, xfull, xempty, j, layer * 32, counter, err, (q + 2) * G, pid, 12288, 2048, BN, BK,
                    XSTAGES, G, WAIT)
        j = _load_x(x2, xs, xfull, xempty, j, layer * 32, counter, err, (q + 3) * G, pid, 2048, 6144, BN, BK,
                    XSTAGES, G, WAIT)


@gluon.jit
def _multiply(out_ptr, ring, full, empty, xs, xfull, xempty, i, counter, pid, N: gl.constexpr, K: gl.constexpr,
              BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr,
              DEPTH: gl.constexpr):
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, BN, 16])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, BN, layout=gl.SliceLayout(0, mma))
    o_offs = r[:, None] * N + c[None, :]
    o_rows = (r < 32)[:, None] & (c < BN)[None, :]
    for tile in range(pid, N // BN, G):
        acc = gl.zeros([64, BN], gl.float32, mma)
        for k in range(K // BK):
            s = i % STAGES      # the weight ring and the x ring advance together: i counts both
            xsl = i % XSTAGES
            mbarrier.wait(xfull.index(xsl), (i // XSTAGES) & 1)
            mbarrier.wait(full.index(s), (i // STAGES) & 1)
            acc = warpgroup_mma(xs.index(xsl), ring.index(s).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=DEPTH, deps=(acc, ))
            mbarrier.arrive(empty.index((i + STAGES - DEPTH) % STAGES), pred=k >= DEPTH)
            mbarrier.arrive(xempty.index((i + XSTAGES - DEPTH) % XSTAGES), pred=k >= DEPTH)
            i += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        for d in gl.static_range(DEPTH):
            mbarrier.arrive(empty.index((i + STAGES - DEPTH + d) % STAGES))
            mbarrier.arrive(xempty.index((i + XSTAGES - DEPTH + d) % XSTAGES))
        gl.store(out_ptr + o_offs + tile * BN, acc.to(gl.bfloat16), mask=o_rows)
    gl.thread_barrier()                     # every thread's stores are issued before the release below
    _proxy_fence(i)
    gl.atomic_add(counter, 1, sem="release", scope="gpu")
    return i


@gluon.jit
def multiplier(o0, o1, o2, o3, ring, full, empty, xs, xfull, xempty, counter, layers, pid, BN: gl.constexpr,
               BK: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, DEPTH: gl.constexpr):
    i = pid * 0
    for layer in range(layers):
        i = _multiply(o0 + layer * (32 * 4096), ring, full, empty, xs, xfull, xempty, i, counter, pid, 4096, 2048,
                      BN, BK, STAGES, XSTAGES, G, DEPTH)
        i = _multiply(o1 + layer * (32 * 2048), ring, full, empty, xs, xfull, xempty, i, counter, pid, 2048, 2048,
                      BN, BK, STAGES, XSTAGES, G, DEPTH)
        i = _multiply(o2 + layer * (32 * 12288), ring, full, empty, xs, xfull, xempty, i, counter, pid, 12288, 2048,
                      BN, BK, STAGES, XSTAGES, G, DEPTH)
        i = _multiply(o3 + (layer + 1) * (32 * 2048), ring, full, empty, xs, xfull, xempty, i, counter, pid, 2048,
                      6144, BN, BK, STAGES, XSTAGES, G, DEPTH)


@gluon.jit
def chain2(wq, wo, wgu, wd, x0, x1, x2, x3, o0, o1, o2, o3, counter, err, layers, BN: gl.constexpr,
           BK: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, WAIT: gl.constexpr,
           DEPTH: gl.constexpr):
    pid = gl.program_id(0)
    ring = gl.allocate_shared_memory(wq.dtype, [STAGES, BN, BK], wq.layout)
    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 64, BK],
                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16))
    full = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    xfull = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    xempty = gl.allocate_shared_memory(gl.int64, [XSTAGES, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(STAGES):
        mbarrier.init(full.index(s), count=1)
        mbarrier.init(empty.index(s), count=1)
    for s in gl.static_range(XSTAGES):
        mbarrier.init(xfull.index(s), count=1)
        mbarrier.init(xempty.index(s), count=1)
    zero_layout: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    for d in gl.static_range(XSTAGES):      # the MMA's rows 32-63 stay zero: TMA fills rows 0-31 only
        xs.index(d).store(gl.zeros([64, BK], gl.bfloat16, zero_layout))
    fence_async_shared()
    gl.warp_specialize([
        (multiplier, (o0, o1, o2, o3, ring, full, empty, xs, xfull, xempty, counter, layers, pid, BN, BK, STAGES,
                      XSTAGES, G, DEPTH)),
        (producer, (wq, wo, wgu, wd, ring, full, empty, layers, pid, BN, BK, STAGES, G)),
        (x_loader, (x0, x1, x2, x3, xs, xfull, xempty, counter, err, layers, pid, BN, BK, XSTAGES, G, WAIT)),
    ], [1, 1], [40, 40])


def compile_only2(bn=32, bk=128, stages=16, xstages=4, depth=1) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    w = f"tensordesc<bf16[{bn}, {bk}],{gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)!r}>"
    x = f"tensordesc<bf16[32, {bk}],{gl.NVMMASharedLayout.get_default_for([32, bk], gl.bfloat16)!r}>"
    sig = {"wq": w, "wo": w, "wgu": w, "wd": w, "x0": x, "x1": x, "x2": x, "x3": x, "o0": "*bf16", "o1": "*bf16",
           "o2": "*bf16", "o3": "*bf16", "counter": "*i32", "err": "*i32", "layers": "i32"}
    const = {"BN": bn, "BK": bk, "STAGES": stages, "XSTAGES": xstages, "G": PROGRAMS, "WAIT": True, "DEPTH": depth}
    sig.update({k: "constexpr" for k in const})
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(8, 14)}
    k = triton.compile(GluonASTSource(chain2, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "maxnreg": 128})
    ptx = k.asm["ptx"]
    print(f"variant 2, triton {triton.__version__}, BN {bn} BK {bk} stages {stages} x-stages {xstages} depth {depth}: "
          f"shared memory {k.metadata.shared // 1024} KB; wgmma {ptx.count('wgmma.mma_async')}, TMA loads "
          f"{ptx.count('cp.async.bulk.tensor')}, proxy fences {ptx.count('fence.proxy.async.global')}")


def compile_only(bn=32, bk=128, stages=12, xstages=4, depth=1, mode=0) -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    layout = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
    desc = f"tensordesc<bf16[{bn}, {bk}],{layout!r}>"
    sig = {"wq": desc, "wo": desc, "wgu": desc, "wd": desc, "o0": "*bf16", "o1": "*bf16", "o2": "*bf16",
           "o3": "*bf16", "counter": "*i32", "err": "*i32", "layers": "i32", "BN": "constexpr", "BK": "constexpr",
           "STAGES": "constexpr", "XSTAGES": "constexpr", "G": "constexpr", "WAIT": "constexpr", "DEPTH": "constexpr", "MODE": "constexpr"}
    const = {"BN": bn, "BK": bk, "STAGES": stages, "XSTAGES": xstages, "G": PROGRAMS, "WAIT": True, "DEPTH": depth,
             "MODE": mode}
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(4, 10)}
    k = triton.compile(GluonASTSource(chain, sig, const, attrs), target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "maxnreg": 128})
    ptx = k.asm["ptx"]
    print(f"triton {triton.__version__}, BN {bn} BK {bk} stages {stages} x-stages {xstages} depth {depth} mode "
          f"{mode}: shared memory "
          f"{k.metadata.shared // 1024} KB; wgmma {ptx.count('wgmma.mma_async')}, TMA loads "
          f"{ptx.count('cp.async.bulk.tensor')}, cp.async {ptx.count('cp.async.ca') + ptx.count('cp.async.cg')}, "
          f"atom {ptx.count('atom.')}")


def run() -> None:
    import torch
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from farm.bench.ar import _time_graph        # seconds per call of fn replayed as one CUDA graph
    from stages import skinny_gemm

    torch.manual_seed(0)
    dev = "cuda"
    ws = [torch.randn(L * n, k, dtype=torch.bfloat16, device=dev) * k ** -0.5 for n, k in GEMMS]
    outs = [torch.zeros((L + (g == 3)) * M * n, dtype=torch.bfloat16, device=dev) for g, (n, _) in enumerate(GEMMS)]
    outs[3][:M * H] = torch.randn(M * H, dtype=torch.bfloat16, device=dev)
    counter = torch.zeros(1, dtype=torch.int32, device=dev)
    err = torch.zeros(1, dtype=torch.int32, device=dev)
    nbytes = sum(w.numel() * 2 for w in ws) / L

    engine_tiles = (skinny_gemm.Tiling(32, 256, 1, 4, 5), skinny_gemm.Tiling(16, 256, 1, 4, 5),
                    skinny_gemm.Tiling(64, 128, 1, 4, 5), skinny_gemm.Tiling(64, 128, 4, 4, 5))
    per_layer = [w.view(L, n, k) for w, (n, k) in zip(ws, GEMMS)]
    x0 = outs[3][:M * H].view(M, H)

    def separate():
        x = x0
        for layer in range(L):
            for g in range(4):
                x = skinny_gemm._launch(x[:, :GEMMS[g][1]], per_layer[g][layer], "none", None, t=engine_tiles[g])

    t = _time_graph(separate) * 1e6 / L
    print(f"separate launches, engine tiles: {t:.2f} µs per layer ({nbytes / t / 1e6:.2f} TB/s)", flush=True)

    def check() -> str:
        worst = 0.0
        xin = [lambda l: outs[3].view(L + 1, M, H)[l], lambda l: outs[0].view(L, M, 4096)[l, :, :H],
               lambda l: outs[1].view(L, M, H)[l], lambda l: outs[2].view(L, M, 2 * I)[l, :, :I]]
        got = [lambda l: outs[0].view(L, M, 4096)[l], lambda l: outs[1].view(L, M, H)[l],
               lambda l: outs[2].view(L, M, 2 * I)[l], lambda l: outs[3].view(L + 1, M, H)[l + 1]]
        for layer in range(L):
            for g in range(4):
                want = xin[g](layer).float() @ per_layer[g][layer].float().T
                rel = ((got[g](layer).float() - want).abs().max() / want.abs().max()).item()
                worst = max(worst, rel)
        return f"worst max-abs error / max-abs value over the 112 products {worst:.2e}"

    if "--v2-only" not in sys.argv:
        variant1(ws, outs, counter, err, nbytes, check, _time_graph, TensorDescriptor)
    x_descs = {}
    for bn, bk, stages, xstages, depth in CONFIGS2:
        layout = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
        descs = [TensorDescriptor.from_tensor(w, [bn, bk], layout) for w in ws]
        if bk not in x_descs:
            x_layout = gl.NVMMASharedLayout.get_default_for([32, bk], gl.bfloat16)
            x_descs[bk] = [TensorDescriptor.from_tensor(o.view(-1, n), [32, bk], x_layout)
                           for o, (n, _) in zip(outs, GEMMS)]
        name = f"BN {bn} BK {bk} stages {stages} x-stages {xstages} depth {depth}"

        def persistent2(wait=True):
            counter.zero_()
            chain2[(PROGRAMS,)](*descs, *x_descs[bk], *outs, counter, err, L, BN=bn, BK=bk, STAGES=stages,
                                XSTAGES=xstages, G=PROGRAMS, WAIT=wait, DEPTH=depth, num_warps=4, maxnreg=128)

        try:
            for o in outs[:3]:
                o.zero_()
            outs[3][M * H:].zero_()
            persistent2()
            torch.cuda.synchronize()
            ok = check()
            t = _time_graph(persistent2) * 1e6 / L
            t_free = _time_graph(lambda: persistent2(False)) * 1e6 / L
            print(f"variant 2 (x by TMA) {name}: {t:.2f} µs per layer ({nbytes / t / 1e6:.2f} TB/s; counter zeroing "
                  f"included); without the waits {t_free:.2f}; {ok}; spin errors {int(err.item())}", flush=True)
        except Exception as e:
            print(f"variant 2 {name}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


def variant1(ws, outs, counter, err, nbytes, check, _time_graph, TensorDescriptor) -> None:
    import torch

    # (BN, BK, weight stages, x stages, MMAs in flight, mode); mode 1 leaves the x copies out and mode 2 the MMAs too
    # (timing only: they show what the consumer's x copies and MMAs cost on top of the weight stream)
    for bn, bk, stages, xstages, depth, mode in CONFIGS:
        layout = gl.NVMMASharedLayout.get_default_for([bn, bk], gl.bfloat16)
        descs = [TensorDescriptor.from_tensor(w, [bn, bk], layout) for w in ws]
        name = f"BN {bn} BK {bk} stages {stages} x-stages {xstages} depth {depth} mode {mode}"

        def persistent(wait=True):
            counter.zero_()
            chain[(PROGRAMS,)](*descs, *outs, counter, err, L, BN=bn, BK=bk, STAGES=stages, XSTAGES=xstages,
                               G=PROGRAMS, WAIT=wait, DEPTH=depth, MODE=mode, num_warps=4, maxnreg=128)

        try:
            for o in outs[:3]:
                o.zero_()
            outs[3][M * H:].zero_()
            persistent()
            torch.cuda.synchronize()
            ok = check() if mode == 0 else "timing only"
            t = _time_graph(persistent) * 1e6 / L
            t_free = _time_graph(lambda: persistent(False)) * 1e6 / L
            print(f"gluon stream {name}: {t:.2f} µs per layer ({nbytes / t / 1e6:.2f} TB/s; counter zeroing "
                  f"included); without the waits {t_free:.2f}; {ok}; spin errors {int(err.item())}", flush=True)
        except Exception as e:            # a probe: report and go on to the next tile set
            print(f"gluon stream {name}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


CONFIGS = ((64, 128, 8, 4, 1, 0), (64, 128, 8, 4, 1, 1), (64, 128, 8, 4, 1, 2), (32, 128, 12, 4, 1, 0),
           (32, 128, 12, 4, 1, 1), (32, 128, 12, 4, 1, 2), (32, 128, 16, 4, 1, 2), (32, 256, 8, 3, 1, 2),
           (32, 128, 12, 5, 2, 0), (64, 128, 8, 5, 2, 0), (64, 64, 16, 6, 2, 0), (32, 128, 16, 4, 1, 0))
# (BN, BK, weight stages, x stages, MMAs in flight) of variant 2
CONFIGS2 = ((32, 128, 16, 4, 1), (32, 128, 16, 6, 1), (32, 128, 14, 6, 2), (64, 128, 10, 4, 1), (32, 128, 12, 8, 1),
            (16, 128, 24, 6, 1), (32, 64, 28, 8, 1))


if __name__ == "__main__":
    sys.path.insert(0, ".")
    if "--compile-only" in sys.argv:
        for config in CONFIGS:
            compile_only(*config)
        for config in CONFIGS2:
            compile_only2(*config)
    else:
        run()
