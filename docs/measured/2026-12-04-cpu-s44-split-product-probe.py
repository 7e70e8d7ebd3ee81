"""One product of the layer chain with the weights as the MMA's M and K split over programs, against today's tile
shape (2026-12-04, session s44; written on the CPU box for the next session's device time, compiled there for sm_90
with Triton 3.6).
Why: `…-s44-swap-ab-stream.log` shows the chain's consumer streaming at 4.15 TB/s with 64-row weight tiles as the
warpgroup MMA's M (acc[64, 32] += w[64, 128] · x[32, 128]ᵀ) against 3.2 TB/s with today's 16-row o/down tiles
and 3.9 with the 32-row gate/up and q/k/v tiles. But o and down have 2,048 outputs — 32 tiles of 64 rows for 132
programs — and gate/up 192, so such a chain must split K: each (tile, K part) is an item, items dealt round robin,
every part's FP32 sum stored, and the program that finishes a tile's last part (an acq_rel count per tile) adds the
parts in a fixed order (((p0 + p1) + p2) + p3: repeatable, a row's numbers its own, not today's bits), then the
residual, and stores the tile. That last program's round trip is on the product's critical path. This probe
measures whether the faster stream pays for it, product by product, before a chain is built on it.
The kernel: one product per launch, the chain's three roles (a weight warp, an activation warp, the consumer
warpgroup; the chain's rings and handshakes, 144 KB), programmatic dependent launch as in the chain (the weight warp
starts at once, the other warps wait for the kernel before); 28 launches over 28 different weight matrices in a
CUDA graph (no matrix is in L2 from the last), µs per launch. Products at 32 activation rows (the engine's slots):
o (2,048 × 2,048), down (2,048 × 6,144), gate/up as one 12,288 × 2,048 matrix (its SiLU left out: the same
bytes), q/k/v (4,096 × 2,048). Each output checked against FP32 of the same BF16 values (max abs; ~1 BF16 ulp).
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s44-split-product-probe.py
`--compile-only` (Triton 3.6, any box): compiles every setting for sm_90 and prints its shared memory."""
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, tma, warpgroup_mma,
                                                               warpgroup_mma_wait)

sys.path.insert(0, ".")
from stages._layer_chain_gluon import _asm_zero, _wait_kernel_before  # noqa: E402

ROWS = 32               # activation rows: the engine's slots
XR = gl.constexpr(ROWS)
# product: (N, K); setting: (tile rows BR, k-tiles per weight slot PER, K parts SPLIT, swapped, weight / x slots)
PRODUCTS = {"o": (2048, 2048), "down": (2048, 6144), "gate/up": (12288, 2048), "q/k/v": (4096, 2048)}
SETTINGS = {
    "o": {"today: 16-row tiles, whole K": (16, 2, 1, False, 8, 5),
          "swapped: 64-row tiles, K in 4 parts": (64, 1, 4, True, 7, 4),
          "swapped: 64-row tiles, K in 2 parts (64 programs)": (64, 1, 2, True, 7, 4)},
    "down": {"today: 16-row tiles, whole K": (16, 2, 1, False, 8, 5),
             "swapped: 64-row tiles, K in 4 parts": (64, 1, 4, True, 7, 4)},
    "gate/up": {"today: 32-row tiles, whole K": (32, 1, 1, False, 8, 5),
                "swapped: 64-row tiles, whole K (192 tiles)": (64, 1, 1, True, 7, 4),
                "swapped: 64-row tiles, K in 2 parts": (64, 1, 2, True, 7, 4)},
    "q/k/v": {"today: 32-row tiles, whole K": (32, 1, 1, False, 8, 5),
              "swapped: 64-row tiles, K in 2 parts": (64, 1, 2, True, 7, 4)},
}


@gluon.jit
def _weights(wdesc, ring, full, empty, pid, ITEMS: gl.constexpr, SPLIT: gl.constexpr, KT: gl.constexpr,
             BR: gl.constexpr, PER: gl.constexpr, STAGES: gl.constexpr, G: gl.constexpr):
    i = pid * 0
    for it in range(pid, ITEMS, G):
        tile = it // SPLIT
        k0 = (it % SPLIT) * KT
        for kk in range(KT // PER):
            s = i % STAGES
            mbarrier.wait(empty.index(s), ((i // STAGES) & 1) ^ 1)
            mbarrier.expect(full.index(s), PER * wdesc.block_type.nbytes)
            for u in gl.static_range(PER):
                tma.async_copy_global_to_shared(wdesc, [tile * BR, (k0 + kk * PER + u) * 128], full.index(s),
                                                ring.index(s).slice(u * BR, BR))
            i += 1


@gluon.jit
def _activations(xdesc, xs, xfull, xempty, pid, ITEMS: gl.constexpr, SPLIT: gl.constexpr, KT: gl.constexpr,
                 XSTAGES: gl.constexpr, G: gl.constexpr):
    _asm_zero(_wait_kernel_before(pid * 0), "fence.proxy.async.global;")
    j = pid * 0
    for it in range(pid, ITEMS, G):
        k0 = (it % SPLIT) * KT
        for k in range(KT):
            s = j % XSTAGES
            mbarrier.wait(xempty.index(s), ((j // XSTAGES) & 1) ^ 1)
            mbarrier.expect(xfull.index(s), xdesc.block_type.nbytes)
            tma.async_copy_global_to_shared(xdesc, [0, (k0 + k) * 128], xfull.index(s), xs.index(s).slice(0, XR))
            j += 1


@gluon.jit
def _consumer(xs, xfull, xempty, ring, full, empty, out, res, parts, count, pid, N: gl.constexpr,
              ITEMS: gl.constexpr, SPLIT: gl.constexpr, KT: gl.constexpr, BR: gl.constexpr, PER: gl.constexpr,
              STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, SWAP: gl.constexpr):
    _wait_kernel_before(pid * 0)
    _asm_zero(pid, "griddepcontrol.launch_dependents;")
    W: gl.constexpr = XR if SWAP else BR
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, W, 16])
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, W, layout=gl.SliceLayout(0, mma))
    SLOTS: gl.constexpr = KT // PER
    i = pid * 0
    j = pid * 0
    for it in range(pid, ITEMS, G):
        tile = it // SPLIT
        if SWAP:        # acc[weight row, activation row] → out[activation row, output]
            offs = c[None, :] * N + (tile * BR + r)[:, None]
            rows = (r < 64)[:, None] & (c < XR)[None, :]
        else:           # acc[activation row (32-63 padding), output]
            offs = r[:, None] * N + (tile * BR + c)[None, :]
            rows = (r < XR)[:, None] & (c < W)[None, :]
        resv = gl.load(res + offs, mask=rows, other=0.0, cache_modifier=".cg")
        acc = gl.zeros([64, W], gl.float32, mma)
        for kk in range(SLOTS):
            si = i + kk
            s = si % STAGES
            mbarrier.wait(full.index(s), (si // STAGES) & 1)
            for u in gl.static_range(PER):
                xj = j + kk * PER + u
                xsl = xj % XSTAGES
                mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
                if SWAP:
                    acc = warpgroup_mma(ring.index(s), xs.index(xsl).slice(0, XR).permute((1, 0)), acc, is_async=True)
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
        if SPLIT == 1:
            y = (acc.to(gl.bfloat16).to(gl.float32) + resv.to(gl.float32)).to(gl.bfloat16)
            gl.store(out + offs, y, mask=rows)
        else:
            at = (tile * SPLIT) * 64 * W + r[:, None] * W + c[None, :]
            gl.store(parts + at + (it % SPLIT) * 64 * W, acc)
            gl.thread_barrier()             # every thread's part is stored before the count (release)
            seen = gl.atomic_add(count + tile, 1, sem="acq_rel", scope="gpu")
            if seen == SPLIT - 1:           # the tile's last part: add the parts in their order, whoever is last
                total = gl.load(parts + at, cache_modifier=".cg")
                for p in gl.static_range(1, SPLIT):
                    total += gl.load(parts + at + p * 64 * W, cache_modifier=".cg")
                y = (total.to(gl.bfloat16).to(gl.float32) + resv.to(gl.float32)).to(gl.bfloat16)
                gl.store(out + offs, y, mask=rows)
                gl.atomic_xchg(count + tile, 0, sem="relaxed", scope="gpu")    # for the next launch


@gluon.jit
def product(wdesc, xdesc, out, res, parts, count, N: gl.constexpr, ITEMS: gl.constexpr, SPLIT: gl.constexpr,
            KT: gl.constexpr, BR: gl.constexpr, PER: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr,
            G: gl.constexpr, SWAP: gl.constexpr):
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
        (_consumer, (xs, xfull, xempty, ring, full, empty, out, res, parts, count, pid, N, ITEMS, SPLIT, KT, BR, PER,
                     STAGES, XSTAGES, G, SWAP)),
        (_weights, (wdesc, ring, full, empty, pid, ITEMS, SPLIT, KT, BR, PER, STAGES, G)),
        (_activations, (xdesc, xs, xfull, xempty, pid, ITEMS, SPLIT, KT, XSTAGES, G)),
    ], [1, 1], [40, 40])


def _const(n, k, setting, g):
    br, per, split, swap, stages, xstages = setting
    return dict(N=n, ITEMS=(n // br) * split, SPLIT=split, KT=k // 128 // split, BR=br, PER=per, STAGES=stages,
                XSTAGES=xstages, G=g, SWAP=swap)


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for name, (n, k) in PRODUCTS.items():
        for label, setting in SETTINGS[name].items():
            br = setting[0]
            const = _const(n, k, setting, 132)
            wl = gl.NVMMASharedLayout.get_default_for([br, 128], gl.bfloat16)
            xl = gl.NVMMASharedLayout.get_default_for([ROWS, 128], gl.bfloat16)
            sig = {"wdesc": f"tensordesc<bf16[{br}, 128],{wl!r}>", "xdesc": f"tensordesc<bf16[{ROWS}, 128],{xl!r}>",
                   "out": "*bf16", "res": "*bf16", "parts": "*fp32", "count": "*i32",
                   **{c: "constexpr" for c in const}}
            kern = triton.compile(GluonASTSource(product, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": 4, "launch_pdl": True, "maxnreg": 168})
            ptx = kern.asm["ptx"]
            print(f"{name:8} {label:48} shared {kern.metadata.shared // 1024} KB, wgmma "
                  f"{ptx.count('wgmma.mma_async')}, acq_rel {ptx.count('acq_rel')}", flush=True)


def main() -> None:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from farm.bench.ar import _time_graph

    torch.manual_seed(0)
    g = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(ROWS, 6144, device="cuda", dtype=torch.bfloat16)
    print(f"{torch.cuda.get_device_name()}, {g} programs; µs per launch, 28 launches of 28 matrices in a CUDA graph",
          flush=True)
    for name, (n, k) in PRODUCTS.items():
        mats = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5 for _ in range(28)]
        xk = x[:, :k].contiguous()
        res = torch.randn(ROWS, n, device="cuda", dtype=torch.bfloat16)
        want = (xk.float() @ mats[0].float().T + res.float())
        for label, setting in SETTINGS[name].items():
            br, _, split, swap, _, _ = setting
            const = _const(n, k, setting, g)
            wdescs = [TensorDescriptor.from_tensor(m, [br, 128],
                                                   gl.NVMMASharedLayout.get_default_for([br, 128], gl.bfloat16))
                      for m in mats]
            xdesc = TensorDescriptor.from_tensor(xk, [ROWS, 128],
                                                 gl.NVMMASharedLayout.get_default_for([ROWS, 128], gl.bfloat16))
            out = torch.empty(ROWS, n, device="cuda", dtype=torch.bfloat16)
            parts = torch.empty(n // br * split * 64 * ROWS, device="cuda", dtype=torch.float32)
            count = torch.zeros(n // br, device="cuda", dtype=torch.int32)

            def one(w):
                product[(g,)](w, xdesc, out, res, parts, count, **const, num_warps=4, launch_pdl=True, maxnreg=168)
            try:
                one(wdescs[0])
                torch.cuda.synchronize()
                err = (out.float() - want).abs().max().item()
                first = out.clone()
                one(wdescs[0])
                same = torch.equal(out, first)

                def all28():
                    for w in wdescs:
                        one(w)
                times = [_time_graph(all28) / 28 * 1e6 for _ in range(3)]
            except Exception as e:  # noqa: BLE001 - a setting that fails says so and the rest run
                print(f"{name:8} {label}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            size = n * k * 2
            print(f"{name:8} {label:48} " + " / ".join(f"{t:6.2f}" for t in times)
                  + f" µs ({size / min(times) / 1e6:4.2f} TB/s); vs FP32 max abs {err:.3e}; repeatable {same}; "
                  f"counters back at zero {not count.any().item()}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
