"""The split-KV attention kernel resident beside the layer chain (2026-12-04, session s42; written on the CPU box).
Why: compiled for sm_90 with Triton 3.6 (`--compile` here), the layer chain takes 193.1 KB of shared memory and
255 registers a thread (the compiler's `.maxnreg 256` for a warp-specialised kernel: 8 warps x 256 = the whole
register file), so no program of another kernel fits on its SM. The chain lets the next launch begin at its start
(programmatic dependent launch), but the split kernel's programs (38.9 KB at STAGES <= 4, 71.7 KB at 6; 117-120
registers) can only land as the chain's programs leave, and so can only begin their work after the chain is done,
one launch at a time. With the chain at `maxnreg` 128 (no spills: cuobjdump says stack 0) and 11 weight slots
(189.6 KB), a split program at depth 4 fits beside it (registers 32,768 + 15,360; shared 190.6 + 39.9 KB of 228),
already resident when the chain finishes; with 8 weight and 5 activation slots one at depth 6 fits too. Ring depths,
register caps and the pipeline depth change no sum, so every variant must draw the same ids (checked). Optionally
the attention kernels are asked to prefer shared memory (a small kernel gets no carve-out preference from Triton).
Each an AREngine with CUDA graphs, built, measured and freed in turn; ms per step, two rounds.
Run from the repository root after `farm init-checkpoint out/ck --config yue2-3b --device cuda`:
python docs/measured/2026-12-04-cpu-s42-corresident-attention-probe.py [--compile] [--sweep | --release]"""
import ctypes
import dataclasses
import gc
import pathlib
import sys
import time

sys.path.insert(0, ".")

# name: (chain weight slots, activation slots, chain maxnreg, attention STAGES, attention prefers shared memory)
VARIANTS = {"tree (12/6 slots, 256 regs; depth 6)": (12, 6, None, 6, False),
            "12/6, 128 regs; depth 6": (12, 6, 128, 6, False),
            "12/6, 256 regs; depth 4": (12, 6, None, 4, False),
            "11/6, 128 regs; depth 4 (fits beside)": (11, 6, 128, 4, False),
            "11/6, 128 regs; depth 4, prefer shared": (11, 6, 128, 4, True),
            "8/5, 128 regs; depth 6 (fits beside)": (8, 5, 128, 6, False)}
# --sweep (the second call): the slot division and register cap once a split program fits beside the chain
SWEEP = {"tree (12/6 slots, 256 regs; depth 6)": (12, 6, None, 6, False),
         "8/5, 128 regs; depth 6": (8, 5, 128, 6, False),
         "9/5, 128 regs; depth 6": (9, 5, 128, 6, False),
         "10/4, 128 regs; depth 6": (10, 4, 128, 6, False),
         "12/3, 128 regs; depth 6": (12, 3, 128, 6, False),
         "6/4, 128 regs; depth 8": (6, 4, 128, 8, False),
         "8/5, 168 regs; depth 6": (8, 5, 168, 6, False)}
# --release (the third call, on the kept tiling): the attention kernels let the next launch begin before they wait
# for the kernel before (`paged_attention.RELEASE`), so the next chain's programs can land, and stream weights,
# beside the split programs: the kept chain leaves room for both. Measured level; the knob (commit ff64250) was
# taken out again, so this mode needs that commit's kernels
RELEASE = {"kept (8/5, 168 regs; depth 6)": (8, 5, 168, 6, False),
           "kept + release before the wait": (8, 5, 168, 6, False)}
RELEASING = {"kept + release before the wait"}
if "--sweep" in sys.argv:
    VARIANTS = SWEEP
if "--release" in sys.argv:
    VARIANTS = RELEASE
CASES = (("prompt-450", 450, "plan", 1), ("plan-ref", 2720, "plan", 1), ("plan-ref", 2720, "plan", 12),
         ("semantic-ref", 7680, "semantic", 1), ("semantic-ref", 7680, "semantic", 2),
         ("semantic-ref", 7680, "semantic", 12), ("semantic-ref", 7680, "semantic", 24))
LOADED: list = []        # (kernel name, CUfunction) of every Triton kernel this process loaded
PREFER = [False]


def _prefer(function: int, on: bool) -> None:
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuFuncSetCacheConfig(ctypes.c_void_p(function), 2 if on else 0)   # CU_FUNC_CACHE_PREFER_SHARED / NONE


def _attention(name: str) -> bool:
    return "split_kv_attention" in name or "merge_and_store" in name


def _loaded(module, function, name, *_):
    LOADED.append((name, function))
    if _attention(name):
        _prefer(function, PREFER[0])


def compile_only() -> None:
    import re

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from stages import _layer_chain_gluon as kern
    from stages import layer_chain

    def resources(cubin):
        import os
        import subprocess
        import tempfile
        tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(cubin)
            f.flush()
            out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
        return " ".join(re.findall(r"REG:\d+|STACK:\d+", out))
    t = layer_chain.TILING

    def d(rows):
        return f"tensordesc<bf16[{rows}, {t.bk}],{gl.NVMMASharedLayout.get_default_for([rows, t.bk], gl.bfloat16)!r}>"
    sig = {"wo": d(t.bn_o), "wgu": d(2 * t.bn_gu), "wd": d(t.bn_d), "wq": d(t.bn_q), "xa": d(32), "xh": d(32),
           "xg": d(32), "xn": d(32), "a_res": "*bf16", "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16",
           "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "err": "*i32", "M": "i32",
           "eps": "fp32"}
    for name, (stages, xstages, maxnreg, _, _) in VARIANTS.items():
        const = dict(H=2048, I=6144, Q=4096, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk,
                     STAGES=stages, XSTAGES=xstages, G=132, NEXT=True, EARLY=True)
        opts = {"num_warps": 4, "launch_pdl": True, **({"maxnreg": maxnreg} if maxnreg else {})}
        k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const, {}),
                           target=GPUTarget("cuda", 90, 32), options=opts)
        print(f"chain of {name}: shared {k.metadata.shared} B, {resources(k.asm['cubin'])}, "
              f"{k.metadata.num_warps} warps", flush=True)


def main() -> None:
    import torch
    import triton

    from farm.bench.ar import _measure, bench_request, copy_rate, weight_bytes
    from stages import layer_chain
    from stages import paged_attention as pa
    from stages.ar import AREngine
    from stages.kv_cache import token_bytes
    from stages.requests import open_checkpoint
    from stages.transformer import AR, HEAD
    from stages.weights import load_model

    triton.knobs.runtime.kernel_load_end_hook.add(_loaded)
    ckpt = open_checkpoint(pathlib.Path("out/ck/model"), pathlib.Path("out/ck/vae"))
    cfg = ckpt.cfg
    net = load_model(ckpt.model_dir, cfg, {AR, HEAD}, device="cuda")
    rate = copy_rate(torch, "cuda")
    kv_token = token_bytes(cfg.model, torch.bfloat16)
    tree = layer_chain.TILING
    results, ids = {}, {}
    for rnd in range(2):
        for name, (stages, xstages, maxnreg, depth, prefer) in VARIANTS.items():
            layer_chain.TILING = dataclasses.replace(tree, stages=stages, xstages=xstages, maxnreg=maxnreg)
            pa.STAGES = depth
            pa.RELEASE = name in RELEASING
            PREFER[0] = prefer
            for kname, fn in LOADED:
                if _attention(kname):
                    _prefer(fn, prefer)
            t = time.perf_counter()
            engine = AREngine(net, cfg.tokens, kv_tokens=24 * (7680 + 12 * 16 + 64), cuda_graphs=True,
                              compile=True)
            wbytes = weight_bytes(engine)
            if rnd == 0:
                probe = [bench_request(cfg, "bits-sem", 3000, "semantic", 96, 7),
                         bench_request(cfg, "bits-plan", 900, "plan", 96, 8)]
                ids[name] = {r.key: list(r.ids) for r in engine.generate(probe)}
            for case, ctx, kind, rows in CASES:
                ms = _measure(engine, cfg, case, ctx, kind, rows, 8, wbytes, kv_token, rate)["step_ms"]
                results.setdefault((case, rows), {}).setdefault(name, []).append(ms)
            del engine
            gc.collect()
            torch.cuda.empty_cache()
            print(f"round {rnd} {name}: {time.perf_counter() - t:.1f} s", flush=True)
    first = next(iter(VARIANTS))
    for name in VARIANTS:
        print(f"ids of {name} == {first}: {ids[name] == ids[first]}", flush=True)
    print("ms per step, rounds 0 / 1")
    for (case, rows), by in results.items():
        print(f"{case} rows {rows}: " + "; ".join(f"{n} {a:.3f}/{b:.3f}" for n, (a, b) in by.items()), flush=True)
    layer_chain.TILING, pa.STAGES, pa.RELEASE = tree, 6, False


if __name__ == "__main__":
    compile_only() if "--compile" in sys.argv else main()
