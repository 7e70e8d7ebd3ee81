"""The layer chain without its end-of-launch count: one set of product counters per layer, each launch zeroing the set
the layer before it used (2026-12-04, session s43; written on the CPU box for the next session's device time,
compiled there for sm_90 with Triton 3.6).
Why: today every program of a chain, once all its warps are past their last wait, adds one to a fifth counter with
acq_rel semantics, and the last one to leave sets the five counters back to zero for the next launch. That is an L2
round trip at the end of every program, and the grid — which the split-attention kernel after it waits for — ends
only once the last program's atomic and its five exchanges are done: ~1 µs a layer on the step's critical path, if
nothing hides it. The chain after a layer cannot start before that layer's chain has ended (the attention kernels
between them wait for it, and let the next launch only after their own wait; without them, the chain's own consumer
waits for the kernel before), so a launch may zero the counters its predecessor used, early and off the critical
path, and use a set of its own that its predecessor zeroed. With a set per layer and layer i zeroing set i − 1 (mod
the layers), that holds across steps for any layer count. Here the variant (program 0's signal warp zeroes the
other set after its wait for the kernel before; no count at the end) against the committed kernel: 28 layers of
yue2-3b shapes at 32 rows, µs per layer in a CUDA graph, three rounds; the outputs compared bitwise (the same MMAs:
the same bits), and the spins that gave up counted (a set left unzeroed would show there as timeouts, not as wrong
numbers). In the engine the op would pass each layer its set and its predecessor's (`words` sized by the layers).
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s43-chain-counter-sets-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
EDITS = [
    ("""def signal_warp(counter, err, sq_h,""", """def signal_warp(counter, other, err, sq_h,"""),
    ("""    _wait_kernel_before(G * 0)
    _wait_counter(counter, err, G)
    _factor(sq_h, fac_h, M, eps, H, H // BN_O)""",
     """    _wait_kernel_before(G * 0)
    if gl.program_id(0) == 0:       # the layer before's set: its launch has ended, the next one's has not begun
        for p in gl.static_range(4):
            gl.atomic_xchg(other + p, 0, sem="relaxed", scope="gpu")
    _wait_counter(counter, err, G)
    _factor(sq_h, fac_h, M, eps, H, H // BN_O)"""),
    ("""def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, err, M, eps,""",
     """def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, other, err, M,
                eps,"""),
    ("""        (signal_warp, (counter, err, sq_h,""", """        (signal_warp, (counter, other, err, sq_h,"""),
    ("""    # every warp of this program is past its last wait: count that, and the last program to leave resets the
    # counters for the next launch (no program can still be waiting on one then)
    old = gl.atomic_add(counter + 4, 1, sem="acq_rel", scope="gpu")
    if old == G - 1:
        for p in gl.static_range(5):
            gl.atomic_xchg(counter + p, 0, sem="relaxed", scope="gpu")
""", ""),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_sets.py").write_text(text)
    return importlib.import_module("stages._chain_sets")


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
           "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32", "counter": "*i32", "other": "*i32", "err": "*i32",
           "M": "i32", "eps": "fp32"}
    const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
                 XSTAGES=t.xstages, G=132, NEXT=True, EARLY=True)
    k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const, {}),
                       target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "launch_pdl": True, "maxnreg": t.maxnreg})
    ptx = k.asm["ptx"]
    print(f"shared {k.metadata.shared // 1024} KB, atom.exch {ptx.count('atom.relaxed.gpu.global.exch')}"
          f" / {ptx.count('exch')}, acq_rel adds {ptx.count('atom.acq_rel')}", flush=True)
    pathlib.Path("stages/_chain_sets.py").unlink()


def launch(kern, attn, x, o, gate_up, down, qkv, counter, other, err):
    """`layer_chain._launch` for the variant: the same buffers and descriptors; this layer's set and the one before's."""
    from stages import layer_chain
    t = layer_chain.TILING
    m, hidden = x.shape
    inter, q_rows = down.shape[1], qkv.shape[0]
    h_out, g_out, x_out = (x.new_empty(m, n) for n in (hidden, inter, hidden))
    q_out = x.new_empty(m, q_rows)
    sq_h = torch.empty(hidden // t.bn_o, layer_chain.ROWS, dtype=torch.float32, device=x.device)
    sq_x = torch.empty(hidden // t.bn_d, layer_chain.ROWS, dtype=torch.float32, device=x.device)
    d = layer_chain._descriptor
    wo, wgu, wd, wq = (d(o, t.bn_o, t.bk, True), d(gate_up, 2 * t.bn_gu, t.bk, True), d(down, t.bn_d, t.bk, True),
                       d(qkv, t.bn_q, t.bk, True))
    xa, xh, xg, xn = (d(v, layer_chain.ROWS, t.bk) for v in (attn, h_out, g_out, x_out))
    programs = torch.cuda.get_device_properties(x.device).multi_processor_count
    kern.layer_chain[(programs,)](
        wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, other, err, m, EPS,
        H=hidden, I=inter, Q=q_rows, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
        XSTAGES=t.xstages, G=programs, NEXT=True, EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl,
        maxnreg=t.maxnreg)
    return x_out, q_out


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import layer_chain

    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [(w(H, H), layer_chain.pair_rows(w(2 * I, H)), w(H, I), w(Q, H)) for _ in range(L + 1)]
    state = layer_chain.words(dev)
    sets = torch.zeros(1 + 4 * L, dtype=torch.int32, device=dev)     # [0]: spins that gave up; then a set a layer
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    kern = variant()

    def committed():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = layer_chain.chain(attn, x, o, gu, d, layers[i_ + 1][3], EPS, state)
        return x

    def per_layer_sets():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            mine, before = 1 + 4 * i_, 1 + 4 * ((i_ - 1) % L)
            x, _q = launch(kern, attn, x, o, gu, d, layers[i_ + 1][3], sets[mine:mine + 4], sets[before:before + 4],
                           sets[0:1])
        return x

    a, b = committed().clone(), per_layer_sets().clone()
    print(f"same bits after 28 layers: {torch.equal(a, b)}; spins that gave up {int(state[0])} / {int(sets[0])}",
          flush=True)
    for rnd in range(3):
        for name, fn in (("the committed chain", committed), ("a counter set a layer", per_layer_sets)):
            print(f"round {rnd} {name:24} {_time_graph(fn) / L * 1e6:6.2f} µs per layer", flush=True)
    again = per_layer_sets()
    print(f"after the timed replays: same bits {torch.equal(a, again)}; spins that gave up {int(state[0])} / "
          f"{int(sets[0])}", flush=True)
    pathlib.Path("stages/_chain_sets.py").unlink()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
