"""Where the layer chain's consumer warpgroup spends a layer (2026-12-04, session s38; written on the CPU box,
compiled there for sm_90 with Triton 3.6). Why: the chain's weight walk alone streams 22.0 µs a layer, the chain
takes ~37, and neither fewer handshakes (k-tiles of 256), a second consumer, two MMAs in flight nor activations in
registers made it faster (docs/benchmarks.md, 2026-12-03 and 2026-12-04), so what the consumer waits for is measured
here instead of guessed: the committed kernel with SM clock reads (`%clock64`) around the consumer's three waits per
k-tile — the weight slot (`full`), the activation slot (`xfull`), the MMA before (`warpgroup_mma_wait`) — summed per
program and added to a global table once per tile, and the consumer's whole time from its start (after the wait for
the kernel before) to its end; the rest is epilogues, grid waits and bookkeeping. 28 layers of yue2-3b shapes at 32
rows, each layer its own launch as in the engine; printed per layer, mean and max over the 132 programs, in µs at
the clock measured from the same reads against the launch's wall time; and the instrumented chain's µs per layer
against the committed one's (the reads' own cost).
The edit strings are the committed kernel's lines verbatim (commit 336c6ea), hence their length.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s38-chain-consumer-clock-probe.py
`--compile-only` (Triton 3.6, any box): compiles the variant for sm_90."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
WORDS = 8       # per program: weight waits, x waits, MMA waits, consumer total (cycles), consumer total (ns),
#                 the epilogues' waits for the signal warp, the consumer's own grid wait, x waits at a tile's start

CLOCK = '''

@gluon.jit
def _clock(v):
    """The SM's cycle counter (v only gives the asm a shape)."""
    return gl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l,r", [v], dtype=gl.int64, is_pure=False, pack=1)


@gluon.jit
def _nanoseconds(v):
    """The GPU's global timer, ns (v only gives the asm a shape)."""
    return gl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [v], dtype=gl.int64, is_pure=False,
                                     pack=1)


@gluon.jit
def _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, acc, prof, W: gl.constexpr, PER: gl.constexpr,
              SLOTS: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr):
    tf = _clock(i) * 0
    tx = tf
    tm = tf
    t0 = tf
    for kk in range(SLOTS):
        si = i + kk
        s = si % STAGES
        c0 = _clock(si)
        mbarrier.wait(full.index(s), (si // STAGES) & 1)
        c1 = _clock(si)
        tf += c1 - c0
        for u in gl.static_range(PER):
            xj = j + kk * PER + u
            xsl = xj % XSTAGES
            c2 = _clock(xj)
            mbarrier.wait(xfull.index(xsl), (xj // XSTAGES) & 1)
            c3 = _clock(xj)
            tx += c3 - c2
            if u == 0:
                t0 += (c3 - c2) * (kk == 0).to(gl.int64)
            acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            c4 = _clock(xj)
            tm += c4 - c3
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    c5 = _clock(i)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    tm += _clock(i) - c5
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    gl.atomic_add(prof + 0, tf, sem="relaxed")
    gl.atomic_add(prof + 1, tx, sem="relaxed")
    gl.atomic_add(prof + 2, tm, sem="relaxed")
    gl.atomic_add(prof + 7, t0, sem="relaxed")
    return acc


@gluon.jit
def _tile_mma_committed(xs, xfull, xempty, ring, full, empty, i, j, acc, W: gl.constexpr, PER: gl.constexpr,
              SLOTS: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr):'''

EDITS = [
    ('''

@gluon.jit
def _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, acc, W: gl.constexpr, PER: gl.constexpr,
              SLOTS: gl.constexpr, STAGES: gl.constexpr, XSTAGES: gl.constexpr):''', CLOCK),
    ('''def _product(xs, xfull, xempty, ring, full, empty, i, j, pid, out_ptr, res_ptr, sq_out, ready, fac, M,''',
     '''def _product(xs, xfull, xempty, ring, full, empty, i, j, pid, out_ptr, res_ptr, sq_out, ready, fac, M, prof,'''),
    ('''        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), W, PER,''',
     '''        acc = _tile_mma(xs, xfull, xempty, ring, full, empty, i, j, gl.zeros([64, W], gl.float32, mma), prof, W,
                        PER,'''),
    ('''             counter, err, M, pid, H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr,''',
     '''             counter, err, M, pid, prof, H: gl.constexpr, I: gl.constexpr, Q: gl.constexpr, BN_O: gl.constexpr,'''),
    ('''    _asm_zero(i, "griddepcontrol.launch_dependents;")  # the kernel after may launch (it waits for this one)
''', '''    _asm_zero(i, "griddepcontrol.launch_dependents;")  # the kernel after may launch (it waits for this one)
    prof = prof + pid * 8
    start = _clock(pid)
    start_ns = _nanoseconds(pid)
'''),
    ('ready.index(0), fac_h, M,\n', 'ready.index(0), fac_h, M, prof,\n'),
    ('ready.index(1), fac_h, M,\n', 'ready.index(1), fac_h, M, prof,\n'),
    ('ready.index(2), fac_x, M,\n', 'ready.index(2), fac_x, M, prof,\n'),
    ('''ready.index(3), fac_x,
                        M, Q,''', '''ready.index(3), fac_x,
                        M, prof, Q,'''),
    ('''        _done(counter + 3, i)
''', '''        _done(counter + 3, i)
    gl.atomic_add(prof + 3, _clock(pid) - start, sem="relaxed")
    gl.atomic_add(prof + 4, _nanoseconds(pid) - start_ns, sem="relaxed")
'''),
    ('''def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, err, M, eps,''',
     '''def layer_chain(wo, wgu, wd, wq, xa, xh, xg, xn, a_res, h_out, g_out, x_out, q_out, sq_h, sq_x, counter, err, M, eps,
                prof,'''),
    ('''                    sq_x, counter, err, M, pid, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, XSTAGES, G, NEXT)),''',
     '''                    sq_x, counter, err, M, pid, prof, H, I, Q, BN_O, BN_GU, BN_D, BN_Q, BK, STAGES, XSTAGES, G,
                    NEXT)),'''),
    ('''        if WAIT:
            mbarrier.wait(ready, 0)
''', '''        if WAIT:
            c_r = _clock(i)
            mbarrier.wait(ready, 0)
            gl.atomic_add(prof + 5, _clock(i) - c_r, sem="relaxed")
'''),
    ('''    _wait_counter(counter + 1, err, G)      # the down epilogue reads other programs' o output with plain loads
''', '''    c_g = _clock(pid)
    _wait_counter(counter + 1, err, G)      # the down epilogue reads other programs' o output with plain loads
    gl.atomic_add(prof + 6, _clock(pid) - c_g, sem="relaxed")
'''),
]


def variant():
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    for old, new in EDITS:
        assert text.count(old) == 1, old[:80]
        text = text.replace(old, new)
    pathlib.Path("stages/_chain_clock.py").write_text(text)
    return importlib.import_module("stages._chain_clock")


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
               "eps": "fp32", "prof": "*i64"}
        const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk,
                     STAGES=t.stages, XSTAGES=t.xstages, G=132, NEXT=True, EARLY=True)
        k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const, {}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "launch_pdl": True})
        ptx = k.asm["ptx"]
        print(f"shared {k.metadata.shared // 1024} KB, clock reads {ptx.count('%clock64')}, "
              f"wgmma {ptx.count('wgmma.mma_async')}", flush=True)
    finally:
        pathlib.Path("stages/_chain_clock.py").unlink(missing_ok=True)


def launch(kern, attn, x, o, gate_up, down, qkv, state, prof):
    """layer_chain._launch with the variant's extra argument (its clock table)."""
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
                           state[0:1], m, EPS, prof, H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d,
                           BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, XSTAGES=t.xstages, G=g, NEXT=True,
                           EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl)
    return x_out, q_out


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import layer_chain

    torch.manual_seed(0)
    dev = torch.device("cuda")
    g = layer_chain._programs(dev)

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [(w(H, H), layer_chain.pair_rows(w(2 * I, H)), w(H, I), w(Q, H)) for _ in range(L + 1)]
    state = layer_chain.words(dev)
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    prof = torch.zeros(L, g, WORDS, dtype=torch.int64, device=dev)
    try:
        kern = variant()

        def committed():
            x = x0
            for i_ in range(L):
                o, gu, d, _ = layers[i_]
                x, _q = layer_chain.chain(attn, x, o, gu, d, layers[i_ + 1][3], EPS, state)
            return x

        def clocked():
            x = x0
            for i_ in range(L):
                o, gu, d, _ = layers[i_]
                x, _q = launch(kern, attn, x, o, gu, d, layers[i_ + 1][3], state, prof[i_])
            return x

        same = torch.equal(committed(), clocked())
        for rnd in range(2):
            for name, fn in (("committed", committed), ("with the clock reads", clocked)):
                print(f"round {rnd} {name:22} {_time_graph(fn) / L * 1e6:6.2f} µs per layer", flush=True)
        prof.zero_()
        torch.cuda.synchronize()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        t0.record()
        clocked()
        t1.record()
        torch.cuda.synchronize()
        wall_us = t0.elapsed_time(t1) * 1e3
        p = prof.double().cpu()
        ghz = (p[:, :, 3].sum() / p[:, :, 4].sum()).item()         # the consumers' cycles per ns: the SM clock
        print(f"same bits as the committed chain: {same}; one pass {wall_us:.1f} µs wall ({wall_us / L:.2f} a layer);"
              f" SM clock {ghz:.3f} GHz (cycles over the global timer's ns); spins that gave up {int(state[0])}",
              flush=True)
        us = p / (ghz * 1e3)
        us[:, :, 4] = us[:, :, 3] - us[:, :, [0, 1, 2, 5, 6]].sum(-1)     # what is left: epilogues, the loop
        names = {0: "weight-slot waits", 1: "x-slot waits", 7: "  of which at a tile's first k-tile", 2: "MMA waits",
                 5: "epilogues' waits for the signal warp", 6: "the consumer's grid wait (before down)",
                 4: "the rest (epilogues, loop, clock reads)", 3: "consumer total"}
        print("µs per layer, mean over programs (max) — layers 0, 1, 14, 27 and the mean over 28:", flush=True)
        for k, n in names.items():
            cells = "  ".join(f"{us[layer, :, k].mean():6.2f} ({us[layer, :, k].max():6.2f})"
                              for layer in (0, 1, 14, 27))
            print(f"  {n:40} {cells}   mean {us[:, :, k].mean():6.2f}", flush=True)
    finally:
        pathlib.Path("stages/_chain_clock.py").unlink(missing_ok=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
