"""Probe (written on a CPU box; run on the GPU machine from the repository root:
`python docs/measured/2026-12-02-cpu-s28-conv-tf32x3-probe.py`): can the decoder's stride-1 convolutions (k7 dilated
and k1: 87 % of its MACs) run on tensor cores with FP32-level accuracy — 3×TF32 split products in a Triton implicit
GEMM (below) — faster than cuDNN's FP32 convolutions, which bound the FP32 decode (0.53 s per
reference track against 0.26 s in TF32, docs/benchmarks.md 2026-11-30)?

Per conv shape of one decode tile (1,056 frames of random yue2-3b VAE weights): cuDNN FP32, cuDNN TF32, and the
Triton kernel in tf32x3 for a few tilings, each output's max abs difference from cuDNN FP32 relative to the
output's max abs. Then a whole reference track (5,371 frames, `vae.decode_audio`) with the stride-1 convs swapped for
the kernel's best tiling per shape, against the FP32 decode: time and audio distance.
`TRITON_INTERPRET=1 python … --check-on-cpu` checks the kernel's indexing against `F.conv1d` on small shapes.
"""
import sys
import time

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# The kernel (it lived in stages/_conv_triton.py while it was measured, and left the package when it lost). A stride-1
# 1-D convolution as an implicit GEMM: out[b, co, t] = bias[co] + Σ_j Σ_ci W[j, co, ci] · x[b, ci, t + d·j − p], zero
# outside [0, L). A program owns [BM output channels × BN samples] and walks (channel step, tap) pairs in one loop,
# so that the pipeline holds one weight and one x tile per stage; W is laid out [TAPS, C_out, C_in]. PREC "tf32x3":
# each FP32 operand split into a TF32 head and tail, three tensor-core products, FP32 accumulation.
@triton.jit
def conv1d(X, W, BIAS, Y, C_IN, C_OUT, L, sxb, sxc, syb, syc, DIL: tl.constexpr, PAD: tl.constexpr,
           TAPS: tl.constexpr, HAS_BIAS: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
           STAGES: tl.constexpr, PREC: tl.constexpr):
    t = tl.program_id(0) * BN + tl.arange(0, BN)
    co = tl.program_id(1) * BM + tl.arange(0, BM)
    b = tl.program_id(2).to(tl.int64)
    kk = tl.arange(0, BK)
    x_row = X + b * sxb
    acc = tl.zeros([BM, BN], tl.float32)
    for i in tl.range(0, TAPS * tl.cdiv(C_IN, BK), num_stages=STAGES):   # (channel step, tap) pairs, taps inner
        j = i % TAPS
        ci = (i // TAPS) * BK + kk
        w = tl.load(W + (j * C_OUT + co[:, None]).to(tl.int64) * C_IN + ci[None, :],
                    mask=(co[:, None] < C_OUT) & (ci[None, :] < C_IN), other=0.0)
        src = t + (j * DIL - PAD)
        x = tl.load(x_row + ci[:, None].to(tl.int64) * sxc + src[None, :],
                    mask=(ci[:, None] < C_IN) & (src[None, :] >= 0) & (src[None, :] < L), other=0.0)
        acc = tl.dot(w, x, acc, input_precision=PREC)
    if HAS_BIAS:
        acc += tl.load(BIAS + co, mask=co < C_OUT, other=0.0)[:, None]
    tl.store(Y + b * syb + co[:, None].to(tl.int64) * syc + t[None, :], acc,
             mask=(co[:, None] < C_OUT) & (t[None, :] < L))


TILINGS = ((128, 128, 32, 8, 3), (64, 128, 32, 4, 3), (128, 64, 32, 4, 3), (64, 256, 32, 8, 3), (128, 256, 16, 8, 3))


def tap_major(w):
    """Conv1d weight [C_out, C_in, k] → [k, C_out, C_in] contiguous."""
    return w.permute(2, 0, 1).contiguous()


def launch(x, wt, bias, dil, pad, tiling, prec="tf32x3"):
    bm, bn, bk, warps, stages = tiling
    b, cin, length = x.shape
    taps, cout, _ = wt.shape
    y = torch.empty(b, cout, length, dtype=x.dtype, device=x.device)
    grid = (triton.cdiv(length, bn), triton.cdiv(cout, bm), b)
    conv1d[grid](x, wt, bias if bias is not None else y, y, cin, cout, length, x.stride(0), x.stride(1),
                      y.stride(0), y.stride(1), DIL=dil, PAD=pad, TAPS=taps, HAS_BIAS=bias is not None, BM=bm,
                      BN=bn, BK=bk, STAGES=stages, PREC=prec, num_warps=warps)
    return y


def check_on_cpu():
    torch.manual_seed(0)
    for cin, cout, k, d, length in ((32, 16, 7, 3, 50), (16, 32, 1, 1, 40), (32, 2, 7, 1, 33)):
        x = torch.randn(2, cin, length)
        w = torch.randn(cout, cin, k)
        bias = torch.randn(cout)
        pad = d * (k - 1) // 2
        got = launch(x, tap_major(w), bias, d, pad, (16, 16, 16, 1, 1), prec="ieee")
        want = F.conv1d(x, w, bias, padding=pad, dilation=d)
        assert torch.allclose(got, want, atol=1e-4, rtol=1e-4), (cin, cout, k, d, (got - want).abs().max())
    print("ok: the interpreted kernel equals F.conv1d")


def _time(fn, repeats=5):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def run():
    from stages import vae
    from stages.config import from_toml

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    cfg = from_toml("configs/models/yue2-3b.toml").vae
    with torch.device("meta"):
        dec = vae.OobleckDecoder(cfg)
    raw = {k: v for k, v in vae.random_vae_tensors(cfg, 0).items() if k.startswith("decoder.")}
    dec.load_state_dict(vae._fold(raw), strict=True, assign=True)
    dec = dec.cuda().eval().requires_grad_(False)
    torch.manual_seed(0)
    latents = torch.randn(5371, cfg.latent_dim)

    shapes = {}        # (cin, cout, k, dil, pad, length) → the module, one input seen
    def hook(m, inp, out):
        if m.stride[0] == 1:
            shapes.setdefault((m.in_channels, m.out_channels, m.kernel_size[0], m.dilation[0], m.padding[0],
                               inp[0].shape[-1]), (m, inp[0].clone()))
    hooks = [m.register_forward_hook(hook) for m in dec.modules() if isinstance(m, torch.nn.Conv1d)]
    with torch.inference_mode():
        dec(latents[:1056].T[None].contiguous().cuda())
    for h in hooks:
        h.remove()

    best = {}
    total = {"cudnn fp32": 0.0, "cudnn tf32": 0.0, "triton tf32x3 (best tiling)": 0.0}
    print(f"{'cin':>5} {'cout':>5} {'k':>2} {'d':>2} {'length':>8} {'GMAC':>7} {'fp32 ms':>8} {'tf32 ms':>8} "
          f"{'x3 ms':>8} {'x3 tiling':>22} {'x3 rel err':>10} {'tf32 rel err':>12}", flush=True)
    with torch.inference_mode():
        for key, (m, x) in sorted(shapes.items(), key=lambda kv: -kv[0][5]):
            cin, cout, k, d, pad, length = key
            wt = tap_major(m.weight)
            want = m(x)
            t32 = _time(lambda: m(x))
            torch.backends.cudnn.allow_tf32 = True
            ttf = _time(lambda: m(x))
            tf_err = ((m(x) - want).abs().max() / want.abs().max()).item()
            torch.backends.cudnn.allow_tf32 = False
            results = []
            for tiling in TILINGS:
                try:
                    got = launch(x, wt, m.bias, d, pad, tiling)
                    err = ((got - want).abs().max() / want.abs().max()).item()
                    results.append((_time(lambda: launch(x, wt, m.bias, d, pad, tiling)), tiling, err))
                except Exception as e:       # a tiling that does not compile (shared memory, registers)
                    print(f"  tiling {tiling}: {type(e).__name__}: {str(e)[:80]}", flush=True)
            tx3, tiling, err = min(results)
            best[key] = tiling
            gmac = cin * cout * k * length / 1e9
            total["cudnn fp32"] += t32
            total["cudnn tf32"] += ttf
            total["triton tf32x3 (best tiling)"] += tx3
            print(f"{cin:>5} {cout:>5} {k:>2} {d:>2} {length:>8} {gmac:>7.2f} {t32 * 1e3:>8.3f} {ttf * 1e3:>8.3f} "
                  f"{tx3 * 1e3:>8.3f} {str(tiling):>22} {err:>10.2e} {tf_err:>12.2e}", flush=True)
    print("one tile's stride-1 convs, summed: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in total.items()))

    plain = torch.nn.Conv1d.forward
    def swapped(self, x):
        key = (self.in_channels, self.out_channels, self.kernel_size[0], self.dilation[0], self.padding[0])
        tiling = next((t for s, t in best.items() if s[:5] == key), None)
        if not x.is_cuda or self.stride[0] != 1 or tiling is None:
            return plain(self, x)
        if not hasattr(self, "_taps"):
            self._taps = tap_major(self.weight)
        return launch(x.contiguous(), self._taps, self.bias, self.dilation[0], self.padding[0], tiling)

    core, halo = cfg.decode_core_frames, cfg.decode_halo_frames
    ref = vae.decode_audio(dec, latents, core, halo, "fp32")
    t_ref = _time(lambda: vae.decode_audio(dec, latents, core, halo, "fp32"), 2)
    t_tf = _time(lambda: vae.decode_audio(dec, latents, core, halo, "tf32"), 2)
    tf = vae.decode_audio(dec, latents, core, halo, "tf32")
    torch.nn.Conv1d.forward = swapped
    try:
        x3 = vae.decode_audio(dec, latents, core, halo, "fp32")
        t_x3 = _time(lambda: vae.decode_audio(dec, latents, core, halo, "fp32"), 2)
        again = vae.decode_audio(dec, latents, core, halo, "fp32")
    finally:
        torch.nn.Conv1d.forward = plain
    import numpy as np
    for name, t, audio in (("cuDNN FP32", t_ref, ref), ("cuDNN TF32", t_tf, tf), ("tf32x3 stride-1 convs", t_x3, x3)):
        d = np.abs(audio - ref)
        print(f"whole track, 5371 frames, {name}: {t:.3f} s; audio vs FP32 max abs {d.max():.3g}, mean abs "
              f"{d.mean():.3g}", flush=True)
    print(f"tf32x3 decode run twice gives the same bytes: {np.array_equal(x3, again)}")


if __name__ == "__main__":
    sys.path.insert(0, ".")
    if "--check-on-cpu" in sys.argv:
        check_on_cpu()
    else:
        run()
