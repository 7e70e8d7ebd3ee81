"""How fast could the layer chain be with FP8 weights and FP8 activations (2026-12-04, session s37; written on the CPU
box, compiled there for sm_90 with Triton 3.6). Timing only: the numbers are wrong.
Why: issue 10 wants FP8 AR weights ≥ 1.6× BF16 at one row, and the FP8 step runs today as separate skinny launches
(0.87× BF16: the chain takes BF16 weights only). What bounds the BF16 chain at one row is its consumer warpgroup's
serial chain of k-tile handshakes and MMAs (~110 ns a k-tile; s34 parts probe) beside a weight stream of ~29 µs a
layer. Hopper's FP8 MMA takes both operands in FP8 (W8A8), so a k-tile of 256 FP8 values is as many bytes and
MMA instructions as one of 128 BF16 values: per layer half the handshakes and half the weight bytes. If that does
not make the chain much faster, no FP8 chain will; if it does, the real kernel also needs the activations quantised
(a per-row scale from every tile's absolute maxima, the way the norms' sums of squares travel now, and a
warpgroup that converts each activation k-tile before the MMA), which this probe leaves out: the o, gate/up and
down outputs are stored straight as FP8 (as the next product's TMA input and as the residual), the q/k/v in BF16.
Kernel level, as the s33–s35 probes: 28 layers of random yue2-3b shapes, 32 rows and 1 row, µs per layer in a
CUDA graph (`farm.bench.ar._time_graph`), the BF16 chain as it is beside FP8 with k-tiles of 256 (12 weight / 6
activation slots, the same shared memory) and of 128 (24 / 12).
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s37-fp8-chain-probe.py
`--compile-only` (Triton 3.6, any box): compiles the FP8 variant for sm_90."""
import importlib.util
import pathlib
import sys
import tempfile

import torch

sys.path.insert(0, ".")

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
SOURCE = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
EDITS = [  # (old, new, count)
    ("mbarrier.expect(full.index(s), PER * ROWS_W * BK * 2)", "mbarrier.expect(full.index(s), PER * ROWS_W * BK)", 1),
    ("mbarrier.expect(xfull.index(s), ROWS * BK * 2)", "mbarrier.expect(xfull.index(s), ROWS * BK)", 1),
    ("instr_shape=[16, W, 16]", "instr_shape=[16, W, 32]", 1),
    ("gl.store(out_ptr + where, y, mask=where < M * N)",
     "gl.store(out_ptr + where, y.to(out_ptr.dtype.element_ty), mask=where < M * N)", 1),
    ("gl.store(out_ptr + offs, y, mask=rows)", "gl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=rows)", 1),
    ("ring = gl.allocate_shared_memory(gl.bfloat16, [STAGES, 32, BK], gl.NVMMASharedLayout.get_default_for([32, BK],\n"
     "                                                                                                       gl.bfloat16))",
     "ring = gl.allocate_shared_memory(gl.float8e4nv, [STAGES, 32, BK],\n"
     "                                     gl.NVMMASharedLayout.get_default_for([32, BK], gl.float8e4nv))", 1),
    ("xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 64, BK],\n"
     "                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16))",
     "xs = gl.allocate_shared_memory(gl.float8e4nv, [XSTAGES, 64, BK],\n"
     "                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.float8e4nv))", 1),
    ("xs.index(s).store(gl.zeros([64, BK], gl.bfloat16, zero))", "xs.index(s).store(gl.zeros([64, BK], gl.float8e4nv, zero))",
     1),
]


def variant():
    src = SOURCE
    for old, new, count in EDITS:
        assert src.count(old) == count, old
        src = src.replace(old, new)
    path = pathlib.Path(tempfile.mkdtemp()) / "chain_fp8.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource
    kern = variant()
    for bk, stages, xstages in ((256, 12, 6), (128, 24, 12)):
        def d(rows):
            return f"tensordesc<fp8e4nv[{rows}, {bk}],{gl.NVMMASharedLayout.get_default_for([rows, bk], gl.float8e4nv)!r}>"
        sig = {"wo": d(32), "wgu": d(32), "wd": d(32), "wq": d(32), "xa": d(32), "xh": d(32), "xg": d(32),
               "xn": d(32), "a_res": "*fp8e4nv", "h_out": "*fp8e4nv", "g_out": "*fp8e4nv", "x_out": "*fp8e4nv",
               "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32",
               "eps": "fp32"}
        const = dict(H=H, I=I, Q=Q, BN_O=16, BN_GU=16, BN_D=16, BN_Q=32, BK=bk, STAGES=stages, XSTAGES=xstages,
                     G=132, NEXT=True, EARLY=True)
        sig.update({k: "constexpr" for k in const})
        k = triton.compile(GluonASTSource(kern.layer_chain, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4, "launch_pdl": True})
        ptx = k.asm["ptx"]
        print(f"triton {triton.__version__}, FP8 BK {bk}: shared {k.metadata.shared // 1024} KB, wgmma "
              f"{ptx.count('wgmma.mma_async')} ({ptx.count('e4m3.e4m3')} e4m3), tma {ptx.count('cp.async.bulk.tensor')}",
              flush=True)


def main() -> None:
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from farm.bench.ar import _time_graph
    from stages import layer_chain
    kern = variant()
    t = layer_chain.TILING
    torch.manual_seed(0)
    dev = torch.device("cuda")
    f8 = torch.float8_e4m3fn

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [dict(o=w(H, H), gu=layer_chain.pair_rows(w(2 * I, H)), d=w(H, I), q=w(Q, H)) for _ in range(L + 1)]
    for lay in layers:
        for k in ("o", "gu", "d", "q"):
            lay[k + "8"] = (lay[k].float() * 16).to(f8)
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    a8, x08 = a.to(f8), x0.to(f8)
    state = layer_chain.words(dev)
    programs = torch.cuda.get_device_properties(dev).multi_processor_count
    descs: dict = {}

    def desc(v, rows, bk, cache=False):
        key = (v.data_ptr(), rows, bk)
        if cache and key in descs:
            return descs[key]
        d = TensorDescriptor.from_tensor(v, [rows, bk], gl.NVMMASharedLayout.get_default_for([rows, bk], gl.float8e4nv))
        if cache:
            descs[key] = d
        return d

    def bf16(a, x, lay, nxt):
        return layer_chain._launch(a, x, lay["o"], lay["gu"], lay["d"], nxt["q"], EPS, state)

    def fp8(bk, stages, xstages):
        def run(a, x, lay, nxt):
            m = x.shape[0]
            h_out, x_out, g_out = x.new_empty(m, H), x.new_empty(m, H), x.new_empty(m, I)
            q_out = torch.empty(m, Q, dtype=torch.bfloat16, device=dev)
            sq_h = torch.empty(H // t.bn_o, 32, dtype=torch.float32, device=dev)
            sq_x = torch.empty(H // t.bn_d, 32, dtype=torch.float32, device=dev)
            wo, wgu, wd, wq = (desc(lay["o8"], 16, bk, True), desc(lay["gu8"], 32, bk, True),
                               desc(lay["d8"], 16, bk, True), desc(nxt["q8"], 32, bk, True))
            xa, xh, xg, xn = (desc(v, 32, bk) for v in (a, h_out, g_out, x_out))
            kern.layer_chain[(programs,)](
                wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out, sq_h, sq_x, state[1:6], state[0:1],
                m, EPS, H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=bk, STAGES=stages,
                XSTAGES=xstages, G=programs, NEXT=True, EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl)
            return x_out, q_out
        return run

    chains = (("BF16 as it is", bf16, a, x0), ("FP8, k-tiles of 256", fp8(256, 12, 6), a8, x08),
              ("FP8, k-tiles of 128", fp8(128, 24, 12), a8, x08))
    for name, fn, aa, xx in chains:
        try:
            fn(aa[:32], xx[:32], layers[0], layers[1])
            torch.cuda.synchronize()
            print(f"{name}: runs; spins that gave up {int(state[0])}", flush=True)
        except Exception as e:  # a probe: say why and go on
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:400]}", flush=True)
    nbytes = sum(layers[0][k].numel() for k in ("o", "gu", "d", "q"))
    for rnd in range(3):
        for rows in (32, 1):
            for name, fn, aa, xx in chains:
                def run():
                    x = xx[:rows]
                    for layer in range(L):
                        x, _ = fn(aa[:rows], x, layers[layer], layers[layer + 1])
                try:
                    us = _time_graph(run) / L * 1e6
                except Exception as e:  # a probe: say why and go on
                    print(f"round {rnd} rows {rows} {name}: failed: {type(e).__name__}: {str(e)[:200]}", flush=True)
                    continue
                per = 2 if name.startswith("BF16") else 1
                print(f"round {rnd} rows {rows} {name}: {us:.2f} µs per layer ({nbytes * per / us / 1e6:.2f} TB/s "
                      f"of weights); spins that gave up {int(state[0])}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
