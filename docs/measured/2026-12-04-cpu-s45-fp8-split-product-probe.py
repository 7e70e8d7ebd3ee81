"""The chain's four products with FP8 W8A16 weights as the MMA's A and K split over programs, against the same with
BF16 weights and against today's FP8 launches (2026-12-04, session s45; written on the CPU box, where no device was
lent, and compiled there for sm_90 with Triton 3.6).
Why: `…-s45-fp8-swap-stream-probe.py` asks whether FP8 weights widened in registers stream faster than BF16 ones
when nothing else is in the way; `…-s44-split-product-probe.py` asks whether a product with 64-row weight tiles
pays for splitting K (o and down have only 32 such tiles for 132 programs). This probe asks both at once, product
by product: one product per launch, the chain's roles and rings (the s44 split probe's weight and activation
warps; 144 KB), programmatic dependent launch, 28 launches over 28 matrices in a CUDA graph, µs per launch. A
tile's K parts are summed in a fixed order by its last program (((p0 + p1) + p2) + p3), then scaled per output
channel (FP8), rounded, and the residual added with the unfused ops' rounding. For FP8 the weight slot holds two
k-tiles of 64 rows (16 KB, as a BF16 one) and is freed as soon as they are in registers.
Today's FP8 launches: `skinny_gemm.linear` with the engine's FP8 tiles (`skinny_gemm.MEASURED`), o and down with
their residual, gate/up with SiLU·up (the swapped kernels leave the SiLU out: the same bytes).
Printed per product and setting: µs per launch (three graph replays), TB/s of weight bytes, max abs against FP32 of
the same values (FP8: the e4m3 values times their scales), whether two launches give the same bits, and whether the
tiles' counters came back to zero.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s45-fp8-split-product-probe.py
`--compile-only` (Triton 3.6, any box): compiles every swapped setting for sm_90 and prints its shared memory."""
import importlib.util
import pathlib
import sys

import torch
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (fence_async_shared, mbarrier, warpgroup_mma,
                                                               warpgroup_mma_wait)

sys.path.insert(0, ".")
from stages._layer_chain_gluon import _asm_zero, _wait_kernel_before  # noqa: E402


def _load(name: str, stem: str):
    path = pathlib.Path(__file__).with_name(stem)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


SPLIT_PROBE = _load("s44_split_product", "2026-12-04-cpu-s44-split-product-probe.py")
STREAM_PROBE = _load("s45_fp8_swap_stream", "2026-12-04-cpu-s45-fp8-swap-stream-probe.py")
ROWS = SPLIT_PROBE.ROWS
PRODUCTS = SPLIT_PROBE.PRODUCTS
# product: {label: (K parts, FP8)}; every tile 64 weight rows, 7 weight slots of 16 KB and 4 activation slots
SETTINGS = {
    "o": {"bf16 swapped, K in 4 parts": (4, False), "fp8 swapped, K in 4 parts": (4, True),
          "fp8 swapped, K in 2 parts (64 programs)": (2, True)},
    "down": {"bf16 swapped, K in 4 parts": (4, False), "fp8 swapped, K in 4 parts": (4, True)},
    "gate/up": {"bf16 swapped, whole K (192 tiles)": (1, False), "fp8 swapped, whole K (192 tiles)": (1, True),
                "fp8 swapped, K in 2 parts": (2, True)},
    "q/k/v": {"bf16 swapped, K in 2 parts": (2, False), "fp8 swapped, K in 2 parts": (2, True),
              "fp8 swapped, whole K (64 programs)": (1, True)},
}
# today's FP8 launch of each product: (output width, epilogue)
TODAY = {"o": (2048, "add"), "down": (2048, "add"), "gate/up": (6144, "silu_mul"), "q/k/v": (4096, "none")}


@gluon.jit
def _consumer(xs, xfull, xempty, ring, full, empty, out, res, scale, parts, count, pid, N: gl.constexpr,
              ITEMS: gl.constexpr, SPLIT: gl.constexpr, KT: gl.constexpr, STAGES: gl.constexpr,
              XSTAGES: gl.constexpr, G: gl.constexpr, FP8: gl.constexpr):
    _wait_kernel_before(pid * 0)
    _asm_zero(pid, "griddepcontrol.launch_dependents;")
    XR: gl.constexpr = 32
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, XR, 16])
    A: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, mma))
    c = gl.arange(0, XR, layout=gl.SliceLayout(0, mma))
    PER: gl.constexpr = 2 if FP8 else 1
    SLOTS: gl.constexpr = KT // PER
    i = pid * 0
    j = pid * 0
    prev = gl.zeros([64, 128], gl.bfloat16, A)      # the A operand of the MMA in flight (kept live until it is done)
    for it in range(pid, ITEMS, G):
        tile = it // SPLIT
        offs = c[None, :] * N + (tile * 64 + r)[:, None]        # acc[weight row, activation row]
        resv = gl.load(res + offs, cache_modifier=".cg")
        acc = gl.zeros([64, XR], gl.float32, mma)
        for kk in range(SLOTS):
            si = i + kk
            s = si % STAGES
            mbarrier.wait(full.index(s), (si // STAGES) & 1)
            for u in gl.static_range(PER):
                xj = j + kk * PER + u
                xsl = xj % XSTAGES
                if FP8:
                    a = STREAM_PROBE._a_fragment(ring.index(s).slice(u * 64, 64), A)
                    if u == PER - 1:        # the slot's k-tiles are in registers: free it now
                        mbarrier.arrive(empty.index(s))
                    mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
                    acc = warpgroup_mma(a, xs.index(xsl).permute((1, 0)), acc, is_async=True)
                    acc, prev = warpgroup_mma_wait(num_outstanding=1, deps=(acc, prev))
                    prev = a
                else:
                    mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
                    acc = warpgroup_mma(ring.index(s), xs.index(xsl).permute((1, 0)), acc, is_async=True)
                    acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
                    mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
                mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        if not FP8:
            mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
        mbarrier.arrive(xempty.index((j + KT - 1) % XSTAGES))
        i += SLOTS
        j += KT
        last = SPLIT == 1
        if SPLIT > 1:
            at = (tile * SPLIT) * 64 * XR + r[:, None] * XR + c[None, :]
            gl.store(parts + at + (it % SPLIT) * 64 * XR, acc)
            gl.thread_barrier()             # every thread's part is stored before the count (release)
            last = gl.atomic_add(count + tile, 1, sem="acq_rel", scope="gpu") == SPLIT - 1
            if last:                        # the tile's last part: add the parts in their order, whoever is last
                acc = gl.load(parts + at, cache_modifier=".cg")
                for p in gl.static_range(1, SPLIT):
                    acc += gl.load(parts + at + p * 64 * XR, cache_modifier=".cg")
                gl.atomic_xchg(count + tile, 0, sem="relaxed", scope="gpu")    # for the next launch
        if last:
            if FP8:
                acc = acc * gl.load(scale + tile * 64 + r)[:, None]
            gl.store(out + offs, (acc.to(gl.bfloat16).to(gl.float32) + resv.to(gl.float32)).to(gl.bfloat16))


@gluon.jit
def product(wdesc, xdesc, out, res, scale, parts, count, N: gl.constexpr, ITEMS: gl.constexpr, SPLIT: gl.constexpr,
            KT: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr, G: gl.constexpr, FP8: gl.constexpr):
    pid = gl.program_id(0)
    PER: gl.constexpr = 2 if FP8 else 1
    WT: gl.constexpr = gl.float8e4nv if FP8 else gl.bfloat16
    ring = gl.allocate_shared_memory(WT, [STAGES, 64 * PER, 128], gl.NVMMASharedLayout.get_default_for([64 * PER, 128],
                                                                                                         WT))
    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 32, 128],
                                   gl.NVMMASharedLayout.get_default_for([32, 128], gl.bfloat16))
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
    fence_async_shared()
    gl.warp_specialize([
        (_consumer, (xs, xfull, xempty, ring, full, empty, out, res, scale, parts, count, pid, N, ITEMS, SPLIT, KT,
                     STAGES, XSTAGES, G, FP8)),
        (SPLIT_PROBE._weights, (wdesc, ring, full, empty, pid, ITEMS, SPLIT, KT, 64, PER, STAGES, G)),
        (SPLIT_PROBE._activations, (xdesc, xs, xfull, xempty, pid, ITEMS, SPLIT, KT, XSTAGES, G)),
    ], [1, 1], [40, 40])


def _const(n, k, setting, g):
    split, fp8 = setting
    return dict(N=n, ITEMS=(n // 64) * split, SPLIT=split, KT=k // 128 // split, STAGES=7, XSTAGES=4, G=g, FP8=fp8)


def _layouts(fp8):
    wt = gl.float8e4nv if fp8 else gl.bfloat16
    return wt, gl.NVMMASharedLayout.get_default_for([64, 128], wt), gl.NVMMASharedLayout.get_default_for(
        [32, 128], gl.bfloat16)


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    for name, (n, k) in PRODUCTS.items():
        for label, setting in SETTINGS[name].items():
            const = _const(n, k, setting, 132)
            _, wl, xl = _layouts(setting[1])
            sig = {"wdesc": f"tensordesc<{'fp8e4nv' if setting[1] else 'bf16'}[64, 128],{wl!r}>",
                   "xdesc": f"tensordesc<bf16[32, 128],{xl!r}>", "out": "*bf16", "res": "*bf16", "scale": "*fp32",
                   "parts": "*fp32", "count": "*i32", **{c: "constexpr" for c in const}}
            kern = triton.compile(GluonASTSource(product, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": 4, "launch_pdl": True, "maxnreg": 168})
            ptx = kern.asm["ptx"]
            print(f"{name:8} {label:42} shared {kern.metadata.shared // 1024} KB, wgmma "
                  f"{ptx.count('wgmma.mma_async')}, ld.shared.v4 {ptx.count('ld.shared.v4')}, acq_rel "
                  f"{ptx.count('acq_rel')}", flush=True)


def main() -> None:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from farm.bench.ar import _time_graph
    from stages import quant, skinny_gemm

    torch.manual_seed(0)
    g = torch.cuda.get_device_properties(0).multi_processor_count
    x = torch.randn(ROWS, 6144, device="cuda", dtype=torch.bfloat16)
    col_of = STREAM_PROBE.COL_OF
    print(f"{torch.cuda.get_device_name()}, {g} programs; µs per launch, 28 launches of 28 matrices in a CUDA graph",
          flush=True)
    for name, (n, k) in PRODUCTS.items():
        mats = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) * k ** -0.5 for _ in range(28)]
        fp8 = [quant.quantize_fp8(m) for m in mats]
        permuted = [v.view(torch.uint8).view(n, k // 128, 128)[:, :, col_of].reshape(n, k).contiguous().view(v.dtype)
                    for v, _ in fp8]    # moved as bytes: not every torch build indexes float8 tensors
        xk = x[:, :k].contiguous()
        res = torch.randn(ROWS, n, device="cuda", dtype=torch.bfloat16)
        for label, setting in SETTINGS[name].items():
            split, is_fp8 = setting
            const = _const(n, k, setting, g)
            _, wl, xl = _layouts(is_fp8)
            wdescs = [TensorDescriptor.from_tensor(m, [64, 128], wl) for m in (permuted if is_fp8 else mats)]
            xdesc = TensorDescriptor.from_tensor(xk, [ROWS, 128], xl)
            w0 = fp8[0][0].float() * fp8[0][1][:, None] if is_fp8 else mats[0].float()
            want = ((xk.float() @ w0.T).to(torch.bfloat16).float() + res.float())
            scale = fp8[0][1] if is_fp8 else res
            out = torch.empty(ROWS, n, device="cuda", dtype=torch.bfloat16)
            parts = torch.empty(n // 64 * split * 64 * ROWS, device="cuda", dtype=torch.float32)
            count = torch.zeros(n // 64, device="cuda", dtype=torch.int32)

            def one(w):
                product[(g,)](w, xdesc, out, res, scale, parts, count, **const, num_warps=4, launch_pdl=True,
                              maxnreg=168)
            try:
                one(wdescs[0])
                STREAM_PROBE.finish_or_exit(f"{name} {label}")
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
            size = n * k * (1 if is_fp8 else 2)
            print(f"{name:8} {label:42} " + " / ".join(f"{t:6.2f}" for t in times)
                  + f" µs ({size / min(times) / 1e6:4.2f} TB/s); vs FP32 max abs {err:.3e}; repeatable {same}; "
                  f"counters back at zero {not count.any().item()}", flush=True)
        width, epilogue = TODAY[name]
        resid = res[:, :width] if epilogue == "add" else None

        def today_all28():
            for v, s in fp8:
                skinny_gemm.linear(xk, (v, s), epilogue, resid)
        got = skinny_gemm.linear(xk, fp8[0], epilogue, resid)
        ref = skinny_gemm.reference(xk, fp8[0][0], epilogue, resid, scale=fp8[0][1])
        times = [_time_graph(today_all28) / 28 * 1e6 for _ in range(3)]
        print(f"{name:8} {'today: fp8 skinny_gemm, ' + epilogue:42} " + " / ".join(f"{t:6.2f}" for t in times)
              + f" µs ({n * k / min(times) / 1e6:4.2f} TB/s); vs its reference max abs "
              f"{(got.float() - ref.float()).abs().max().item():.3e}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
