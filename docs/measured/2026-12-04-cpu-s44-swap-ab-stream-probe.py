"""Would a layer chain that puts the weights in the MMA's M stream faster? (2026-12-04, session s44; written on the
CPU box, compiled there for sm_90 with Triton 3.6.)
Why: the chain's consumer warpgroup sets its pace (`…-s38-tma-stream.log`: the weight walk alone streams 22 µs a
layer, the chain takes ~36). Today a k-tile is acc[64, 16] += x[64, 128] · w[16, 128]ᵀ: the activations are the
MMA's A (M = 64: 32 slot rows and 32 rows of zeros), the weights its 16-wide N, so every 4 KB of weights costs one
handshake with each ring and one group of 8 MMA instructions, and each 16 KB activation slot carries 8 KB of zeros.
With the operands swapped, acc[64, R] += w[64, 128] · x[R, 128]ᵀ (R = 32 slot rows, or 8), a k-tile moves 16 KB of
weights per handshake, the activation slot has no padding (8 or 2 KB), and each weight value meets R rows instead
of 64. The price, in a real chain, is that o and down (2,048 outputs) have only 32 tiles of 64 rows: they would need
K split over programs and a fixed-order sum of the parts (not built; this probe does not pay it).
The kernel: one program per SM, a weight warp and an activation warp copying with TMA into two rings (the chain's
handshakes: full/empty barriers per slot, the consumer freeing a slot once the MMA after it is issued and the MMA
before it done), the consumer warpgroup multiplying and storing each tile's BF16 result. It walks a 2.82 GB BF16
matrix (the 28 layers' chain weights, K = 2,048) in the chain's order — each program whole tiles round robin,
walking K — in one launch, so no grid barrier and no other product: only the consumer's pace against the stream.
Settings, all at 144 KB of rings (what fits beside the split-attention kernel):
- today's shape: 16-row tiles, two k-tiles per 32-row slot, 8 weight and 5 activation slots of 64 rows (m64n16);
- 32-row tiles (gate/up's and q/k/v's shape), 8 and 5 slots (m64n32);
- swapped, 64-row tiles, 32 activation rows: 7 weight slots of 16 KB and 4 activation slots of 8 KB (m64n32);
- swapped, 64-row tiles, 8 activation rows: 8 and 8 slots (m64n8);
- the weight walk alone for the 16- and 64-row tiles (the consumer only frees slots).
Printed: TB/s of weights, and µs per 100.7 MB (one yue2-3b layer's chain weights), two rounds; the swapped
settings' results checked against torch (FP32 of the same BF16 values) on the first tiles.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s44-swap-ab-stream-probe.py
`--compile-only` (Triton 3.6, any box): compiles every setting for sm_90 and prints its shared memory."""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

COLS, BK = 2048, 128
ROWS = 688_128                 # × 2048 × 2 B = 2.82 GB: 28 × 100.7 MB
LAYER = 100.7e6
# name: (tile rows BR, k-tiles per slot PER, weight slots, activation slots, swapped, activation rows, drain only)
SETTINGS = {
    "today: 16-row tiles, m64n16": (16, 2, 8, 5, False, 32, False),
    "32-row tiles, m64n32": (32, 1, 8, 5, False, 32, False),
    "swapped: 64-row tiles, 32 rows, m64n32": (64, 1, 7, 4, True, 32, False),
    "swapped: 64-row tiles, 8 rows, m64n8": (64, 1, 8, 8, True, 8, False),
    "walk alone, 16-row tiles": (16, 2, 8, 5, False, 32, True),
    "walk alone, 64-row tiles": (64, 1, 8, 8, True, 8, True),
}


@gluon.jit
def _weights(wdesc, ring, full, empty, pid, TILES: gl.constexpr, KT: gl.constexpr, BR: gl.constexpr,
             PER: gl.constexpr, STAGES: gl.constexpr, G: gl.constexpr):
    i = pid * 0
    for t in range(pid, TILES, G):
        for kk in range(KT // PER):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(s), PER * wdesc.block_type.nbytes)
            for u in gl.static_range(PER):
                tma.async_copy_global_to_shared(wdesc, [t * BR, (kk * PER + u) * 128], full.index(s),
                                                ring.index(s).slice(u * BR, BR))
            i += 1


@gluon.jit
def _activations(xdesc, xs, xfull, xempty, pid, TILES: gl.constexpr, KT: gl.constexpr, XR: gl.constexpr,
                 XSTAGES: gl.constexpr, G: gl.constexpr, DRAIN: gl.constexpr):
    if not DRAIN:
        j = pid * 0
        for t in range(pid, TILES, G):
            for k in range(KT):
                s = j % XSTAGES
                mbarrier.wait(xempty.index(s), ((j // XSTAGES) & 1) ^ 1)
                mbarrier.expect(xfull.index(s), xdesc.block_type.nbytes)
                tma.async_copy_global_to_shared(xdesc, [0, k * 128], xfull.index(s), xs.index(s).slice(0, XR))
                j += 1


@gluon.jit
def _consumer(xs, xfull, xempty, ring, full, empty, out, pid, TILES: gl.constexpr, KT: gl.constexpr,
              BR: gl.constexpr, PER: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr,
              SWAP: gl.constexpr, XR: gl.constexpr, DRAIN: gl.constexpr):
    N: gl.constexpr = XR if SWAP else BR
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, N, 16])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, N, layout=gl.SliceLayout(0, mma))
    SLOTS: gl.constexpr = KT // PER
    i = pid * 0
    j = pid * 0
    for t in range(pid, TILES, G):
        if DRAIN:
            for kk in range(SLOTS):
                s = (i + kk) % STAGES
                mbarrier.wait(full.index(s), ((i + kk) // STAGES) & 1)
                mbarrier.arrive(empty.index(s))
            i += SLOTS
        else:
            acc = gl.zeros([64, N], gl.float32, mma)
            for kk in range(SLOTS):
                si = i + kk
                s = si % STAGES
                mbarrier.wait(full.index(s), (si // STAGES) & 1)
                for u in gl.static_range(PER):
                    xj = j + kk * PER + u
                    xsl = xj % XSTAGES
                    mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
                    if SWAP:
                        acc = warpgroup_mma(ring.index(s), xs.index(xsl).permute((1, 0)), acc, is_async=True)
                    else:
                        acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(u * BR, BR).permute((1, 0)), acc,
                                            is_async=True)
                    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                    mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
                    if u == 0:
                        mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
            mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
            mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
            i += SLOTS
            j += SLOTS * PER
            y = acc.to(gl.bfloat16)
            if SWAP:        # [weight rows, activation rows]
                gl.store(out + (t * BR + r)[:, None] * XR + c[None, :], y)
            else:           # [activation rows, weight rows]; MMA rows 32-63 are the padding
                gl.store(out + r[:, None] * (TILES * BR) + (t * BR + c)[None, :], y,
                         mask=(r < XR)[:, None] & (c < N)[None, :])


@gluon.jit
def mma_stream(wdesc, xdesc, out, TILES: gl.constexpr, KT: gl.constexpr, BR: gl.constexpr, PER: gl.constexpr,
               STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, SWAP: gl.constexpr, XR: gl.constexpr,
               DRAIN: gl.constexpr):
    pid = gl.program_id(0)
    ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, BR * PER, 128],
                                     gl.NVMMASharedLayout.get_default_for([BR * PER, 128], gl.bfloat16))
    XROWS: gl.constexpr = XR if SWAP else 64
    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, XROWS, 128],
                                   gl.NVMMASharedLayout.get_default_for([XROWS, 128], gl.bfloat16))
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
    if not SWAP:        # rows 32-63 of each activation slot stay zero, as in the chain
        zero: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
        for s in gl.static_range(XSTAGES):
            xs.index(s).store(gl.zeros([64, 128], gl.bfloat16, zero))
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (xs, xfull, xempty, ring, full, empty, out, pid, TILES, KT, BR, PER, STAGES, XSTAGES, G, SWAP,
                     XR, DRAIN)),
        (_weights, (wdesc, ring, full, empty, pid, TILES, KT, BR, PER, STAGES, G)),
        (_activations, (xdesc, xs, xfull, xempty, pid, TILES, KT, XR, XSTAGES, G, DRAIN)),
    ], [1, 1], [40, 40])


def _const(setting, g):
    br, per, stages, xstages, swap, xr, drain = setting
    return dict(TILES=ROWS // br, KT=COLS // BK, BR=br, PER=per, STAGES=stages, XSTAGES=xstages, G=g, SWAP=swap,
                XR=xr, DRAIN=drain)


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for name, setting in SETTINGS.items():
        br, per, _, _, swap, xr, _ = setting
        const = _const(setting, 132)
        wl = gl.NVMMASharedLayout.get_default_for([br, 128], gl.bfloat16)
        xl = gl.NVMMASharedLayout.get_default_for([xr, 128], gl.bfloat16)
        sig = {"wdesc": f"tensordesc<bf16[{br}, 128],{wl!r}>", "xdesc": f"tensordesc<bf16[{xr}, 128],{xl!r}>",
               "out": "*bf16", **{c: "constexpr" for c in const}}
        k = triton.compile(GluonASTSource(mma_stream, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4})
        ptx = k.asm["ptx"]
        print(f"{name:42} shared {k.metadata.shared // 1024} KB, wgmma {ptx.count('wgmma.mma_async')} "
              f"({'m64n' + str(xr if swap else br)}), TMA {ptx.count('cp.async.bulk.tensor')}", flush=True)


def _seconds(fn, repeats: int = 5) -> float:
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / repeats


def main() -> None:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    torch.manual_seed(0)
    w = torch.randn(ROWS, COLS, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(32, COLS, device="cuda", dtype=torch.bfloat16)
    g = torch.cuda.get_device_properties(0).multi_processor_count
    size = w.numel() * w.element_size()
    print(f"{torch.cuda.get_device_name()}: {size / 1e9:.2f} GB of weights, {g} programs", flush=True)
    for rnd in range(2):
        t = _seconds(lambda: torch.sum(w, dtype=torch.float32))
        print(f"round {rnd} {'torch.sum (read only)':42} {size / t / 1e12:5.2f} TB/s", flush=True)
        for name, setting in SETTINGS.items():
            br, per, _, _, swap, xr, drain = setting
            wdesc = TensorDescriptor.from_tensor(w, [br, 128],
                                                 gl.NVMMASharedLayout.get_default_for([br, 128], gl.bfloat16))
            xdesc = TensorDescriptor.from_tensor(x[:xr], [xr, 128],
                                                 gl.NVMMASharedLayout.get_default_for([xr, 128], gl.bfloat16))
            out = torch.empty(ROWS, xr, device="cuda", dtype=torch.bfloat16) if swap else \
                torch.empty(xr, ROWS, device="cuda", dtype=torch.bfloat16)
            try:
                t = _seconds(lambda: mma_stream[(g,)](wdesc, xdesc, out, **_const(setting, g), num_warps=4))
            except Exception as e:  # noqa: BLE001 - a setting that fails says so and the rest run
                print(f"round {rnd} {name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            check = ""
            if rnd == 0 and not drain:
                want = (w[:4096].float() @ x[:xr].float().T)
                got = out[:4096].float() if swap else out[:, :4096].float().T
                check = f"  first 4,096 outputs vs FP32: max abs {(got - want).abs().max().item():.3e}"
            print(f"round {rnd} {name:42} {size / t / 1e12:5.2f} TB/s ({LAYER / (size / t) * 1e6:5.1f} µs per "
                  f"layer){check}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
