"""The layer chain's weight warp asking the L2 for its next tile ahead of its TMA copies (2026-12-04, session s43;
written on the CPU box, compiled there for sm_90 with Triton 3.6). Why: a program's weight tile is one contiguous
run of rows (16 or 32 rows × all of K: 64-192 KB), and its copies into the ring are 8 KB apiece; with 8 ring slots
the stream keeps 64 KB in flight a program, which at DRAM latency under load may be less than the consumer could
take. Here the weight warp issues `cp.async.bulk.prefetch.L2` (one lane) for the program's next tile of each product
as it starts a tile, and for the first tile of the next product as it starts a product, so the ring's copies find
their bytes in L2. The same copies and MMAs in the same order: the same bits. 28 layers of yue2-3b shapes at 32
rows, µs per layer in a CUDA graph, three rounds; then whether the outputs are the same bits.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s43-chain-l2-prefetch-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
PREFETCH = '''@gluon.jit
def _prefetch(ptr, nbytes):
    """Lane 0 asks the L2 for [ptr, ptr + nbytes) (contiguous, 16-byte multiples); nothing waits for it."""
    return gl.inline_asm_elementwise(
        "{ .reg .pred p; .reg .b32 l; mov.u32 l, %laneid; setp.eq.u32 p, l, 0; "
        "@p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
        "=r,l,r", [ptr, nbytes], dtype=gl.int32, is_pure=False, pack=1)


@gluon.jit
def _first(wp, pid, N: gl.constexpr, K: gl.constexpr, ROWS_W: gl.constexpr, BN: gl.constexpr):
    if pid < N // BN:
        _prefetch(wp + pid * ROWS_W * K, pid * 0 + ROWS_W * K * 2)


# ---- the weight warp -------------------------------------------------------------------------------------------
'''
EDITS = [
    ("# ---- the weight warp -------------------------------------------------------------------------------------------\n",
     PREFETCH),
    ("def _weights(desc, ring, full, empty, i, pid,", "def _weights(desc, wp, ring, full, empty, i, pid,"),
    ("""    for tile in range(pid, N // BN, G):
        for kk in range(K // BK // PER):
            s = i % STAGES""",
     """    for tile in range(pid, N // BN, G):
        if tile + G < N // BN:
            _prefetch(wp + (tile + G) * ROWS_W * K, pid * 0 + ROWS_W * K * 2)
        for kk in range(K // BK // PER):
            s = i % STAGES"""),
    ("def weight_warp(wo, wgu, wd, wq, ring,", "def weight_warp(wo, wgu, wd, wq, po, pgu, pd, pq, ring,"),
    ("""    i = _weights(wo, ring, full, empty, i, pid, H, H, BN_O, BK, STAGES, G, False)
    i = _weights(wgu, ring, full, empty, i, pid, I, H, BN_GU, BK, STAGES, G, True)
    i = _weights(wd, ring, full, empty, i, pid, H, I, BN_D, BK, STAGES, G, False)
    if NEXT:
        i = _weights(wq, ring, full, empty, i, pid, Q, H, BN_Q, BK, STAGES, G, False)""",
     """    _first(po, pid, H, H, BN_O, BN_O)
    _first(pgu, pid, I, H, 2 * BN_GU, BN_GU)
    i = _weights(wo, po, ring, full, empty, i, pid, H, H, BN_O, BK, STAGES, G, False)
    _first(pd, pid, H, I, BN_D, BN_D)
    i = _weights(wgu, pgu, ring, full, empty, i, pid, I, H, BN_GU, BK, STAGES, G, True)
    if NEXT:
        _first(pq, pid, Q, H, BN_Q, BN_Q)
    i = _weights(wd, pd, ring, full, empty, i, pid, H, I, BN_D, BK, STAGES, G, False)
    if NEXT:
        i = _weights(wq, pq, ring, full, empty, i, pid, Q, H, BN_Q, BK, STAGES, G, False)"""),
    ("def layer_chain(wo, wgu, wd, wq, xa,", "def layer_chain(wo, wgu, wd, wq, po, pgu, pd, pq, xa,"),
    ("        (weight_warp, (wo, wgu, wd, wq, ring,", "        (weight_warp, (wo, wgu, wd, wq, po, pgu, pd, pq, ring,"),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_l2.py").write_text(text)
    return importlib.import_module("stages._chain_l2")


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
    sig = {"wo": d(t.bn_o), "wgu": d(2 * t.bn_gu), "wd": d(t.bn_d), "wq": d(t.bn_q), "po": "*bf16", "pgu": "*bf16",
           "pd": "*bf16", "pq": "*bf16", "xa": d(32), "xh": d(32), "xg": d(32), "xn": d(32), "a_res": "*bf16",
           "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16", "q_out": "*bf16", "sq_h": "*fp32", "sq_x": "*fp32",
           "counter": "*i32", "err": "*i32", "M": "i32", "eps": "fp32"}
    const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
                 XSTAGES=t.xstages, G=132, NEXT=True, EARLY=True)
    k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const, {}),
                       target=GPUTarget("cuda", 90, 32),
                       options={"num_warps": 4, "launch_pdl": True, "maxnreg": t.maxnreg})
    ptx = k.asm["ptx"]
    print(f"shared {k.metadata.shared // 1024} KB, L2 prefetches {ptx.count('cp.async.bulk.prefetch.L2')}",
          flush=True)
    pathlib.Path("stages/_chain_l2.py").unlink()


def launch(kern, attn, x, o, gate_up, down, qkv, state):
    """`layer_chain._launch` for the variant: the same buffers and descriptors, the weights' pointers added."""
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
        wo, wgu, wd, wq, o, gate_up, down, qkv, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out, sq_h, sq_x,
        state[1:6], state[0:1], m, EPS, H=hidden, I=inter, Q=q_rows, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d,
        BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, XSTAGES=t.xstages, G=programs, NEXT=True, EARLY=t.early_weights,
        num_warps=4, launch_pdl=t.pdl, maxnreg=t.maxnreg)
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
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    kern = variant()

    def committed():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = layer_chain.chain(attn, x, o, gu, d, layers[i_ + 1][3], EPS, state)
        return x

    def prefetching():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = launch(kern, attn, x, o, gu, d, layers[i_ + 1][3], state)
        return x

    a, b = committed().clone(), prefetching().clone()
    print(f"same bits after 28 layers: {torch.equal(a, b)}; spins that gave up {int(state[0])}", flush=True)
    for rnd in range(3):
        for name, fn in (("the committed chain", committed), ("next tile into L2 ahead", prefetching)):
            print(f"round {rnd} {name:26} {_time_graph(fn) / L * 1e6:6.2f} µs per layer", flush=True)
    print(f"spins that gave up {int(state[0])}", flush=True)
    pathlib.Path("stages/_chain_l2.py").unlink()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
