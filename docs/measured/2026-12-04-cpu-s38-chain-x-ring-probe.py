"""A deeper activation ring for the layer chain in less shared memory (2026-12-04, session s38; written on the CPU
box and compiled there for sm_90 with Triton 3.6; not yet run — for the next session's GPU time).
Why: measured from inside (`…-s38-chain-consumer-clock-probe.py`), the chain's consumer waits ~6 µs a layer for
activation slots in the middle of tiles: 6 slots of x k-tiles do not keep ahead of it. Each slot is [64, BK] because
the warpgroup MMA's M is 64, and only rows 0-31 carry the step's rows. Here each 64-row slot holds two k-tiles, in
rows 0-31 and 32-63. The MMA for the first reads the slot as it is (its rows 32-63, the second k-tile, give garbage
in accumulator rows that are never stored). The MMA for the second reads a 64-row view starting at row 32 — still the
slot's two 64-column halves, which sit 8 KB apart in a 64-row slot as the view expects, then garbage from the slot
after (one spare slot at the end). s35's 32-row slots did this wrongly: their halves sat 4 KB apart, and their bits
differed. XSTAGES k-tiles take XSTAGES / 2 + 1 slots, so 12 k-tiles fit in 112 KB where 6 took 96. Expected: the
same bits as the committed chain (the same MMAs on the same rows 0-31).
The variant is the committed kernel with source edits. 28 layers of yue2-3b shapes at 32 rows, µs per layer in a
CUDA graph for the committed chain and each (weight slots, x k-tiles) setting, two rounds; whether the outputs are
the committed chain's bits.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s38-chain-x-ring-probe.py
`--compile-only` (Triton 3.6, any box): compiles each setting for sm_90 and prints its shared memory."""
import dataclasses
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
SETTINGS = [(12, 6), (12, 10), (12, 12), (10, 14), (14, 8)]    # (weight slots, x k-tiles: even)
EDITS = [
    ("""    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 64, BK],
""", """    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES // 2 + 1, 64, BK],
"""),
    ("""    zero: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    for s in gl.static_range(XSTAGES):      # rows 32-63 stay zero: TMA fills rows 0-31 only
        xs.index(s).store(gl.zeros([64, BK], gl.bfloat16, zero))
    fence_async_shared()
""", """    fence_async_shared()
"""),
    ("""            tma.async_copy_global_to_shared(desc, [0, k * BK], xfull.index(s), xs.index(s).slice(0, ROWS))
""", """            if s % 2 == 0:
                tma.async_copy_global_to_shared(desc, [0, k * BK], xfull.index(s), xs.index(s // 2).slice(0, ROWS))
            else:
                tma.async_copy_global_to_shared(desc, [0, k * BK], xfull.index(s),
                                                xs.index(s // 2).slice(ROWS, ROWS))
"""),
    ("""            acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
""", """            if xsl % 2 == 0:
                acc = warpgroup_mma(xs.index(xsl // 2), ring.index(s).slice(u * W, W).permute((1, 0)), acc,
                                    is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            else:
                upper = xs.index(xsl // 2).slice(32, 32)._reinterpret(gl.bfloat16, [64, xs.shape[2]], xs.layout)
                acc = warpgroup_mma(upper, ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
                acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
"""),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old[:80]
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_x_ring.py").write_text(text)
    return importlib.import_module("stages._chain_x_ring")


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from stages import layer_chain
    t = layer_chain.TILING
    try:
        kern = variant()

        def d(rows):
            layout = gl.NVMMASharedLayout.get_default_for([rows, t.bk], gl.bfloat16)
            return f"tensordesc<bf16[{rows}, {t.bk}],{layout!r}>"
        sig = {"wo": d(t.bn_o), "wgu": d(2 * t.bn_gu), "wd": d(t.bn_d), "wq": d(t.bn_q), "xa": d(32), "xh": d(32),
               "xg": d(32), "xn": d(32), "a_res": "*bf16", "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16",
               "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32",
               "eps": "fp32"}
        for stages, xstages in SETTINGS:
            const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk,
                         STAGES=stages, XSTAGES=xstages, G=132, NEXT=True, EARLY=True)
            k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const,
                                              {}), target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": 4, "launch_pdl": True})
            print(f"{stages} weight / {xstages} x slots: shared {k.metadata.shared // 1024} KB, "
                  f"wgmma {k.asm['ptx'].count('wgmma.mma_async')}", flush=True)
    finally:
        pathlib.Path("stages/_chain_x_ring.py").unlink(missing_ok=True)


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
    base = layer_chain.TILING

    def use(kern, tiling):
        import stages
        sys.modules["stages._layer_chain_gluon"] = stages._layer_chain_gluon = kern
        layer_chain.TILING = tiling

    def chain_all():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = layer_chain.chain(attn, x, o, gu, d, layers[i_ + 1][3], EPS, state)
        return x

    try:
        kern = variant()
        cases = [("committed, 12 weight / 6 x slots", _layer_chain_gluon, base)] + [
            (f"{s} weight slots / {x} x k-tiles, two a slot", kern, dataclasses.replace(base, stages=s, xstages=x))
            for s, x in SETTINGS]
        use(_layer_chain_gluon, base)
        want = chain_all().clone()
        for name, k, tiling in cases[1:]:
            use(k, tiling)
            got = chain_all()
            torch.cuda.synchronize()
            print(f"{name}: the committed chain's bits {torch.equal(got, want)}; spins that gave up {int(state[0])}",
                  flush=True)
        for rnd in range(2):
            for name, k, tiling in cases:
                use(k, tiling)
                print(f"round {rnd} {name:36} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)
    finally:
        use(_layer_chain_gluon, base)
        pathlib.Path("stages/_chain_x_ring.py").unlink(missing_ok=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
