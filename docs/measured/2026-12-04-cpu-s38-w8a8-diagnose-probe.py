"""Why the W8A8 layer chain is wrong and slow (2026-12-04, session s38; written on the CPU box after the first GPU run
of `…-s37-w8a8-chain-probe.py`: kernel vs its torch reference mean abs 0.023 on values of ~1.2, not bitwise
repeatable, and 78.4 µs per layer against 37.0 for the BF16 chain and 24.0 for the timing-only FP8 chain).
1. Each product's output (h, g, out, q: the kernel's own intermediates) against the torch reference of that product
   computed from the kernel's own input to it, so a wrong product is named, with the rows and columns it is off in.
2. Ten launches on the same inputs: which intermediates change, where.
3. Variants of the kernel (source edits into a temporary module beside the product's): the converter without the
   norm weight's load, without the staging load, without the store into the MMA's slot, deeper staging; µs per
   layer over 28 layers in a CUDA graph, 32 rows, so the converter's share of the time is measured.
Run on an H200 from the repository root of commit b120a3f's tree (the kernel was removed after this run,
`…-s38-w8a8-diagnose.log`): python docs/measured/2026-12-04-cpu-s38-w8a8-diagnose-probe.py"""
import importlib
import pathlib
import sys

import torch

sys.path.insert(0, ".")

H, I, Q, L, EPS = 2048, 6144, 4096, 28, 1e-6
SRC = pathlib.Path("stages/_layer_chain_w8a8_gluon.py")
VARIANTS = {
    "as built": [],
    "no norm-weight load": [("x = x * gl.load(gamma + k * BK + cols).to(gl.float32)[None, :]", "x = x * 1.0")],
    "no staging load": [("x = st.index(s).load(lay).to(gl.float32)", "x = gl.full([32, BK], 1.0, gl.float32, lay)")],
    "no slot store": [("xs.index(xsl).slice(0, ROWS).store(q)", "q = q")],
    "no load, no store": [("x = st.index(s).load(lay).to(gl.float32)", "x = gl.full([32, BK], 1.0, gl.float32, lay)"),
                          ("xs.index(xsl).slice(0, ROWS).store(q)", "q = q")],
}


def variant(name: str, edits):
    text = SRC.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    mod = f"_w8a8_variant_{abs(hash(name)) % 10**8}"
    pathlib.Path(f"stages/{mod}.py").write_text(text)
    return importlib.import_module(f"stages.{mod}")


def launch(kern, attn, x, lay, nxt, state, sstages=None, programs=None):
    """layer_chain_w8a8._launch with the intermediates returned."""
    from stages import layer_chain, layer_chain_w8a8 as w8
    t = w8.TILING
    m = x.shape[0]
    am_a = torch.linalg.vector_norm(attn, float("inf"), dim=1)
    e = dict(dtype=torch.bfloat16, device=x.device)
    h_out, g_out, x_out, q_out = (torch.empty(m, n, **e) for n in (H, I, H, Q))
    f32 = dict(dtype=torch.float32, device=x.device)
    sq_h, sq_x, am_h, am_x = (torch.empty(H // 16, 32, **f32) for _ in range(4))
    am_g = torch.empty(I // t.bn_gu, 32, **f32)
    d = layer_chain._descriptor
    o, gu, dn = lay["o"], lay["gu"], lay["d"]
    wo, wgu, wd = d(o[0], t.bn_o, t.bk, True), d(gu[0], 2 * t.bn_gu, t.bk, True), d(dn[0], t.bn_d, t.bk, True)
    wq = d(nxt["q"][0], t.bn_q, t.bk, True) if nxt else wo
    xa, xh, xg, xn = (d(v, 32, t.bk) for v in (attn, h_out, g_out, x_out))
    g = programs or layer_chain._programs(x.device)
    kern.w8a8_chain[(g,)](
        wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out, o[1], gu[1], dn[1],
        nxt["q"][1] if nxt else o[1], lay["gamma_post"], nxt["gamma_in"] if nxt else lay["gamma_post"], sq_h, sq_x,
        am_a, am_h, am_g, am_x, state[1:6], state[0:1], m, EPS, H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu,
        BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, SSTAGES=sstages or w8.STAGING, XSTAGES=t.xstages, G=g,
        NEXT=nxt is not None, num_warps=4, launch_pdl=t.pdl)
    return h_out, g_out, x_out, q_out


def per_product(attn, x, lay, nxt, h, g, out):
    """The reference of each product from the kernel's own input to it."""
    from stages.layer_chain_w8a8 import _factor, _product
    bf = x.dtype
    h_r = (_product(attn.float(), lay["o"]).to(bf).float() + x.float()).to(bf)
    gu = _product(h.float() * lay["gamma_post"].float(), lay["gu"], _factor(h, EPS))
    gate = gu[:, 0::2].to(bf).float()
    g_r = ((gate * (1.0 / (1.0 + torch.exp(-gate)))).to(bf).float() * gu[:, 1::2].to(bf).float()).to(bf)
    out_r = (_product(g.float(), lay["d"]).to(bf).float() + h.float()).to(bf)
    q_r = _product(out.float() * nxt["gamma_in"].float(), nxt["q"], _factor(out, EPS)).to(bf)
    return h_r, g_r, out_r, q_r


def where(diff: torch.Tensor) -> str:
    bad = diff > 0
    rows = bad.any(1).nonzero().flatten().tolist()
    cols = bad.any(0).nonzero().flatten()
    return (f"{int(bad.sum())} elements, rows {rows[:12]}{'…' if len(rows) > 12 else ''}, {len(cols)} columns"
            + (f" from {int(cols[0])} to {int(cols[-1])}" if len(cols) else ""))


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import layer_chain, layer_chain_w8a8 as w8
    from stages.quant import quantize_fp8

    torch.manual_seed(0)
    dev = torch.device("cuda")

    def w(n, k):
        return quantize_fp8(torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5)

    def layer():
        return dict(o=w(H, H), gu=w(2 * I, H), d=w(H, I), q=w(Q, H),
                    gamma_post=(1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16),
                    gamma_in=(1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16))
    layers = [layer() for _ in range(L + 1)]
    state = layer_chain.words(dev)
    attn = torch.randn(32, H, device=dev).bfloat16()
    x0 = torch.randn(32, H, device=dev).bfloat16()
    base = variant("as built", [])
    names = ("h (o)", "g (gate/up)", "out (down)", "q (next q/k/v)")

    for m, programs in ((32, None), (1, None), (32, 16)):
        a, x = attn[:m].contiguous(), x0[:m].contiguous()
        got = launch(base, a, x, layers[0], layers[1], state, programs=programs)
        refs = per_product(a, x, layers[0], layers[1], *got[:3])
        torch.cuda.synchronize()
        print(f"-- {m} rows, {programs or 132} programs: each product against its reference from the kernel's own "
              f"input (spins that gave up {int(state[0])})", flush=True)
        for n, k_, r in zip(names, got, refs):
            diff = (k_.float() - r.float()).abs()
            rel = diff / r.float().abs().clamp(min=1e-3)
            print(f"  {n:16} max abs {diff.max().item():.3e} mean {diff.mean().item():.3e} (|ref| mean "
                  f"{r.float().abs().mean().item():.3e}); elements off by > 5 %: {where(rel > 0.05)}", flush=True)
        runs = [launch(base, a, x, layers[0], layers[1], state, programs=programs) for _ in range(10)]
        torch.cuda.synchronize()
        for idx, n in enumerate(names):
            changed = [i for i, r in enumerate(runs) if not torch.equal(r[idx], got[idx])]
            print(f"  {n:16} differs from the first launch in {len(changed)} of 10 launches"
                  + (f"; launch {changed[0]}: {where((runs[changed[0]][idx].float() - got[idx].float()).abs())}"
                     if changed else ""), flush=True)

    print("-- timing, 28 layers in a CUDA graph, 32 rows (µs per layer)", flush=True)
    cases = [(n, variant(n, e), None) for n, e in VARIANTS.items()] + [("as built, staging 4", base, 4)]
    for rnd in range(2):
        for n, kern, sst in cases:
            def run():
                x = x0
                for i_ in range(L):
                    x = launch(kern, attn, x, layers[i_], layers[i_ + 1], state, sstages=sst)[2]
            try:
                print(f"  round {rnd} {n:22} {_time_graph(run) / L * 1e6:7.2f}", flush=True)
            except Exception as e:  # noqa: BLE001 - a variant that does not compile says so and the rest run
                print(f"  round {rnd} {n:22} failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
    print(f"spins that gave up {int(state[0])}", flush=True)
    for p in pathlib.Path("stages").glob("_w8a8_variant_*.py"):
        p.unlink()


if __name__ == "__main__":
    main()
