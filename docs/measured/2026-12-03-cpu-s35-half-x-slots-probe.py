"""The layer chain with activation slots of 32 rows, not 64 (2026-12-03, session s35; written on the CPU box, run
on an H200 the same session). Why: the warpgroup MMA's M is 64, so each activation slot holds 64 rows of which the
32 past the step's slots are zeros — half of the activation ring's 96 KB. But an accumulator row depends only on
its own A row, and rows 32-63 are never stored (every epilogue masks rows ≥ M ≤ 32). So the MMA may read its A
tile from a 64-row view that starts at the slot's 32 rows and runs on into whatever lies after (the next slot, or
one spare slot after the last): those rows give garbage in accumulator rows nobody reads. The ring's slots are then
8 KB at BK 128, and the 48 KB saved deepen the weight ring (s29's stream probe: more slots in flight, a faster
stream), or at BK 256 (half the handshakes, level before only because the ring held as few bytes) hold more slots
of both. The same bits in rows 0-31 as the chain as it is (checked here).
Variants by substitution of `stages/_layer_chain_gluon.py` (at commit c7b2d6b), imported from a temporary file.
Kernel level (28 layers of random yue2-3b weights, 32 rows, µs per layer in a CUDA graph), then the engine's steps
(one plan row at 450 keys, 24 semantic rows at 7,680) with the best two against the default.
Run from the repository root: python docs/measured/2026-12-03-cpu-s35-half-x-slots-probe.py [--engine]
`--compile-only` (Triton 3.6, any box): compiles each variant for sm_90 and prints its shared memory."""
import importlib.util
import pathlib
import sys
import tempfile
from dataclasses import replace

sys.path.insert(0, ".")

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6
SOURCE = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
SUBS = [
    ("""    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES, 64, BK],
                                   gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16))
""", """    xs = gl.allocate_shared_memory(gl.bfloat16, [XSTAGES + 1, 32, BK],
                                   gl.NVMMASharedLayout.get_default_for([32, BK], gl.bfloat16))
"""),
    ("""    zero: gl.constexpr = gl.BlockedLayout([1, 8], [2, 16], [4, 1], [1, 0])
    for s in gl.static_range(XSTAGES):      # rows 32-63 stay zero: TMA fills rows 0-31 only
        xs.index(s).store(gl.zeros([64, BK], gl.bfloat16, zero))
    fence_async_shared()
""", "    fence_async_shared()\n"),
    ("""                acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(u * W, W).permute((1, 0)), acc,
                                    is_async=True)
""", """                a64 = xs.index(xsl)._reinterpret(gl.bfloat16, [64, BK],
                                                 gl.NVMMASharedLayout.get_default_for([64, BK], gl.bfloat16))
                acc = warpgroup_mma(a64, ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
"""),
]
# (stages, xstages, bk): 192 KB of ring each (weight slot 8 KB · bk/128, activation slot 8 KB · bk/128, one spare)
CONFIGS = {"17/6 at 128": (17, 6, 128), "15/8 at 128": (15, 8, 128), "19/4 at 128": (19, 4, 128),
           "9/2 at 256": (9, 2, 256), "8/3 at 256": (8, 3, 256)}


def variant():
    src = SOURCE
    for old, new in SUBS:
        assert old in src, old
        src = src.replace(old, new)
    path = pathlib.Path(tempfile.mkdtemp()) / "chain_half_x.py"
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
    for name, (stages, xstages, bk) in CONFIGS.items():
        def d(rows):
            return f"tensordesc<bf16[{rows}, {bk}],{gl.NVMMASharedLayout.get_default_for([rows, bk], gl.bfloat16)!r}>"
        sig = {"wo": d(16), "wgu": d(32), "wd": d(16), "wq": d(32), "xa": d(32), "xh": d(32), "xg": d(32),
               "xn": d(32), "a_res": "*bf16", "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16", "q_out": "*bf16",
               "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32", "eps": "fp32"}
        const = dict(H=H, I=I, Q=Q, BN_O=16, BN_GU=16, BN_D=16, BN_Q=32, BK=bk, STAGES=stages, XSTAGES=xstages,
                     G=132, NEXT=True, EARLY=True)
        sig.update({k: "constexpr" for k in const})
        k = triton.compile(GluonASTSource(kern.layer_chain, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4, "launch_pdl": True})
        ptx = k.asm["ptx"]
        print(f"{name}: triton {triton.__version__}: shared {k.metadata.shared // 1024} KB, wgmma "
              f"{ptx.count('wgmma.mma_async')}, tma {ptx.count('cp.async.bulk.tensor')}", flush=True)


def use(mod) -> None:
    import stages
    sys.modules["stages._layer_chain_gluon"] = stages._layer_chain_gluon = mod


def kernel_level(kern, base):
    import torch
    from farm.bench.ar import _time_graph
    from stages import layer_chain
    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [dict(o=w(H, H), gu=layer_chain.pair_rows(w(2 * I, H)), d=w(H, I), q=w(Q, H)) for _ in range(L + 1)]
    a = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    state = layer_chain.words(dev)
    tilings = {"as is": base} | {n: replace(base, stages=s, xstages=x, bk=k) for n, (s, x, k) in CONFIGS.items()}

    def fn(t):
        def call(a, x, lay, nxt):
            return layer_chain._launch(a, x, lay["o"], lay["gu"], lay["d"], nxt["q"], EPS, state, t)
        return call
    from stages import _layer_chain_gluon as original
    use(original)
    ref = fn(base)(a, x0, layers[0], layers[1])
    use(kern)
    for n, t in tilings.items():
        if n == "as is":
            continue
        got = fn(t)(a, x0, layers[0], layers[1])
        torch.cuda.synchronize()
        same = all(torch.equal(p, q) for p, q in zip(ref, got))
        print(f"{n}: the same bits as the chain as it is {same}; spins that gave up {int(state[0])}", flush=True)
    nbytes = sum(layers[0][k].numel() * 2 for k in ("o", "gu", "d", "q"))
    for rnd in range(2):
        for n, t in tilings.items():
            use(original if n == "as is" else kern)
            call = fn(t)

            def run():
                x = x0
                for layer in range(L):
                    x, _ = call(a, x, layers[layer], layers[layer + 1])
            us = _time_graph(run) / L * 1e6
            print(f"round {rnd} {n}: {us:.2f} µs per layer ({nbytes / us / 1e6:.2f} TB/s); spins that gave up "
                  f"{int(state[0])}", flush=True)
    use(original)


def engine_level(kern, base, names):
    import torch
    from farm.bench.ar import _measure, copy_rate, weight_bytes
    from stages import layer_chain
    from stages.ar import AREngine
    from stages.kv_cache import token_bytes
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD
    from stages.weights import load_model
    from stages import _layer_chain_gluon as original
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    engines, mods = {}, {}
    for n in ["as is"] + names:
        mods[n] = original if n == "as is" else kern
        use(mods[n])
        s, x, k = CONFIGS.get(n, (base.stages, base.xstages, base.bk))
        layer_chain.TILING = replace(base, stages=s, xstages=x, bk=k)  # the engine's graphs keep what they captured
        engines[n] = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True, compile=True)
    layer_chain.TILING = base
    wbytes = weight_bytes(engines["as is"])
    for rnd in range(2):
        for case, ctx, kind, rows in (("prompt-450", 450, "plan", 1), ("semantic-ref", 7680, "semantic", 24)):
            ms = {}
            for n, e in engines.items():
                use(mods[n])
                ms[n] = _measure(e, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)
            print(f"round {rnd} {case} rows {rows}: " + "; ".join(
                f"{n} {r['step_ms']:.3f} ms (× floor {r['floor_ratio']:.2f})" for n, r in ms.items()), flush=True)
    use(original)


if __name__ == "__main__":
    if "--compile-only" in sys.argv:
        compile_only()
    else:
        from stages import layer_chain
        kern = variant()
        kernel_level(kern, layer_chain.TILING)
        if "--engine" in sys.argv:
            pick = [a for a in sys.argv[1:] if a in CONFIGS] or ["17/6 at 128", "8/3 at 256"]
            engine_level(kern, layer_chain.TILING, pick)
