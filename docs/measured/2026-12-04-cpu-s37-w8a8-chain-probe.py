"""A W8A8 layer chain: FP8 weights, activations quantised per row inside the kernel (2026-12-04, session s37; written
on the CPU box and compiled there for sm_90 with Triton 3.6; not yet run). The kernel is the product's
(`stages/_layer_chain_w8a8_gluon.py`, `stages/layer_chain_w8a8.py`, written from this probe the same session).
Why: the timing-only FP8 chain (`…-s37-fp8-chain-probe.py`) ran 24.0 µs per layer against 36.8 for BF16 at the
step's 32 rows, but stored its activations straight as FP8 without scales. Here is what a real one does
(docs/ar-engine.md, "FP8 in the layer chain"):
- weights e4m3 with an FP32 scale per output channel (stages/quant.py's fp8); the products' outputs stay BF16 (the
  residual stream, the attention's q/k/v);
- each product's input is quantised per row, dynamically: q = e4m3(u · 448 / amax(u)) with u the input times the
  RMSNorm's weight where a norm comes before (the norm's per-row factor cancels in q and is applied in the epilogue);
- the amax travels as the norms' sums of squares do: every o / gate-up / down tile writes its rows' partial maxima,
  the signal warp takes the max over tiles (order-free: batch-invariant) into shared memory. The first product's
  input, the attention output, has its row maxima computed before the kernel (here by torch; in the engine the
  attention's merge kernel would write them);
- a converter warpgroup takes each BF16 activation k-tile the activation warp copied (TMA, a staging ring), scales
  it, rounds it to e4m3 into the MMA's slot: the consumer's serial chain of handshakes and MMAs does no more work
  than in the timing-only probe;
- the epilogue: acc · (amax / 448) · w_scale[col] (· the norm factor), then the BF16 rounding of the unfused ops.
The probe checks one layer against the op's torch reference (`layer_chain_w8a8.reference`) and against the same
layer with unquantised activations in FP32, rows alone and batched (the same bits), the last layer (no q/k/v), then
times 28 layers (µs per layer in a CUDA graph, 32 rows) against the BF16 chain.
Run on an H200 (2026-12-04, s38: `…-s38-w8a8-chain-probe.log`; wrong and 2.1× slower than BF16, so the kernel was
removed: it runs from commit b120a3f's tree) from the repository root:
python docs/measured/2026-12-04-cpu-s37-w8a8-chain-probe.py
`--compile-only` (Triton 3.6, any box): compiles the kernel for sm_90."""

import sys

import torch

sys.path.insert(0, ".")

L, H, I, Q = 28, 2048, 6144, 4096
EPS = 1e-6


def compile_only() -> None:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    from stages import _layer_chain_w8a8_gluon as kern, layer_chain_w8a8 as w8
    t = w8.TILING

    def d(rows, dt, gdt):
        return f"tensordesc<{dt}[{rows}, {t.bk}],{gl.NVMMASharedLayout.get_default_for([rows, t.bk], gdt)!r}>"
    w16, w32, a16 = (d(16, "fp8e4nv", gl.float8e4nv), d(32, "fp8e4nv", gl.float8e4nv),
                     d(32, "bf16", gl.bfloat16))
    sig = {"wo": w16, "wgu": w32, "wd": w16, "wq": w32, "xa": a16, "xh": a16, "xg": a16, "xn": a16, "a_res": "*bf16",
           "h_out": "*bf16", "g_out": "*bf16", "x_out": "*bf16", "q_out": "*bf16", "so": "*fp32", "sgu": "*fp32",
           "sd": "*fp32", "sq_": "*fp32", "gamma_post": "*bf16", "gamma_in": "*bf16", "sq_h": "*fp32",
           "sq_x": "*fp32", "am_a": "*bf16", "am_h": "*fp32", "am_g": "*fp32", "am_x": "*fp32", "counter": "*i32",
           "err": "*i32", "M": "i32", "eps": "fp32"}
    for nxt in (True, False):
        const = dict(H=H, I=I, Q=Q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages,
                     SSTAGES=w8.STAGING, XSTAGES=t.xstages, G=132, NEXT=nxt)
        k = triton.compile(GluonASTSource(kern.w8a8_chain, {**sig, **{c: "constexpr" for c in const}}, const, {}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 4, "launch_pdl": True})
        ptx = k.asm["ptx"]
        print(f"triton {triton.__version__}, NEXT={nxt}: shared {k.metadata.shared // 1024} KB, wgmma "
              f"{ptx.count('wgmma.mma_async')} ({ptx.count('e4m3.e4m3')} e4m3), tma "
              f"{ptx.count('cp.async.bulk.tensor')}, cvt to e4m3 {ptx.count('e4m3x2')}", flush=True)


def exact(attn, x, lay, nxt, eps=EPS):
    """The same layer with unquantised activations, in FP32, over the e4m3 weights' own values: what quantising the
    activations moves."""
    def w(name, layer):
        values, scale = layer[name]
        return values.float() * scale[:, None]
    h = attn.float() @ w("o", lay).T + x.float()
    hn = h * torch.rsqrt(h.pow(2).mean(1, keepdim=True) + eps) * lay["gamma_post"].float()
    gu = hn @ w("gu", lay).T
    g = torch.nn.functional.silu(gu[:, 0::2]) * gu[:, 1::2]
    out = g @ w("d", lay).T + h
    on = out * torch.rsqrt(out.pow(2).mean(1, keepdim=True) + eps) * nxt["gamma_in"].float()
    return out, on @ w("q", nxt).T


def main() -> None:
    from farm.bench.ar import _time_graph
    from stages import layer_chain, layer_chain_w8a8 as w8
    from stages.quant import quantize_fp8

    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"the W8A8 kernel runs here: {w8.supported(dev, H, I, Q)}", flush=True)

    def w(n, k):
        return torch.randn(n, k, device=dev, dtype=torch.bfloat16) * k ** -0.5

    def layer():
        lay = dict(bo=w(H, H), bgu=layer_chain.pair_rows(w(2 * I, H)), bd=w(H, I), bq=w(Q, H),
                   gamma_post=(1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16),
                   gamma_in=(1 + 0.1 * torch.randn(H, device=dev)).to(torch.bfloat16))
        for k in ("o", "gu", "d", "q"):
            lay[k] = quantize_fp8(lay["b" + k])        # gate/up's rows and scales paired: quantised after pairing
        return lay
    layers = [layer() for _ in range(L + 1)]
    state = layer_chain.words(dev)

    def w8a8(attn, x, lay, nxt):
        return w8.chain(attn, x, lay["o"], lay["gu"], lay["d"], nxt and nxt["q"], lay["gamma_post"],
                        nxt and nxt["gamma_in"], EPS, state)

    def bf16(attn, x, lay, nxt):
        return layer_chain._launch(attn, x, lay["bo"], lay["bgu"], lay["bd"], nxt["bq"], EPS, state)

    attn = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    x0 = torch.randn(32, H, device=dev, dtype=torch.bfloat16)
    try:
        got = w8a8(attn, x0, layers[0], layers[1])
        torch.cuda.synchronize()
    except Exception as e:  # a probe: say why and stop
        print(f"W8A8 chain failed: {type(e).__name__}: {str(e)[:600]}", flush=True)
        return
    want = w8.reference(attn, x0, layers[0]["o"], layers[0]["gu"], layers[0]["d"], layers[1]["q"],
                        layers[0]["gamma_post"], layers[1]["gamma_in"], EPS)
    fp32 = exact(attn, x0, layers[0], layers[1])
    for name, g_, r_, e_ in zip(("layer output", "next q/k/v"), got, want, fp32):
        print(f"{name}: kernel vs reference max abs {(g_.float() - r_.float()).abs().max().item():.3e} (mean "
              f"{(g_.float() - r_.float()).abs().mean().item():.3e}); vs FP32 unquantised: kernel max abs "
              f"{(g_.float() - e_).abs().max().item():.3e} mean {(g_.float() - e_).abs().mean().item():.3e}, "
              f"reference mean {(r_.float() - e_).abs().mean().item():.3e} (values' mean abs "
              f"{e_.abs().mean().item():.3e})", flush=True)
    again = w8a8(attn, x0, layers[0], layers[1])
    alone = w8a8(attn[3:4].clone(), x0[3:4].clone(), layers[0], layers[1])
    last = w8a8(attn, x0, layers[0], None)
    torch.cuda.synchronize()
    print(f"repeatable {all(torch.equal(p, q) for p, q in zip(got, again))}; row 3 alone = batched "
          f"{all(torch.equal(p[3:4], q) for p, q in zip(got, alone))}; last layer's output = the others' "
          f"{torch.equal(last[0], got[0])}; spins that gave up {int(state[0])}", flush=True)
    for rnd in range(3):
        for name, fn in (("BF16 chain", bf16), ("W8A8 chain", w8a8)):
            def run():
                x = x0
                for i_ in range(L):
                    x, _ = fn(attn, x, layers[i_], layers[i_ + 1])
            print(f"round {rnd} {name}: {_time_graph(run) / L * 1e6:.2f} µs per layer (32 rows; W8A8 with the "
                  f"attention rows' maxima as a separate reduction); spins that gave up {int(state[0])}", flush=True)


if __name__ == "__main__":
    compile_only() if "--compile-only" in sys.argv else main()
