"""The layer chain's residual loaded before a tile's MMAs instead of after them (2026-12-04, session s43; written on
the CPU box, compiled there for sm_90 with Triton 3.6). Why: the o and down epilogues add a residual that other
programs (or the kernel before) stored, loaded from L2 (`.cg`) once the tile's MMAs are done, and the consumer
warpgroup — the chain's bottleneck (docs/ar-engine.md) — has nothing else to do during that round trip (~1 µs, a
tile of each a layer per program). Here the load is issued before the tile's MMAs: the values are there before them
(the kernel before wrote the o residual, and the consumer has acquired the gate/up count, which follows every o
tile, before the down product), so the same loads give the same bits. 28 layers of yue2-3b shapes at 32 rows: the
outputs of both kernels compared, then µs per layer in a CUDA graph, three rounds.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s43-chain-early-residual-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
EDITS = [
    ("""    for tile in range(pid, N // BN, G):
        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), W, PER,
                        SLOTS, STAGES, XSTAGES)
        i += SLOTS
        j += SLOTS * PER

        offs = r[:, None] * N + (tile * BN + col)[None, :]
""", """    for tile in range(pid, N // BN, G):
        offs = r[:, None] * N + (tile * BN + col)[None, :]
        if ADD:     # the residual's L2 round trip under the tile's MMAs
            res = gl.load(res_ptr + offs, mask=rows, other=0.0, cache_modifier=".cg")
        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), W, PER,
                        SLOTS, STAGES, XSTAGES)
        i += SLOTS
        j += SLOTS * PER
"""),
    ("""                res = gl.load(res_ptr + offs, mask=rows, other=0.0, cache_modifier=".cg")   # L2: another SM wrote it
""", ""),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_early_res.py").write_text(text)
    return importlib.import_module("stages._chain_early_res")


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
          f"global loads {ptx.count('ld.global')}", flush=True)
    pathlib.Path("stages/_chain_early_res.py").unlink()


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
    kernels = {"the committed chain": _layer_chain_gluon, "residual before the MMAs": variant()}

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

    outs = []
    for name, kern in kernels.items():
        use(kern)
        outs.append(chain_all().clone())
    print(f"same bits after 28 layers: {torch.equal(*outs)}; spins that gave up {int(state[0])}", flush=True)
    for rnd in range(3):
        for name, kern in kernels.items():
            use(kern)
            print(f"round {rnd} {name:34} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)
    use(_layer_chain_gluon)
    print(f"spins that gave up {int(state[0])}", flush=True)
    pathlib.Path("stages/_chain_early_res.py").unlink()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
