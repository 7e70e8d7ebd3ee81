"""The layer chain with its activations read straight into the MMA's A registers (2026-12-04, session s38; written on
the CPU box, compiled there for sm_90 with Triton 3.6). Why: the chain's own weight walk streams 22.0 µs a layer when
its slots are freed at once (`…-s38-tma-stream.log`), the chain takes ~37, and its consumer warpgroup sets that pace:
per layer a program waits on ~96 weight slots and ~128 activation slots, and every MMA reads a 64-row activation tile
from shared memory of which 32 rows are padding. Here the consumer loads each x k-tile from global memory (L2: the
product before wrote it) into registers two k-tiles ahead (k-tiles 0 and 1 once per product), so the activation
ring, its handshakes and the padded tiles' shared-memory reads go; each MMA waits for itself (no MMA in flight
behind the next load). Before the gate/up and q/k/v products the consumer waits for the grid counter itself.
The variant is the committed kernel with source edits (below); the same MMAs in the same order, so the same bits
are expected. 28 layers of yue2-3b shapes at 32 rows: the outputs of both kernels compared, then µs per layer in a
CUDA graph, three rounds.
The edit strings below are the committed kernel's lines verbatim (commit 336c6ea), hence their length.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s38-chain-register-x-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
OLD_TILE = '''@gluon.jit
def _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, acc, W: gl.constexpr, PER: gl.constexpr,
              SLOTS: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr):'''
NEW_TILE = '''@gluon.jit
def _x_tile(x_ptr, M, n, K: gl.constexpr, BK: gl.constexpr, W: gl.constexpr):
    """x's k-tile n, rows 0-63 (those past M zero), straight from global memory (L2) into the MMA's A registers."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1], instr_shape=[16, W, 16])
    dot: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    r = gl.arange(0, 64, layout=gl.SliceLayout(1, dot))
    c = gl.max_contiguous(gl.multiple_of(gl.arange(0, BK, layout=gl.SliceLayout(0, dot)), 2), 2)
    live = (r < M)[:, None] & (n < K // BK)
    return gl.load(x_ptr + r[:, None] * K + (n * BK + c)[None, :], mask=live, other=0.0, cache_modifier=".cg")


@gluon.jit
def _tile_mma_regs(x_ptr, M, h0, h1, ring, full, empty, i, acc, W: gl.constexpr, PER: gl.constexpr,
                   SLOTS: gl.constexpr, STAGES: gl.constexpr, K: gl.constexpr, BK: gl.constexpr):
    """acc += x · Wᵀ with x's k-tiles loaded into registers two ahead (h0, h1: k-tiles 0 and 1, loaded once per
    product); each weight slot released once its last MMA is done."""
    a0 = h0
    a1 = h1
    for kk in range(SLOTS):
        si = i + kk
        s = si % STAGES
        mbarrier.wait(full.index(s), (si // STAGES) & 1)
        for u in gl.static_range(PER):
            a2 = _x_tile(x_ptr, M, kk * PER + u + 2, K, BK, W)
            acc = warpgroup_mma(a0, ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
            acc, a0 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, a0))
            if u == PER - 1:
                mbarrier.arrive(empty.index(s))
            a0 = a1
            a1 = a2
    return acc


@gluon.jit
def _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, acc, W: gl.constexpr, PER: gl.constexpr,
              SLOTS: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr):'''
OLD_PRODUCT_SIG = '''def _product(xs, xfull, xempty, ring, full, empty, i, j, pid, out_ptr, res_ptr, sq_out, ready, fac, M,'''
NEW_PRODUCT_SIG = '''def _product(x_ptr, xfull, xempty, ring, full, empty, i, j, pid, out_ptr, res_ptr, sq_out, ready, fac, M,'''
OLD_LOOP = '''    for tile in range(pid, N // BN, G):
        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), W, PER,
                        SLOTS, STAGES, XSTAGES)'''
NEW_LOOP = '''    h0 = _x_tile(x_ptr, M, 0, K, BK, W)
    h1 = _x_tile(x_ptr, M, 1, K, BK, W)
    for tile in range(pid, N // BN, G):
        acc = _tile_mma_regs(x_ptr, M, h0, h1, ring, full, empty, i, gl.zeros([64, W], gl.float32, mma), W, PER,
                             SLOTS, STAGES, K, BK)'''
CONSUMER = [
    ('''def consumer(xs, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x,''',
     '''def consumer(a_in, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x,'''),
    ('''    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, h_out, a_res, sq_h, ready.index(0), fac_h, M,''',
     '''    i, j = _product(a_in, xfull, xempty, ring, full, empty, i, j, pid, h_out, a_res, sq_h, ready.index(0), fac_h, M,'''),
    ('''    _done(counter, i)
    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, g_out, g_out, sq_h, ready.index(1), fac_h, M,''',
     '''    _done(counter, i)
    _wait_counter(counter, err, G)          # x is h_out, which every program stored
    i, j = _product(h_out, xfull, xempty, ring, full, empty, i, j, pid, g_out, g_out, sq_h, ready.index(1), fac_h, M,'''),
    ('''    i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, x_out, h_out, sq_x, ready.index(2), fac_x, M,''',
     '''    i, j = _product(g_out, xfull, xempty, ring, full, empty, i, j, pid, x_out, h_out, sq_x, ready.index(2), fac_x, M,'''),
    ('''    if NEXT:
        i, j = _product(xs, xfull, xempty, ring, full, empty, i, j, pid, q_out, q_out, sq_x, ready.index(3), fac_x,''',
     '''    if NEXT:
        _wait_counter(counter + 2, err, G)
        i, j = _product(x_out, xfull, xempty, ring, full, empty, i, j, pid, q_out, q_out, sq_x, ready.index(3), fac_x,'''),
    ('''def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, err, M, eps,''',
     '''def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, err, M, eps, a_in,'''),
    ('''        (consumer, (xs, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, a_res, h_out, g_out, x_out, q_out, sq_h,''',
     '''        (consumer, (a_in, xfull, xempty, ring, full, empty, ready, fac_h, fac_x, a_res, h_out, g_out, x_out, q_out, sq_h,'''),
    # the activation warp copies nothing
    ('''    for tile in range(pid, N // BN, G):
        for k in range(K // BK):
            s = j % XSTAGES
            mbarrier.wait(xempty.index(s), ((j // XSTAGES) & 1) ^ 1)''',
     '''    for tile in range(pid + N // BN, N // BN, G):
        for k in range(K // BK):
            s = j % XSTAGES
            mbarrier.wait(xempty.index(s), ((j // XSTAGES) & 1) ^ 1)'''),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in [(OLD_TILE, NEW_TILE), (OLD_PRODUCT_SIG, NEW_PRODUCT_SIG), (OLD_LOOP, NEW_LOOP)] + CONSUMER:
        assert text.count(old) == 1, old[:80]
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_register_x.py").write_text(text)
    return importlib.import_module("stages._chain_register_x")


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
           "eps": "fp32", "a_in": "*bf16"}
    const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
                 XSTAGES=t.xstages, G=132, NEXT=True, EARLY=True)
    names = list(sig)
    attrs = {(names.index(p),): [["tt.divisibility", 16]] for p in ("a_in", "h_out", "g_out", "x_out")}
    try:
        k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const, attrs),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "launch_pdl": True})
        ptx = k.asm["ptx"]
        print(f"shared {k.metadata.shared // 1024} KB, wgmma {ptx.count('wgmma.mma_async')}, "
              f"ld.global.cg.b32 {ptx.count('ld.global.cg.b32')}, local (spills) {ptx.count('st.local')}", flush=True)
    finally:
        pathlib.Path("stages/_chain_register_x.py").unlink()


def launch(kern, attn, x, o, gate_up, down, qkv, state):
    """layer_chain._launch with the variant's extra argument (the attention output's pointer)."""
    from stages import layer_chain
    t = layer_chain.TILING
    m = x.shape[0]
    e = dict(dtype=x.dtype, device=x.device)
    h_out, g_out, x_out, q_out = (torch.empty(m, n, **e) for n in (H, I, H, Q))
    sq_h, sq_x = (torch.empty(H // 16, 32, dtype=torch.float32, device=x.device) for _ in range(2))
    desc = layer_chain._descriptor
    wo, wgu, wd = desc(o, t.bn_o, t.bk, True), desc(gate_up, 2 * t.bn_gu, t.bk, True), desc(down, t.bn_d, t.bk, True)
    wq = desc(qkv, t.bn_q, t.bk, True)
    xa, xh, xg, xn = (desc(v, 32, t.bk) for v in (attn, h_out, g_out, x_out))
    g = layer_chain._programs(x.device)
    kern.layer_chain[(g,)](wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out, sq_h, sq_x, state[1:6],
                           state[0:1], m, EPS, attn, H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d,
                           BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, XSTAGES=t.xstages, G=g, NEXT=True,
                           EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl)
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

    def registers():
        x = x0
        for i_ in range(L):
            o, gu, d, _ = layers[i_]
            x, _q = launch(kern, attn, x, o, gu, d, layers[i_ + 1][3], state)
        return x

    try:
        a, b = committed().clone(), registers().clone()
        one_a, one_b = (f(attn[:1].contiguous(), x0[:1].contiguous(), *layers[0][:3], layers[1][3], state)[0]
                        for f in (lambda *z: layer_chain.chain(*z[:6], EPS, z[6]), lambda *z: launch(kern, *z)))
        torch.cuda.synchronize()
        gap = (a.float() - b.float()).abs().max().item()
        print(f"same bits after 28 layers: {torch.equal(a, b)} (max abs {gap:.3e}, |x| mean "
              f"{a.float().abs().mean().item():.3f}); one row, one layer: {torch.equal(one_a, one_b)}; "
              f"spins that gave up {int(state[0])}", flush=True)
        for rnd in range(3):
            for name, fn in (("committed (x through the activation ring)", committed),
                             ("x into the MMA's registers", registers)):
                print(f"round {rnd} {name:42} {_time_graph(fn) / L * 1e6:6.2f} µs per layer", flush=True)
        print(f"spins that gave up {int(state[0])}", flush=True)
    finally:
        pathlib.Path("stages/_chain_register_x.py").unlink()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
