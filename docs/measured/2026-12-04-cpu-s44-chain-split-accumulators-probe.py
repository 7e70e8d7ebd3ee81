"""The layer chain's consumer with independent accumulators (2026-12-04, session s44; written on the CPU box,
compiled there for sm_90 with Triton 3.6).
Why: every MMA of a tile adds into the one accumulator, so the tile's warpgroup MMAs (8 k16 instructions a k-tile,
N only 16 or 32 wide) form one dependent chain; at so small an N an instruction's work is ~8 cycles while its
latency is several times that, and a second MMA in flight (`…-s38-chain-depth.log`) cannot run beside a
predecessor it depends on. The consumer clock reads (`…-s38-chain-consumer-clock.log`) put ~8 µs of its ~36 a
layer in MMA waits. With two or four accumulators fed alternately the chains are independent; the tile's result
is their sum at the end, in a fixed order — repeatable, a row's numbers its own (batch invariance), but NOT the
committed kernel's bits: the probe prints both kernels' distance from an FP32 computation of the same layer.
Variants of `_tile_mma` (all free the slots exactly as the committed one does):
- halves: each k-tile as two MMAs of K 64, into accumulators a and b;
- interleaved: each k-tile as eight MMAs of K 16, alternately into a and b (instruction-level interleave);
- quarters: each k-tile as four MMAs of K 32 into four accumulators.
28 layers of yue2-3b shapes at 32 rows, µs per layer in a CUDA graph, three rounds; then one layer (at 32 rows and
at 1 row) against FP32.
Run on an H200 from the repository root: python docs/measured/2026-12-04-cpu-s44-chain-split-accumulators-probe.py
`--compile-only` (Triton 3.6, any box): compiles each variant for sm_90 and counts its MMA instructions."""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
OLD = '''            acc = warpgroup_mma(xs.index(xsl), ring.index(s).slice(u * W, W).permute((1, 0)), acc, is_async=True)
            acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
            # the MMA before this one is done: its x slot is free, and its weight slot if it was that slot's last
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return acc'''
NEW = {
    "halves": '''            xv = xs.index(xsl)
            wv = ring.index(s).slice(u * W, W)
            acc = warpgroup_mma(xv.slice(0, 64, 1), wv.slice(0, 64, 1).permute((1, 0)), acc, is_async=True)
            acc_b = warpgroup_mma(xv.slice(64, 64, 1), wv.slice(64, 64, 1).permute((1, 0)), acc_b, is_async=True)
            acc, acc_b = warpgroup_mma_wait(num_outstanding=2, deps=(acc, acc_b))
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    acc, acc_b = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_b))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return acc + acc_b''',
    "interleaved": '''            xv = xs.index(xsl)
            wv = ring.index(s).slice(u * W, W)
            for h in gl.static_range(4):
                acc = warpgroup_mma(xv.slice(32 * h, 16, 1), wv.slice(32 * h, 16, 1).permute((1, 0)), acc,
                                    is_async=True)
                acc_b = warpgroup_mma(xv.slice(32 * h + 16, 16, 1), wv.slice(32 * h + 16, 16, 1).permute((1, 0)),
                                      acc_b, is_async=True)
            acc, acc_b = warpgroup_mma_wait(num_outstanding=8, deps=(acc, acc_b))
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    acc, acc_b = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_b))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return acc + acc_b''',
    "quarters": '''            xv = xs.index(xsl)
            wv = ring.index(s).slice(u * W, W)
            acc = warpgroup_mma(xv.slice(0, 32, 1), wv.slice(0, 32, 1).permute((1, 0)), acc, is_async=True)
            acc_b = warpgroup_mma(xv.slice(32, 32, 1), wv.slice(32, 32, 1).permute((1, 0)), acc_b, is_async=True)
            acc_c = warpgroup_mma(xv.slice(64, 32, 1), wv.slice(64, 32, 1).permute((1, 0)), acc_c, is_async=True)
            acc_d = warpgroup_mma(xv.slice(96, 32, 1), wv.slice(96, 32, 1).permute((1, 0)), acc_d, is_async=True)
            acc, acc_b, acc_c, acc_d = warpgroup_mma_wait(num_outstanding=4, deps=(acc, acc_b, acc_c, acc_d))
            mbarrier.arrive(xempty.index((xj + XSTAGES - 1) % XSTAGES), pred=(kk > 0) | (u > 0))
            if u == 0:
                mbarrier.arrive(empty.index((si + STAGES - 1) % STAGES), pred=kk > 0)
    acc, acc_b, acc_c, acc_d = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc_b, acc_c, acc_d))
    mbarrier.arrive(empty.index((i + SLOTS - 1) % STAGES))
    mbarrier.arrive(xempty.index((j + SLOTS * PER - 1) % XSTAGES))
    return (acc + acc_b) + (acc_c + acc_d)''',
}
START = '''    for kk in range(SLOTS):
        si = i + kk
        s = si % STAGES
        mbarrier.wait(full.index(s), (si // STAGES) & 1)'''
STARTS = {"halves": "    acc_b = gl.zeros_like(acc)\n", "interleaved": "    acc_b = gl.zeros_like(acc)\n",
          "quarters": "    acc_b = gl.zeros_like(acc)\n    acc_c = gl.zeros_like(acc)\n    acc_d = gl.zeros_like(acc)\n"}


def variant(name):
    text = pathlib.Path("stages/_layer_chain_gluon.py").read_text()
    assert text.count(OLD) == 1 and text.count(START) == 1
    text = text.replace(OLD, NEW[name]).replace(START, STARTS[name] + START)
    pathlib.Path(f"stages/_chain_acc_{name}.py").write_text(text)
    return importlib.import_module(f"stages._chain_acc_{name}")


def cleanup():
    for name in NEW:
        pathlib.Path(f"stages/_chain_acc_{name}.py").unlink(missing_ok=True)


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from stages import _layer_chain_gluon, layer_chain
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
        for name, kern in [("committed", _layer_chain_gluon)] + [(n, variant(n)) for n in NEW]:
            k = triton.compile(GluonASTSource(kern.layer_chain, {**sig, **{c: "constexpr" for c in const}}, const,
                                              {}),
                               target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": 4, "launch_pdl": True, "maxnreg": t.maxnreg})
            ptx = k.asm["ptx"]
            print(f"{name:12} shared {k.metadata.shared // 1024} KB, wgmma {ptx.count('wgmma.mma_async')}, "
                  f"wgmma fences {ptx.count('wgmma.fence')}, commits {ptx.count('wgmma.commit_group')}, "
                  f"local memory {ptx.count('.local')}", flush=True)
    finally:
        cleanup()


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import _layer_chain_gluon, layer_chain, skinny_gemm

    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5
    layers = [(w(H, H), layer_chain.pair_rows(w(2 * I, H)), w(H, I), w(Q, H)) for _ in range(L + 1)]
    state = layer_chain.words(dev)
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    try:
        kernels = {"committed": _layer_chain_gluon, **{n: variant(n) for n in NEW}}

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

        def exact(a, x, lay, nxt_q):
            """One layer in FP32 from the same BF16 inputs and weights (no intermediate rounding)."""
            o, gu, d = (t_.float() for t_ in lay[:3])
            h = a.float() @ o.T + x.float()
            hn = h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + EPS)
            g, u = layer_chain.unpair_rows(gu).chunk(2)
            g = hn @ g.T
            gated = g * torch.sigmoid(g) * (hn @ u.T)
            out = gated @ d.T + h
            on = out * torch.rsqrt(out.pow(2).mean(1, keepdim=True) + EPS)
            return out, on @ nxt_q.float().T

        for rows in (32, 1):
            want = exact(attn[:rows], x0[:rows], layers[0], layers[1][3])
            ref = layer_chain.reference(attn[:rows], x0[:rows], *layers[0][:3], layers[1][3], EPS)
            for name, kern in kernels.items():
                use(kern)
                got = layer_chain.chain(attn[:rows], x0[:rows], *layers[0][:3], layers[1][3], EPS, state)
                line = []
                for what, g_, e_ in zip(("out", "q/k/v"), got, want):
                    diff = (g_.float() - e_).abs()
                    line.append(f"{what} max {diff.max().item():.4e} mean {diff.mean().item():.4e}")
                same = all(torch.equal(g_, r_) for g_, r_ in zip(got, ref))
                print(f"{rows:2} rows {name:12} vs FP32: {'; '.join(line)}; == torch reference: {same}", flush=True)
            diff = [(r_.float() - e_).abs() for r_, e_ in zip(ref, want)]
            print(f"{rows:2} rows torch ref     vs FP32: out max {diff[0].max().item():.4e} mean "
                  f"{diff[0].mean().item():.4e}; q/k/v max {diff[1].max().item():.4e} mean {diff[1].mean().item():.4e}",
                  flush=True)
        outs = {}
        for name, kern in kernels.items():
            use(kern)
            outs[name] = chain_all().clone()
            again = chain_all()
            print(f"{name:12} repeatable after 28 layers: {torch.equal(again, outs[name])}; vs committed max abs "
                  f"{(outs[name].float() - outs['committed'].float()).abs().max().item():.4e}", flush=True)
        print(f"spins that gave up {int(state[0])}", flush=True)
        for rnd in range(3):
            for name, kern in kernels.items():
                use(kern)
                print(f"round {rnd} {name:12} {_time_graph(chain_all) / L * 1e6:6.2f} µs per layer", flush=True)
        use(_layer_chain_gluon)
        print(f"spins that gave up {int(state[0])}", flush=True)
    finally:
        cleanup()


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
