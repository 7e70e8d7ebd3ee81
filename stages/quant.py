"""Quantised AR weights: the formats a decode step can read its linear layers in, and the conversions.

The AR step is bound by memory bandwidth (docs/ar-engine.md), so bytes per weight are time per token. A quantised
matrix is a pair (values, scale): FP8 values (e4m3, the format of the published W8A8 checkpoints) with one FP32
scale per output channel, so w ≈ values · scale[:, None]. The step multiplies the activations by the values with
FP32 accumulation and scales each output channel afterwards (skinny_gemm.linear): the activations stay in the model
dtype (W8A16), which is no less accurate than the checkpoints' own W8A8 recipe. The lm_head and the embedding stay
in the model dtype, as in the published checkpoints.
"""
from __future__ import annotations

import torch

FORMATS = ("bf16", "fp8")              # "bf16": the model's own dtype, whatever it is
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0                        # the largest finite e4m3 value


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] → (values [N, K] e4m3, scale [N] FP32): each row scaled so that its largest magnitude maps to
    FP8_MAX, then rounded to nearest. An all-zero row gets scale 1."""
    amax = w.float().abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    values = (w.float() / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return values, scale


def dequantize(values: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return (values.float() * scale[:, None]).to(dtype)


def weight_bytes(w) -> int:
    """Bytes a step reads for one matrix: a plain tensor, or a (values, scale) pair."""
    if isinstance(w, tuple):
        return sum(t.numel() * t.element_size() for t in w)
    return w.numel() * w.element_size()
