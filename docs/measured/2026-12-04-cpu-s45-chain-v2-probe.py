"""The layer chain with the weights as the warpgroup MMA's M and K split over programs, in BF16 or with FP8 W8A16
weights widened in registers, against today's chain (2026-12-04, session s45; written on the CPU box, where no device
was lent; not run).
The kernel is `stages/_layer_chain_v2_gluon.py` of `…-cpu-s45-chain-v2-engine.patch` (its docstring says what it
changes against today's chain and why), so this probe runs on the tree with that patch applied, and since s46 (before
the probe ever ran) with `…-cpu-s46-chain-w8a16-engine.patch` on top: both formats through the engine's launches
(`layer_chain._launch(..., swapped=True)`, `layer_chain_w8a16._launch`), the FP8 weights laid out by the engine's
helpers (`layer_chain_w8a16`): e4m3 values and per-row scales from `quant.quantize_fp8`, gate/up rows paired in
blocks of 8, every 128-wide k-tile's columns permuted into the MMA's A-fragment order, the RMSNorm weights before
gate/up and q/k/v permuted alike.
What it runs: 28 layers of yue2-3b shapes at 32 rows, random weights; today's chain, and this chain in BF16 and in
FP8, each with K in 4/1/4/2 parts (o, gate/up, down, q/k/v), in 2/1/2/1 (half the fix-ups, but o, down and
q/k/v on 64 programs: the pair prices the fix-ups), whole (no fix-ups) and 4/2/4/2 (gate/up balanced over the
programs; the last two added in s46); each against FP32 of its own weights (max and mean abs of the 28th layer's
output and q/k/v), row 0 run alone against row 0 of the 32 (the same bits: batch invariance),
repeatability, counters back at zero, spins that gave up; then µs per layer in a CUDA graph, three rounds. A kernel
that has not finished 20 s after its first launch is called a hang and the probe leaves.
Run on an H200 from the repository root, the patches applied (`…-cpu-s45-device-plan.sh v2` applies them to a
copy):
python docs/measured/2026-12-04-cpu-s45-chain-v2-probe.py
`--compile-only` (Triton 3.6, any box, the patches applied): compiles every setting for sm_90, prints shared memory
and registers."""
import functools
import importlib.util
import pathlib
import sys

import torch
from triton.experimental.gluon import language as gl

sys.path.insert(0, ".")
try:
    from stages import _layer_chain_v2_gluon as v2k  # noqa: E402
except ImportError as e:
    raise SystemExit(f"{e}: apply docs/measured/2026-12-04-cpu-s45-chain-v2-engine.patch and "
                     "docs/measured/2026-12-05-cpu-s46-chain-w8a16-engine.patch first") from None


def _stream_probe():
    path = pathlib.Path(__file__).with_name("2026-12-04-cpu-s45-fp8-swap-stream-probe.py")
    spec = importlib.util.spec_from_file_location("s45_fp8_swap_stream", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


FP8_PROBE = _stream_probe()          # its hang guard
H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
SPLITS = (4, 1, 4, 2)      # K parts of o, gate/up, down, q/k/v (the patch's SWAPPED)
FEWER = (2, 1, 2, 1)       # half the fix-ups, and o, down and q/k/v on 64 programs
# no fix-ups: o and down on 32 programs, q/k/v on 64, the others' weight warps filling their rings with the next
# product's tiles meanwhile (added in s46, before the probe ever ran)
NONE = (1, 1, 1, 1)
# gate/up split too: its 192 tiles leave 60 of 132 programs a second tile; 384 halves are 2.9 a program (added in s46)
BALANCED = (4, 2, 4, 2)


def _const(g, fp8, nxt=True, splits=SPLITS):
    return dict(H=H, I=I, Q=Q, **dict(zip(("SPLIT_O", "SPLIT_GU", "SPLIT_D", "SPLIT_Q"), splits)), STAGES=7,
                XSTAGES=4, G=g, NEXT=nxt, FP8=fp8)


def compile_only() -> None:
    import re
    import subprocess
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    ptxas = pathlib.Path(triton.__file__).parent / "backends/nvidia/bin/ptxas"
    for fp8, splits in ((fp8, s) for s in (SPLITS, FEWER, NONE, BALANCED) for fp8 in (False, True)):
        wt = "fp8e4nv" if fp8 else "bf16"
        wl = gl.NVMMASharedLayout.get_default_for([64, 128], gl.float8e4nv if fp8 else gl.bfloat16)
        xl = gl.NVMMASharedLayout.get_default_for([32, 128], gl.bfloat16)
        const = _const(132, fp8, splits=splits)
        sig = {**{w: f"tensordesc<{wt}[64, 128],{wl!r}>" for w in ("wo", "wgu", "wd", "wq")},
               **{x: f"tensordesc<bf16[32, 128],{xl!r}>" for x in ("xa", "xh", "xg", "xn")},
               **{p: "*bf16" for p in ("a_res", "h_out", "g_out", "x_out", "q_out", "nw_h", "nw_x")},
               **{p: "*fp32" for p in ("sq_h", "sq_x", "parts", "s_o", "s_gu", "s_d", "s_q")},
               "tcount": "*i32", "counter": "*i32", "err": "*i32", "M": "i32", "eps": "fp32",
               **{c: "constexpr" for c in const}}
        k = triton.compile(GluonASTSource(v2k.layer_chain_v2, sig, const, {}), target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": 4, "launch_pdl": True, "maxnreg": 168})
        with tempfile.TemporaryDirectory() as tmp:
            src = pathlib.Path(tmp) / "k.ptx"
            src.write_text(k.asm["ptx"])
            info = subprocess.run([str(ptxas), "-arch=sm_90a", "-v", str(src), "-o", str(src.with_suffix(".cubin"))],
                                  capture_output=True, text=True).stderr
        facts = [line.split(":", 1)[-1].strip() for line in info.splitlines()
                 if re.search(r"registers|spill|wgmma", line)]
        print(f"{'fp8' if fp8 else 'bf16'}, K parts {splits}: shared {k.metadata.shared // 1024} KB, wgmma "
              f"{k.asm['ptx'].count('wgmma.mma_async')}; {facts}", flush=True)


def main() -> None:
    from dataclasses import replace

    from farm.bench.ar import _time_graph
    from stages import layer_chain, layer_chain_w8a16 as w8a16, quant

    torch.manual_seed(0)
    dev = torch.device("cuda")
    g = torch.cuda.get_device_properties(dev).multi_processor_count
    runs = {(fp8, s): layer_chain.supported(dev, H, I, Q, replace(layer_chain.SWAPPED, splits=s), fp8=fp8)
            for fp8 in (False, True) for s in (SPLITS, FEWER, NONE, BALANCED)}
    print(f"{torch.cuda.get_device_name()}, {g} programs; the swapped kernel runs here (else the settings time the "
          f"torch reference): {runs}", flush=True)

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    # per layer: o, [gate; up], down, q/k/v unfolded, and the two norm weights (gate/up's, the next q/k/v's)
    raw = [(w(H, H), w(2 * I, H), w(H, I), w(Q, H), (1 + 0.1 * torch.randn(H, device=dev)).bfloat16(),
            (1 + 0.1 * torch.randn(H, device=dev)).bfloat16()) for _ in range(L + 1)]
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()

    def folded(lay, nxt):       # the BF16 chains' weights: norms folded into gate/up and q/k/v, as the engine does
        o, gu, dn, _, nw_gu, _ = lay
        return o, (gu * nw_gu).bfloat16(), dn, (nxt[3] * nxt[5]).bfloat16()
    bf16_layers = [folded(raw[n], raw[n + 1]) for n in range(L)]
    fp8_layers = []
    for n in range(L):
        o, gu, dn, _, nw_gu, _ = raw[n]
        qkv, nw_q = raw[n + 1][3], raw[n + 1][5]
        fp8_layers.append([quant.quantize_fp8(m) for m in (o, gu, dn, qkv)] + [nw_gu, nw_q])

    def rms(v):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + EPS)

    def reference_fp32(layers_fp32):
        """FP32 of the chain's maths over given FP32 weights (o, gate/up, down, q/k/v, with the norms folded in):
        the 28th layer's output beside its q/k/v."""
        x = x0.float()
        for o, gu, dn, qkv in layers_fp32:
            h = attn.float() @ o.T + x
            gate, up = (rms(h) @ gu.T).chunk(2, dim=-1)
            x = (torch.nn.functional.silu(gate) * up) @ dn.T + h
        return torch.cat([x, rms(x) @ qkv.T], dim=1)
    want_bf16 = reference_fp32([tuple(m.float() for m in lay) for lay in bf16_layers])
    want_fp8 = reference_fp32([((v_o.float() * s_o[:, None]), (v_gu.float() * s_gu[:, None]) * nw_gu.float(),
                                (v_d.float() * s_d[:, None]), (v_q.float() * s_q[:, None]) * nw_q.float())
                               for (v_o, s_o), (v_gu, s_gu), (v_d, s_d), (v_q, s_q), nw_gu, nw_q in fp8_layers])
    state, v2_state = layer_chain.words(dev), layer_chain.words(dev)     # today's chain's; this chain's
    bf16_v2 = [(o, layer_chain.pair_rows(gu, 8), dn, qkv) for o, gu, dn, qkv in bf16_layers]
    fp8_v2 = []
    for o, gu, dn, qkv, nw_gu, nw_q in fp8_layers:     # as the engine stores them (step_weights.for_chain, fp8)
        mats = [(w8a16.permute_columns(v), s) for v, s in (o, w8a16.pair_rows(gu, 8), dn, qkv)]
        fp8_v2.append([t for m in mats for t in m] + [w8a16.permute_columns(nw_gu), w8a16.permute_columns(nw_q)])

    def v2_layer(fp8, splits, n, a, x):     # the engine's launches of the patched tree
        tiling = replace(layer_chain.SWAPPED, splits=splits)
        if fp8:
            return w8a16._launch(a, x, *fp8_v2[n], EPS, v2_state, tiling)
        return layer_chain._launch(a, x, *bf16_v2[n], EPS, v2_state, tiling, swapped=True)

    def run(step, rows=32):
        def all_layers():
            x = x0[:rows]
            for n in range(L):
                x, q = step(n, attn[:rows], x)
            return torch.cat([x, q], dim=1)
        return all_layers
    paired = [(o, layer_chain.pair_rows(gu), dn, qkv) for o, gu, dn, qkv in bf16_layers]

    def today(n, a, x):
        return layer_chain.chain(a, x, *paired[n], EPS, state)

    steps = {"today's chain (bf16)": (today, want_bf16)}
    for fp8, fmt in ((False, "bf16"), (True, "fp8 W8A16")):
        for splits in (SPLITS, FEWER, NONE, BALANCED):
            steps[f"v2, K parts {'/'.join(map(str, splits))} ({fmt})"] = (
                functools.partial(v2_layer, fp8, splits), want_fp8 if fp8 else want_bf16)
    kernels = {name: run(step) for name, (step, _) in steps.items()}
    for name, (step, want) in steps.items():
        try:
            first = kernels[name]().clone()
            FP8_PROBE.finish_or_exit(name)
            again = kernels[name]()
            alone = run(step, rows=1)()
            FP8_PROBE.finish_or_exit(name)
        except Exception as e:  # noqa: BLE001 - a kernel that fails says so and the rest run
            print(f"{name}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            continue
        d = (first.float() - want).abs()
        print(f"{name:34} the 28th layer's output and q/k/v vs FP32 of its weights: max abs {d.max().item():.4f}, "
              f"mean abs {d.mean().item():.5f}; repeatable {torch.equal(first, again)}; row 0 alone the same bits "
              f"{torch.equal(alone[0], first[0])}; spins that gave up "
              f"{int(state[0])} / {int(v2_state[0])}; every counter back at zero {not v2_state[1:].any().item()}",
              flush=True)
    for rnd in range(3):
        for name, fn in kernels.items():
            try:
                print(f"round {rnd} {name:34} {_time_graph(fn) / L * 1e6:6.2f} µs per layer", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"round {rnd} {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
