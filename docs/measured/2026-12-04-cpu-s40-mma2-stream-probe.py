"""Weights straight from memory into the registers of a legacy tensor-core MMA (`mma.sync`, Gluon's `mma_v2`), no
ring and no handshakes: how fast can a product of the AR step stream that way? (2026-12-04, session s40; written
on the CPU box and compiled there for sm_90 with Triton 3.6; for an H200.)

Why: the layer chain's consumer warpgroup bounds it (docs/ar-engine.md): ~36 µs a layer, of which ~14 waiting on
its rings and ~13 in its own per-k-tile work (handshakes, ring arithmetic), while a bare TMA stream reads a layer's
100.7 MB in 22 µs. A warpgroup MMA (wgmma) must take its weight operand from shared memory, and one whose
operand comes from registers waits for every register load before it (the s38 register-x probe: 154 µs a layer).
`mma.sync` has no such fence: it waits only for its own operand registers. So every warp can be its own producer
and consumer — issue the loads of its next D weight k-tiles into registers, multiply the oldest, reload it — with
no shared-memory ring, no mbarrier, no warp roles. The weights are loaded in the MMA's operand layout
(DotOperandLayout, operand 0: the weight tile is the MMA's M side, 16 channels a warp) with K_WIDTH consecutive
values of K per thread, so a thread's load is one 16-byte vector when K_WIDTH is 8 (BF16) or 16 (FP8).
The activations (x, [rows, K]) are the MMA's B operand ([K, rows] with rows padded to 8/16/32): staged once per
program in shared memory (`X_SMEM`) or read from L2 straight into the operand layout (rows past M masked: at one
row they cost no traffic).

What it measures: one product shape per run — the gate/up product of yue2-3b ([12288, 2048], no split of K needed:
768 tiles of 16 channels), over 28 different matrices (1.41 GB, more than the L2 holds) in a CUDA graph of 28
launches, each launch starting early (programmatic dependent launch) — in µs per product and TB/s, at 1, 8 and 32
rows, for BF16 weights and for FP8 (e4m3, one scale per channel, converted to BF16 in registers: W8A16); beside
`torch.sum` over the same matrices (the copy rate) and our skinny-GEMM op on the same shape. Each variant is first
checked against an FP32 product (and a row alone against the same row among 32: equal bits).
Modes: --compile (any box): PTX statistics and registers of each variant for sm_90; (default) the H200 run."""
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

N_GU, K_H = 12288, 2048


@gluon.jit
def _wait_kernel_before(v):
    return gl.inline_asm_elementwise("griddepcontrol.wait; mov.u32 $0, 0;", "=r,r", [v], dtype=gl.int32,
                                     is_pure=False, pack=1)


@gluon.jit
def _launch_dependents(v):
    return gl.inline_asm_elementwise("griddepcontrol.launch_dependents; mov.u32 $0, 0;", "=r,r", [v],
                                     dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _a_ptrs(w, tile, k0, K: gl.constexpr, BK: gl.constexpr, WARPS: gl.constexpr, a_l: gl.constexpr):
    """The [16·WARPS, BK] weight k-tile of channel tile `tile` starting at column k0, in the MMA's A layout."""
    rn = tile * (16 * WARPS) + gl.arange(0, 16 * WARPS, layout=gl.SliceLayout(1, a_l))
    rk = k0 + gl.arange(0, BK, layout=gl.SliceLayout(0, a_l))
    return w + rn.to(gl.int64)[:, None] * K + rk[None, :]


@gluon.jit
def _b(x, xs, k0, M, K: gl.constexpr, BK: gl.constexpr, R: gl.constexpr, X_SMEM: gl.constexpr,
       b_l: gl.constexpr):
    """x[:, k0:k0+BK]ᵀ as the MMA's B operand [BK, R] (rows ≥ M zero)."""
    if X_SMEM:
        return xs.index(k0 // BK).load(b_l)
    rk = k0 + gl.arange(0, BK, layout=gl.SliceLayout(1, b_l))
    rr = gl.arange(0, R, layout=gl.SliceLayout(0, b_l))
    return gl.load(x + rr[None, :] * K + rk[:, None], mask=(rr < M)[None, :], other=0.0)


@gluon.jit
def _mma(a, b, acc, FP8: gl.constexpr):
    if FP8:
        a = a.to(gl.bfloat16)
    return mma_v2(a, b, acc)


@gluon.jit
def stream_product(x, w, scale, y, M, N: gl.constexpr, K: gl.constexpr, R: gl.constexpr, BK: gl.constexpr,
                   D: gl.constexpr, WARPS: gl.constexpr, K_WIDTH: gl.constexpr, X_SMEM: gl.constexpr,
                   FP8: gl.constexpr, PDL: gl.constexpr):
    """y[M, N] = x[M, K] · w[N, K]ᵀ (· scale[N] for FP8), BF16 out; program p takes channel tiles p, p + G, …"""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=K_WIDTH)
    b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=K_WIDTH)
    BN: gl.constexpr = 16 * WARPS
    STEPS: gl.constexpr = K // BK
    gl.static_assert(STEPS % D == 0)
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    z = pid * 0
    if PDL:   # weights first: they are never written, so they may stream while the kernel before finishes
        _launch_dependents(z)
    xs = None
    if X_SMEM:
        xs_l: gl.constexpr = gl.SwizzledSharedLayout(8, 1, 8, order=[0, 1])
        xs = gl.allocate_shared_memory(gl.bfloat16, [K // BK, BK, R], xs_l)
    for tile in range(pid, N // BN, G):
        # D k-tiles in flight: a0 … a{D-1}, each reloaded D k-tiles ahead once it has been multiplied
        pa = _a_ptrs(w, tile, 0, K, BK, WARPS, a_l)
        a0 = gl.load(pa)
        a1 = a0
        a2 = a0
        a3 = a0
        if D > 1:
            a1 = gl.load(pa + BK)
        if D > 2:
            a2 = gl.load(pa + 2 * BK)
        if D > 3:
            a3 = gl.load(pa + 3 * BK)
        if tile == pid:
            if PDL:
                _wait_kernel_before(z)
            if X_SMEM:
                ld_l: gl.constexpr = gl.BlockedLayout([8, 1], [32, 1], [1, WARPS], [0, 1])
                rk = gl.arange(0, BK, layout=gl.SliceLayout(1, ld_l))
                rr = gl.arange(0, R, layout=gl.SliceLayout(0, ld_l))
                for i in gl.static_range(STEPS):
                    xs.index(i).store(gl.load(x + rr[None, :] * K + (i * BK + rk)[:, None], mask=(rr < M)[None, :],
                                              other=0.0))
                gl.thread_barrier()
        acc = gl.zeros([BN, R], gl.float32, mma)
        for s in range(0, STEPS - D, D):
            k = s * BK
            acc = _mma(a0, _b(x, xs, k, M, K, BK, R, X_SMEM, b_l), acc, FP8)
            a0 = gl.load(pa + (k + D * BK))
            if D > 1:
                acc = _mma(a1, _b(x, xs, k + BK, M, K, BK, R, X_SMEM, b_l), acc, FP8)
                a1 = gl.load(pa + (k + (D + 1) * BK))
            if D > 2:
                acc = _mma(a2, _b(x, xs, k + 2 * BK, M, K, BK, R, X_SMEM, b_l), acc, FP8)
                a2 = gl.load(pa + (k + (D + 2) * BK))
            if D > 3:
                acc = _mma(a3, _b(x, xs, k + 3 * BK, M, K, BK, R, X_SMEM, b_l), acc, FP8)
                a3 = gl.load(pa + (k + (D + 3) * BK))
        k = (STEPS - D) * BK
        acc = _mma(a0, _b(x, xs, k, M, K, BK, R, X_SMEM, b_l), acc, FP8)
        if D > 1:
            acc = _mma(a1, _b(x, xs, k + BK, M, K, BK, R, X_SMEM, b_l), acc, FP8)
        if D > 2:
            acc = _mma(a2, _b(x, xs, k + 2 * BK, M, K, BK, R, X_SMEM, b_l), acc, FP8)
        if D > 3:
            acc = _mma(a3, _b(x, xs, k + 3 * BK, M, K, BK, R, X_SMEM, b_l), acc, FP8)
        rn = tile * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, mma))
        rr = gl.arange(0, R, layout=gl.SliceLayout(0, mma))
        if FP8:
            acc = acc * gl.load(scale + rn)[:, None]
        gl.store(y + rr[None, :] * N + rn[:, None], acc.to(gl.bfloat16), mask=(rr < M)[None, :])


VARIANTS = {   # name: (BK, D, WARPS, K_WIDTH, X_SMEM, FP8)
    "bf16 bk64 d4 w1 kw8 x-l2": (64, 4, 1, 8, False, False),
    "bf16 bk64 d4 w2 kw8 x-l2": (64, 4, 2, 8, False, False),
    "bf16 bk64 d4 w4 kw8 x-l2": (64, 4, 4, 8, False, False),
    "bf16 bk64 d4 w1 kw8 x-smem": (64, 4, 1, 8, True, False),
    "bf16 bk64 d4 w4 kw8 x-smem": (64, 4, 4, 8, True, False),
    "bf16 bk64 d4 w8 kw8 x-smem": (64, 4, 8, 8, True, False),
    "bf16 bk128 d2 w4 kw8 x-smem": (128, 2, 4, 8, True, False),
    "bf16 bk64 d4 w4 kw2 x-smem": (64, 4, 4, 2, True, False),
    "fp8 bk128 d2 w1 kw16 x-l2": (128, 2, 1, 16, False, True),
    "fp8 bk128 d2 w1 kw16 x-smem": (128, 2, 1, 16, True, True),
    "fp8 bk128 d2 w4 kw16 x-smem": (128, 2, 4, 16, True, True),
    "fp8 bk64 d4 w4 kw8 x-smem": (64, 4, 4, 8, True, True),
}

ROUND2 = {   # the second call: more bytes in flight per warp, activations from L2
    "bf16 bk128 d2 w4 kw8 x-l2": (128, 2, 4, 8, False, False),
    "bf16 bk128 d4 w4 kw8 x-l2": (128, 4, 4, 8, False, False),
    "bf16 bk128 d4 w2 kw8 x-l2": (128, 4, 2, 8, False, False),
    "bf16 bk256 d2 w4 kw8 x-l2": (256, 2, 4, 8, False, False),
    "fp8 bk256 d2 w4 kw16 x-l2": (256, 2, 4, 16, False, True),
    "fp8 bk256 d4 w4 kw16 x-l2": (256, 4, 4, 16, False, True),
    "fp8 bk512 d2 w4 kw16 x-l2": (512, 2, 4, 16, False, True),
    "fp8 bk256 d4 w2 kw16 x-l2": (256, 4, 2, 16, False, True),
}
if "--round2" in sys.argv:
    VARIANTS = ROUND2


def _resources(cubin: bytes) -> str:
    """Registers and spills from the cubin (cuobjdump, shipped with Triton)."""
    import os
    import re
    import subprocess
    import tempfile
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    m = re.search(r"REG:(\d+).*?STACK:(\d+)", out)
    return f"regs {m.group(1)} stack {m.group(2)}" if m else out.strip()[-200:]


def compile_only() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    for name, (bk, d, warps, kw, xsm, fp8) in VARIANTS.items():
        for r in (8, 32):
            sig = {"x": "*bf16", "w": "*fp8e4nv" if fp8 else "*bf16", "scale": "*fp32", "y": "*bf16", "M": "i32"}
            const = dict(N=N_GU, K=K_H, R=r, BK=bk, D=d, WARPS=warps, K_WIDTH=kw, X_SMEM=xsm, FP8=fp8, PDL=True)
            try:
                k = triton.compile(GluonASTSource(stream_product, {**sig, **{c: "constexpr" for c in const}},
                                                  const, {(i,): [["tt.divisibility", 16]] for i in range(4)}), target=GPUTarget("cuda", 90, 32),
                                   options={"num_warps": warps, "launch_pdl": True})
            except Exception as e:   # noqa: BLE001 - a probe reports what does not compile and goes on
                print(f"{name} rows {r}: does not compile: {str(e).splitlines()[-1][:200]}", flush=True)
                continue
            ptx = k.asm["ptx"]
            print(f"{name} rows {r}: {_resources(k.asm['cubin'])}, shared {k.metadata.shared} B; "
                  f"ld.global.v4 {ptx.count('ld.global.v4')} ld.global.v2 {ptx.count('ld.global.v2')} "
                  f"ld.global(all) {ptx.count('ld.global')} mma.sync {ptx.count('mma.sync')} "
                  f"ldmatrix {ptx.count('ldmatrix')} ld.shared {ptx.count('ld.shared')} "
                  f"cvt {ptx.count('cvt.rn.bf16x2')}", flush=True)


def launch(x, w, scale, y, variant, rows_bucket, programs):
    bk, d, warps, kw, xsm, fp8 = VARIANTS[variant]
    stream_product[(programs,)](x, w, scale, y, x.shape[0], N=w.shape[0], K=w.shape[1], R=rows_bucket, BK=bk, D=d,
                                WARPS=warps, K_WIDTH=kw, X_SMEM=xsm, FP8=fp8, PDL=True, num_warps=warps,
                                launch_pdl=True)


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import quant, skinny_gemm
    torch.manual_seed(0)
    dev = "cuda"
    layers = 28
    ws = [torch.randn(N_GU, K_H, device=dev).mul_(0.02).to(torch.bfloat16) for _ in range(layers)]
    fp8 = [quant.quantize_fp8(w) for w in ws]     # (values e4m3 [N, K], scale [N] FP32)
    x32 = torch.randn(32, K_H, device=dev).to(torch.bfloat16)
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    total = sum(w.numel() * 2 for w in ws)

    def t(fn):
        return _time_graph(fn, 20) * 1e6 / layers
    us = t(lambda: [w.sum() for w in ws])
    print(f"torch.sum over the 28 matrices: {us:.2f} µs each ({total / layers / us / 1e6:.2f} TB/s)", flush=True)
    for rows in (1, 8, 32):
        x = x32[:rows].contiguous()
        us = t(lambda: [skinny_gemm.linear(x, w) for w in ws])
        print(f"rows {rows}: skinny_gemm.linear {us:.2f} µs ({total / layers / us / 1e6:.2f} TB/s)", flush=True)
        us = t(lambda: [skinny_gemm.linear(x, w) for w in fp8])
        print(f"rows {rows}: skinny_gemm.linear fp8 {us:.2f} µs ({total / 2 / layers / us / 1e6:.2f} TB/s)",
              flush=True)
    for name, (bk, d, warps, kw, xsm, is8) in VARIANTS.items():
        mats = fp8 if is8 else [(w, None) for w in ws]
        nbytes = total // 2 if is8 else total
        try:
            for rows in (1, 8, 32):
                bucket = 8 if rows <= 8 else 32
                x = x32[:rows].contiguous()
                tiles = N_GU // (16 * warps)
                y = torch.empty(rows, N_GU, device=dev, dtype=torch.bfloat16)
                for programs in sorted({min(tiles, 2 * sm), min(tiles, 4 * sm), tiles}):
                    w0, s0 = mats[0]
                    launch(x, w0, s0 if s0 is not None else x, y, name, bucket, programs)
                    ref = (x.float() @ (w0.float() * (s0[:, None] if s0 is not None else 1)).T)
                    err = (y.float() - ref).abs().max().item()
                    y32 = torch.empty(32, N_GU, device=dev, dtype=torch.bfloat16)
                    launch(x32, w0, s0 if s0 is not None else x, y32, name, 32, programs)
                    same = torch.equal(y32[:rows], y)
                    ys = [torch.empty_like(y) for _ in mats]
                    us = t(lambda: [launch(x, m, s if s is not None else x, o, name, bucket, programs)
                                    for (m, s), o in zip(mats, ys)])
                    print(f"{name} rows {rows} (bucket {bucket}) programs {programs}: {us:.2f} µs "
                          f"({nbytes / layers / us / 1e6:.2f} TB/s); max abs {err:.4f} from FP32; "
                          f"rows among 32 same bits: {same}", flush=True)
        except Exception as e:   # noqa: BLE001
            print(f"{name}: failed: {str(e).splitlines()[-1][:300]}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile" in sys.argv else main()
