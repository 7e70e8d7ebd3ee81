"""FlashAttention-4's SM90 forward tile choices at the acoustic stage's shapes (2026-12-03, session s36; written on
the CPU box, not yet run). Why: with its defaults for head dim 128 (128 × 128 tiles, P·V from registers, intra-
warpgroup overlap) FA4 ran the reference chunk's attention at ~650 TFLOP/s (s36), where FlashAttention-3's C++
kernel picks 128 × 176 for non-causal head dim 128 and is reported at 700+ on an H100. Attention is ~29.5 of a
velocity evaluation's ~62 ms, so each 5 % there is ~1.5 ms an evaluation, ~0.1 s a track.
Sweeps `flash_attn.cute.interface._flash_attn_fwd`'s tile_mn × mma_pv_is_rs × intra_wg_overlap over the reference
chunk's shapes (5,373 queries × 16 heads, 15,745 keys × 8 KV heads, dim 128, no mask; K/V stored [B, S, KV, D] as
the engine stores them): µs per call (two rounds, CUDA graph), TFLOP/s, max abs from the defaults' output. A
config the kernel rejects, or that fails to compile, prints why and the sweep goes on.
Run on an H200 from the repository root with the FA4 wheels unpacked in out/fa4site (see the s36 note)."""
import itertools
import sys
import time

sys.path[:0] = [".", "out/fa4site", "out/fa4site/nvidia_cutlass_dsl/dsl_packages"]
import torch  # noqa: E402

LQ, LK, H, KVH, D = 5373, 15745, 16, 8, 128
FLOP = 4 * LQ * LK * H * D


def graphed_us(fn, n=20):
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    g.replay()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        g.replay()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t) / n * 1e6)
    return best


def main() -> None:
    from flash_attn.cute.interface import _flash_attn_fwd
    torch.manual_seed(0)
    q = torch.randn(1, LQ, H, D, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, LK, KVH, D, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, LK, KVH, D, device="cuda", dtype=torch.bfloat16)
    scale = D ** -0.5
    ref = _flash_attn_fwd(q, k, v, softmax_scale=scale)[0].float()
    configs = [None] + [dict(tile_mn=(m, n), mma_pv_is_rs=rs, intra_wg_overlap=ol)
                        for (m, n), rs, ol in itertools.product(
                            [(128, 128), (128, 144), (128, 160), (128, 176), (128, 192), (192, 128), (192, 112),
                             (64, 256)], (True, False), (True, False))]
    for rnd in range(2):
        print(f"-- round {rnd}", flush=True)
        for cfg in configs:
            name = "defaults" if cfg is None else f"{cfg['tile_mn']} rs={int(cfg['mma_pv_is_rs'])} " \
                                                 f"ol={int(cfg['intra_wg_overlap'])}"
            try:
                fn = (lambda c=cfg: _flash_attn_fwd(q, k, v, softmax_scale=scale, **(c or {}))[0])
                t0 = time.perf_counter()
                out = fn().float()
                first = time.perf_counter() - t0
                t = graphed_us(fn)
                print(f"{name:<30} {t:8.1f} µs {FLOP / t / 1e6:6.1f} TFLOP/s  vs defaults max abs "
                      f"{(out - ref).abs().max().item():.2e}  first call {first:.1f} s", flush=True)
            except Exception as e:  # a probe: say why and go on
                print(f"{name:<30} failed: {type(e).__name__}: {str(e)[:200]}", flush=True)


if __name__ == "__main__":
    main()
