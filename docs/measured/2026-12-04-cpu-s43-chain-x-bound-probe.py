"""What the layer chain's activation ring costs its consumer, bounded from above (2026-12-04, session s43; written on
the CPU box, compiled there for sm_90 with Triton 3.6). Why: the consumer warpgroup sets the chain's pace (~37 µs a
layer against 22 for its weight walk alone, docs/ar-engine.md), and its clock reads (`…-s38-chain-consumer-clock`)
put ~9 of its µs in waits for activation slots, ~6 of them in the middle of tiles, which neither a deeper ring nor
fewer handshakes moved. With at most 8 live rows a product's whole input would fit in shared memory (8 rows of a
k-tile are one 1 KB swizzle atom; a 64-row MMA view may read on into the next atoms, rows it never stores), copied
once per product, and the consumer would wait once per product instead of per k-tile. Before building that, this
timing-only variant removes the ring from the committed kernel: no activation copies and no x waits or releases;
the consumer waits once per product for the grid (its `ready` barrier, before its first tile instead of only in
the epilogue) and its MMAs read the zeroed x slots in the same order (the same shared-memory traffic as the
resident design). Wrong numbers; what it can give is the bound. 28 layers of yue2-3b shapes, µs per layer in a
CUDA graph, three rounds.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s43-chain-x-bound-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
EDITS = [
    ("            mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)\n", ""),
    ("            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))\n", ""),
    ("    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))\n", ""),
    ("    SLOTS: gl.constexpr = K // BK // PER\n    for tile in range(pid, N // BN, G):\n",
     "    SLOTS: gl.constexpr = K // BK // PER\n    if WAIT:\n        mbarrier.wait(ready, 0)\n"
     "    for tile in range(pid, N // BN, G):\n"),
    ("    j = pid * 0\n    _asm_zero(_wait_kernel_before(j), \"fence.proxy.async.global;\")",
     "    j = pid * 0\n    if NEXT:\n        return\n    _asm_zero(_wait_kernel_before(j), \"fence.proxy.async.global;\")"),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_x_bound.py").write_text(text)
    return importlib.import_module("stages._chain_x_bound")


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from stages import layer_chain
    t = layer_chain.TILING
    kern = variant()

    def d(rows):
        return f"tensordesc<bf16[{rows}, {t.bk}],{gl.NVMMASharedLayout.get_default_for([rows, t.bk], gl.bfloat16)!r}>"
    sig = {"wo": d(t.bn_o), "wgu": d(2 * t.bn_gu), "wd": d(t.bn_d), "wq": d(t.bn_q), "xa": d(32), "xh": d(32),
           "xg": d(32), "xn": d(32), "a_res": "*bf16", "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16",
           "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32",
           "eps": "fp32"}
    const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
                 XSTAGES=t.xstages, G=132, NEXT=True, EARLY=True)
    k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const, {}),
                       target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "launch_pdl": True, "maxnreg": t.maxnreg})
    ptx = k.asm["ptx"]
    print(f"shared {k.metadata.shared // 1024} KB, wgmma {ptx.count('wgmma.mma_async')}, "
          f"TMA copies {ptx.count('cp.async.bulk.tensor')}", flush=True)
    pathlib.Path("stages/_chain_x_bound.py").unlink()


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import _layer_chain_gluon, layer_chain

    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [(w(H, H), layer_chain.pair_rows(w(2 * I, H)), w(H, I), w(Q, H)) for _ in range(L + 1)]
    state = layer_chain.words(dev)
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    kernels = {"the committed chain": _layer_chain_gluon, "no activation ring (timing only)": variant()}

    def use(kern):
        sys.modules["stages._layer_chain_gluon"] = kern
        import stages
        stages._layer_chain_gluon = kern

    def chain_all():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = layer_chain.chain(attn, x, o, gu, d, layers[i_ + 1][3], EPS, state)
        return x

    for name, kern in kernels.items():
        use(kern)
        chain_all()
    torch.cuda.synchronize()
    for rnd in range(3):
        for name, kern in kernels.items():
            use(kern)
            print(f"round {rnd} {name:34} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)
    use(_layer_chain_gluon)
    print(f"spins that gave up {int(state[0])}", flush=True)
    pathlib.Path("stages/_chain_x_bound.py").unlink()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
