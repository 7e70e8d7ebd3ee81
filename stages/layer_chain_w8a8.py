"""The layer chain's maths with FP8 weights and FP8 activations (W8A8), in torch: `reference(attn, x, o, gate_up,
down, qkv, gamma_post, gamma_in, eps)`.

The same four products as `layer_chain` — o (+ residual), gate/up (RMSNorm, SiLU·up), down (+ residual), the next
layer's q/k/v (RMSNorm) — over e4m3 weights with an FP32 scale per output row (`quant.quantize_fp8`; gate/up with
its rows paired, `layer_chain.pair_rows`, scales paired alike), with each product's input quantised per row,
dynamically, as the published FP8 W8A8 checkpoints run (compressed-tensors' FP8_DYNAMIC scheme):
    u = input · norm weight (where a norm comes before), q = e4m3(clamp(u · (448 / amax(u)))), and
    out = (q · Wqᵀ) · ((amax(u) / 448) · norm factor) · w_scale,
then the rounding of the BF16 chain (the products rounded to BF16 before the residual add, SiLU·up as the unfused
ops round it). The norm's per-row factor rsqrt(mean(x²) + eps) cancels in q, so it is applied after the product.

What it is for: `farm bench quality` measures what quantising the activations costs on top of FP8 weights (the
published W8A8 checkpoints' numerics; our fast FP8 step is W8A16). It is not a fast path: an engine runs it only
when asked (`AREngine(weight_format="fp8", chain=True)`), as the products' FP32 matmuls, which on a GPU are not
batch-invariant. A Hopper kernel for it (the BF16 chain plus a warpgroup quantising the activations in shared
memory) was built and measured in 2026-12 and removed: 78.4 µs per layer against 37.0 for the BF16 chain, the
handshakes alone ~37 (docs/ar-engine.md, "FP8 in the layer chain").
"""
from __future__ import annotations

import torch

FP8_MAX = 448.0


def quantize_rows(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """u [M, K] FP32 → (e4m3 values [M, K], the rows' scales amax / 448 [M]); a row of zeros gets scale 0."""
    amax = u.abs().amax(1)
    inv = torch.where(amax > 0, FP8_MAX / amax.clamp(min=1e-30), torch.zeros_like(amax))
    return (u * inv[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), amax / FP8_MAX


def _product(u: torch.Tensor, w: tuple[torch.Tensor, torch.Tensor], factor: torch.Tensor | None = None):
    """The FP32 product of u's quantised rows and the e4m3 weight, scaled as the kernel's epilogue scales it."""
    q, s = quantize_rows(u)
    values, w_scale = w
    rows = s if factor is None else s * factor
    return (q.float() @ values.float().T) * rows[:, None] * w_scale[None, :]


def _factor(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x.float().pow(2).mean(1) + eps)


def reference(attn: torch.Tensor, x: torch.Tensor, o, gate_up, down, qkv, gamma_post: torch.Tensor,
              gamma_in: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """attn [M, heads·head_dim], x (the residual) [M, H], both BF16; o, gate_up (rows paired), down, qkv: (e4m3
    values, FP32 scale) pairs, qkv None for the last layer → (the layer's output [M, H], the next layer's q/k/v
    [M, Q] or [M, 0])."""
    bf = x.dtype
    h = (_product(attn.float(), o).to(bf).float() + x.float()).to(bf)
    gu = _product(h.float() * gamma_post.float(), gate_up, _factor(h, eps))
    gate = gu[:, 0::2].to(bf).float()
    silu = (gate * (1.0 / (1.0 + torch.exp(-gate)))).to(bf).float()
    g = (silu * gu[:, 1::2].to(bf).float()).to(bf)
    out = (_product(g.float(), down).to(bf).float() + h.float()).to(bf)
    if qkv is None:
        return out, out.new_empty(len(out), 0)
    return out, _product(out.float() * gamma_in.float(), qkv, _factor(out, eps)).to(bf)
