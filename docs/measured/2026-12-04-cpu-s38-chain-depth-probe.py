"""The layer chain's consumer with two MMAs in flight instead of one (2026-12-04, session s38; written on the CPU box,
compiled there for sm_90 with Triton 3.6). Why: with its slots freed at once the chain's own weight walk streams
22.0 µs a layer (`…-s38-tma-stream.log`) against ~37 for the chain, so the consumer warpgroup sets the pace; it waits
for each MMA's predecessor (`warpgroup_mma_wait(num_outstanding=1)`) before it frees that MMA's slots and takes the
next k-tile. Here `_tile_mma` lets two MMAs run behind the one just issued and frees each slot two MMAs later (the
same MMAs in the same order: the same bits). 28 layers of yue2-3b shapes at 32 rows, µs per layer in a CUDA graph,
the committed kernel and the variant, three rounds; then whether their outputs are the same bits.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s38-chain-depth-probe.py"""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
OLD = '''            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            # the MMA before this one is done: its x slot is free, and its weight slot if it was that slot's last
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return acc'''
NEW = '''            acc = warpgroup_mma_wait(num_outstanding=2, deps=(acc, ))
            # the MMA two before this one is done: its x slot is free, and its weight slot if it was that slot's last
            mbarrier.arrive(xempty.index((xj + XSTAGES - 2) % XSTAGES), pred=kk * PER + u >= 2)
            if PER == 1:
                mbarrier.arrive(empty.index((si + STAGES - 2) % STAGES), pred=kk >= 2)
            elif u == PER - 1:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk >= 1)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    if PER == 1:
        mbarrier.arrive(empty.index((i + SLOTS - 2) % STAGES))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 2) % XSTAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return acc'''


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    assert OLD in text
    pathlib.Path("stages/_chain_depth2.py").write_text(text.replace(OLD, NEW))
    return importlib.import_module("stages._chain_depth2")


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
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "launch_pdl": True})
    ptx = k.asm["ptx"]
    print(f"shared {k.metadata.shared // 1024} KB, wgmma {ptx.count('wgmma.mma_async')}, "
          f"wait_group 2: {ptx.count('wgmma.wait_group.sync.aligned 2')}", flush=True)
    pathlib.Path("stages/_chain_depth2.py").unlink()


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
    kernels = {"one MMA in flight (committed)": _layer_chain_gluon, "two MMAs in flight": variant()}

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

    outs = {}
    for name, kern in kernels.items():
        use(kern)
        outs[name] = chain_all().clone()
    use(_layer_chain_gluon)
    a, b = outs.values()
    print(f"same bits after 28 layers: {torch.equal(a, b)} (max abs {(a.float() - b.float()).abs().max().item():.3e}); "
          f"spins that gave up {int(state[0])}", flush=True)
    for rnd in range(3):
        for name, kern in kernels.items():
            use(kern)
            print(f"round {rnd} {name:30} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)
    use(_layer_chain_gluon)
    print(f"spins that gave up {int(state[0])}", flush=True)
    pathlib.Path("stages/_chain_depth2.py").unlink()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
