"""The register-direct `mma_v2` product of `…-s40-mma2-stream-probe.py` as one persistent stream (2026-12-04,
session s40; written on the CPU box, compiled there for sm_90 with Triton 3.6; for an H200).

Why: as 28 separate launches that product took ~15-16 µs for the gate/up matrix of yue2-3b whatever its bytes (FP8
as slow as BF16): the launches' ramps, not the stream. Here one launch walks 28 such matrices (1.41 GB BF16, more
than the L2) with every program's loads running D k-tiles ahead straight across tile and matrix boundaries (one
flat loop over this program's (matrix, tile, k-tile) steps; a tile's result is stored when its last k-tile is
multiplied), with no barrier between matrices — so it measures what this design can stream, to set beside the TMA
stream (4.6 TB/s, `…-s38-tma-stream.log`) and the layer chain's weight warp (29.4 µs a layer, 3.4 TB/s). Items
(matrix, tile) are dealt round robin over the programs. x is the same [rows, K] for every matrix (from L2).
Modes: --compile (any box); (default) the H200 run: checks the first and last matrices' products against FP32,
then µs per matrix and TB/s at 1, 8 and 32 rows."""
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

N_GU, K_H, LAYERS = 12288, 2048, 28


@gluon.jit
def _step_ptrs(w, j, pid, G, T, STEPS: gl.constexpr, N: gl.constexpr, K: gl.constexpr, BK: gl.constexpr,
               BN: gl.constexpr, a_l: gl.constexpr):
    """The weight k-tile of this program's flat step j: item pid + G·(j // STEPS) = (matrix, tile), k-tile j % STEPS."""
    item = pid + G * (j // STEPS)
    layer = item // T
    tile = item % T
    rn = tile * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, a_l))
    rk = (j % STEPS) * BK + gl.arange(0, BK, layout=gl.SliceLayout(0, a_l))
    return w + layer.to(gl.int64) * (N * K) + rn.to(gl.int64)[:, None] * K + rk[None, :]


@gluon.jit
def _b(x, ks, M, K: gl.constexpr, BK: gl.constexpr, R: gl.constexpr, b_l: gl.constexpr):
    rk = ks * BK + gl.arange(0, BK, layout=gl.SliceLayout(1, b_l))
    rr = gl.arange(0, R, layout=gl.SliceLayout(0, b_l))
    return gl.load(x + rr[None, :] * K + rk[:, None], mask=(rr < M)[None, :], other=0.0)


@gluon.jit
def _half(a, j, x, y, scale, acc, pid, G, T, M, STEPS: gl.constexpr, N: gl.constexpr, K: gl.constexpr,
          BK: gl.constexpr, BN: gl.constexpr, R: gl.constexpr, FP8: gl.constexpr, mma: gl.constexpr,
          b_l: gl.constexpr):
    """Multiply step j's k-tile `a` into acc; after a tile's last k-tile store it and start the next at zero."""
    ks = j % STEPS
    av = a
    if FP8:
        av = a.to(gl.bfloat16)
    acc = mma_v2(av, _b(x, ks, M, K, BK, R, b_l), acc)
    if ks == STEPS - 1:
        item = pid + G * (j // STEPS)
        layer = item // T
        rn = (item % T) * BN + gl.arange(0, BN, layout=gl.SliceLayout(1, mma))
        rr = gl.arange(0, R, layout=gl.SliceLayout(0, mma))
        out = acc
        if FP8:
            out = acc * gl.load(scale + layer * N + rn)[:, None]
        gl.store(y + layer.to(gl.int64) * (M * N) + rr[None, :] * N + rn[:, None], out.to(gl.bfloat16),
                 mask=(rr < M)[None, :])
        acc = gl.zeros([BN, R], gl.float32, mma)
    return acc


@gluon.jit
def flat_stream(x, w, scale, y, M, L, N: gl.constexpr, K: gl.constexpr, R: gl.constexpr, BK: gl.constexpr,
                WARPS: gl.constexpr, K_WIDTH: gl.constexpr, FP8: gl.constexpr):
    """y[l] = x · w[l]ᵀ (· scale[l]) for the L matrices w [L, N, K]; two k-tiles in flight per warp (a0, a1)."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    a_l: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=K_WIDTH)
    b_l: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=K_WIDTH)
    BN: gl.constexpr = 16 * WARPS
    STEPS: gl.constexpr = K // BK
    gl.static_assert(STEPS % 2 == 0)
    pid = gl.program_id(0)
    G = gl.num_programs(0)
    T = N // BN
    items = (L * T - pid + G - 1) // G
    total = items * STEPS
    a0 = gl.load(_step_ptrs(w, 0, pid, G, T, STEPS, N, K, BK, BN, a_l))
    a1 = gl.load(_step_ptrs(w, 1, pid, G, T, STEPS, N, K, BK, BN, a_l))
    acc = gl.zeros([BN, R], gl.float32, mma)
    for j in range(0, total - 2, 2):
        acc = _half(a0, j, x, y, scale, acc, pid, G, T, M, STEPS, N, K, BK, BN, R, FP8, mma, b_l)
        a0 = gl.load(_step_ptrs(w, j + 2, pid, G, T, STEPS, N, K, BK, BN, a_l))
        acc = _half(a1, j + 1, x, y, scale, acc, pid, G, T, M, STEPS, N, K, BK, BN, R, FP8, mma, b_l)
        a1 = gl.load(_step_ptrs(w, j + 3, pid, G, T, STEPS, N, K, BK, BN, a_l))
    acc = _half(a0, total - 2, x, y, scale, acc, pid, G, T, M, STEPS, N, K, BK, BN, R, FP8, mma, b_l)
    acc = _half(a1, total - 1, x, y, scale, acc, pid, G, T, M, STEPS, N, K, BK, BN, R, FP8, mma, b_l)


VARIANTS = {   # name: (BK, WARPS, K_WIDTH, FP8, programs per SM)
    "bf16 bk128 w4, 1 program/SM": (128, 4, 8, False, 1),
    "bf16 bk128 w4, 2 programs/SM": (128, 4, 8, False, 2),
    "bf16 bk128 w4, 4 programs/SM": (128, 4, 8, False, 4),
    "bf16 bk128 w2, 4 programs/SM": (128, 2, 8, False, 4),
    "bf16 bk64 w4, 2 programs/SM": (64, 4, 8, False, 2),
    "bf16 bk64 w4, 4 programs/SM": (64, 4, 8, False, 4),
    "bf16 bk64 w4, 6 programs/SM": (64, 4, 8, False, 6),
    "fp8 bk256 w4, 2 programs/SM": (256, 4, 16, True, 2),
    "fp8 bk128 w4, 2 programs/SM": (128, 4, 16, True, 2),
    "fp8 bk128 w4, 3 programs/SM": (128, 4, 16, True, 3),
    "fp8 bk128 w4, 4 programs/SM": (128, 4, 16, True, 4),
}


def _resources(cubin: bytes) -> str:
    """Registers and stack of a compiled kernel: the first probe's reader (cuobjdump, shipped with Triton)."""
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).with_name("2026-12-04-cpu-s40-mma2-stream-probe.py")
    spec = importlib.util.spec_from_file_location("mma2_stream_probe", path)
    first = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(first)
    return first._resources(cubin)


def compile_only() -> None:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    for name, (bk, warps, kw, fp8, _) in VARIANTS.items():
        for r in (8, 32):
            sig = {"x": "*bf16", "w": "*fp8e4nv" if fp8 else "*bf16", "scale": "*fp32", "y": "*bf16", "M": "i32",
                   "L": "i32"}
            const = dict(N=N_GU, K=K_H, R=r, BK=bk, WARPS=warps, K_WIDTH=kw, FP8=fp8)
            k = triton.compile(GluonASTSource(flat_stream, {**sig, **{c: "constexpr" for c in const}}, const,
                                              {(i,): [["tt.divisibility", 16]] for i in range(4)}),
                               target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})
            ptx = k.asm["ptx"]
            print(f"{name} rows {r}: {_resources(k.asm['cubin'])}; ld.global.v4 {ptx.count('ld.global.v4')} "
                  f"mma.sync {ptx.count('mma.sync')}", flush=True)


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import quant
    torch.manual_seed(0)
    dev = "cuda"
    sm = torch.cuda.get_device_properties(0).multi_processor_count
    w = torch.randn(LAYERS, N_GU, K_H, device=dev).mul_(0.02).to(torch.bfloat16)
    q = [quant.quantize_fp8(m) for m in w]
    w8 = torch.stack([v for v, _ in q])
    s8 = torch.stack([s for _, s in q])
    x32 = torch.randn(32, K_H, device=dev).to(torch.bfloat16)
    us = _time_graph(lambda: w.sum(), 20) * 1e6 / LAYERS
    print(f"torch.sum over the stacked matrices: {us:.2f} µs a matrix ({w[0].numel() * 2 / us / 1e6:.2f} TB/s)",
          flush=True)
    for name, (bk, warps, kw, fp8, per_sm) in VARIANTS.items():
        wt, sc = (w8, s8) if fp8 else (w, x32)
        nbytes = wt[0].numel() * wt.element_size()
        try:
            for rows in (1, 8, 32):
                r = 8 if rows <= 8 else 32
                x = x32[:rows].contiguous()
                y = torch.empty(LAYERS, rows, N_GU, device=dev, dtype=torch.bfloat16)

                def run():
                    flat_stream[(per_sm * sm,)](x, wt, sc, y, rows, LAYERS, N=N_GU, K=K_H, R=r, BK=bk, WARPS=warps,
                                                K_WIDTH=kw, FP8=fp8, num_warps=warps)
                run()
                err = 0.0
                for layer in (0, LAYERS - 1):
                    ref = x.float() @ (wt[layer].float() * (sc[layer][:, None] if fp8 else 1)).T
                    err = max(err, (y[layer].float() - ref).abs().max().item())
                us = _time_graph(run, 20) * 1e6 / LAYERS
                print(f"{name} rows {rows}: {us:.2f} µs a matrix ({nbytes / us / 1e6:.2f} TB/s); max abs {err:.4f} "
                      f"from FP32", flush=True)
        except Exception as e:   # noqa: BLE001 - a probe reports a variant that fails and goes on
            print(f"{name}: failed: {str(e).splitlines()[-1][:300]}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile" in sys.argv else main()
