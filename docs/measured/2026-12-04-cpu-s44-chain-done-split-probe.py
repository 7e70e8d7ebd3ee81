"""What in the chain's count at the end of a product costs (2026-12-04, session s44; written on the CPU box, compiled
there for sm_90 with Triton 3.6). The last session's bound (`…-s43-chain-done-bound.log`): `_done` as a relaxed add
with no proxy fence (timing only, wrong synchronisation) is 1.7 µs a layer faster (34.5 against 36.2). `_done` does
two things: every consumer thread fences its stores against the async proxy, then one release add. The readers
(the activation warps, whose TMA copies read those stores) already fence the async proxy after their acquire
(`_wait_counter`), which is where the PTX memory model wants a proxy fence: between the acquire that makes the
generic-proxy stores visible and the async-proxy reads. So the writer's fence may be redundant. Variants:
- no writer fence: the release add alone (a correct synchronisation if the reader-side fence suffices): outputs
  compared bitwise after 28 layers, spins that gave up counted;
- relaxed, with the fence (timing only: which of the two costs).
28 layers of yue2-3b shapes at 32 rows, µs per layer in a CUDA graph, three rounds.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s44-chain-done-split-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variants for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
OLD = """    gl.thread_barrier()                     # every thread's stores are issued before the release
    _asm_zero(i, "fence.proxy.async.global;")
    gl.atomic_add(counter, 1, sem="release", scope="gpu")
"""
NEW = {
    "no_writer_fence": """    gl.thread_barrier()
    gl.atomic_add(counter, 1, sem="release", scope="gpu")
""",
    "relaxed_fenced": """    gl.thread_barrier()
    _asm_zero(i, "fence.proxy.async.global;")
    gl.atomic_add(counter, 1, sem="relaxed", scope="gpu")
""",
}
LABEL = {"no_writer_fence": "release, no writer proxy fence", "relaxed_fenced": "relaxed + fence (timing only)"}


def variant(name):
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    assert text.count(OLD) == 1
    pathlib.Path(f"stages/_chain_done_{name}.py").write_text(text.replace(OLD, NEW[name]))
    return importlib.import_module(f"stages._chain_done_{name}")


def cleanup():
    for name in NEW:
        pathlib.Path(f"stages/_chain_done_{name}.py").unlink(missing_ok=True)


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from stages import layer_chain
    t = layer_chain.TILING

    def d(rows):
        return f"tensordesc<bf16[{rows}, {t.bk}],{gl.NVMMASharedLayout.get_default_for([rows, t.bk], gl.bfloat16)!r}>"
    sig = {"wo": d(t.bn_o), "wgu": d(2 * t.bn_gu), "wd": d(t.bn_d), "wq": d(t.bn_q), "xa": d(32), "xh": d(32),
           "xg": d(32), "xn": d(32), "a_res": "*bf16", "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16",
           "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32",
           "eps": "fp32"}
    const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
                 XSTAGES=t.xstages, G=132, NEXT=True, EARLY=True)
    try:
        for name in NEW:
            k = triton.compile(GluonASTSource(variant(name).layer_chain, {**sig, **{c: "constexpr" for c in const}},
                                              const, {}),
                               target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": 4, "launch_pdl": True, "maxnreg": t.maxnreg})
            ptx = k.asm["ptx"]
            print(f"{name:16} shared {k.metadata.shared // 1024} KB, release atomics {ptx.count('.release')}, "
                  f"proxy fences {ptx.count('fence.proxy.async')}", flush=True)
    finally:
        cleanup()


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
    try:
        kernels = {"the committed chain": _layer_chain_gluon, **{LABEL[n]: variant(n) for n in NEW}}

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
        same = torch.equal(outs["the committed chain"], outs[LABEL["no_writer_fence"]])
        print(f"no writer fence: same bits after 28 layers {same}; spins that gave up {int(state[0])}", flush=True)
        for rnd in range(3):
            for name, kern in kernels.items():
                use(kern)
                print(f"round {rnd} {name:32} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)
        use(kernels[LABEL["no_writer_fence"]])
        for _ in range(200):
            again = chain_all()
        print(f"no writer fence after 200 more passes: same bits {torch.equal(again, outs['the committed chain'])}; "
              f"spins that gave up {int(state[0])}", flush=True)
        use(_layer_chain_gluon)
    finally:
        cleanup()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
