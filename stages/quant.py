"""Quantised AR weights: the formats a decode step can read its linear layers in, and the conversions.

The AR step is bound by memory bandwidth (docs/ar-engine.md), so bytes per weight are time per token. A quantised
matrix is a tuple the step's GEMM reads directly (skinny_gemm.linear), with one FP32 scale per output channel last:
- fp8 `(values, scale)`: e4m3 values (the format of the published W8A8 checkpoints), w ≈ values · scale[:, None];
- nvfp4 `(packed, group_scale, scale)`: e2m1 values packed two to a byte (element 2j in the low nibble, 2j + 1 in
  the high one), an e4m3 scale per 16 consecutive values of a row, and the FP32 per-channel scale, so
  w ≈ e2m1 · group_scale · scale[:, None] — the published NVFP4 W4A16 checkpoints' layout (compressed-tensors
  `nvfp4-pack-quantized`), whose per-tensor global scale g becomes scale = 1/g on every row of that tensor (so q,
  k and v can sit in one matrix with their own g).
The step multiplies the activations by the values with FP32 accumulation and scales each output channel afterwards:
the activations stay in the model dtype (W8A16, W4A16). The lm_head and the embedding stay in the model dtype, as in
the published checkpoints.
"""
from __future__ import annotations

import torch

FORMATS = ("bf16", "fp8", "nvfp4")     # "bf16": the model's own dtype, whatever it is
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0                        # the largest finite e4m3 value
FP4_MAX = 6.0                          # the largest e2m1 value
FP4_GROUP = 16                         # values per e4m3 group scale
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])   # magnitude of each 3-bit code


def quantize_fp8(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w [N, K] → (values [N, K] e4m3, scale [N] FP32): each row scaled so that its largest magnitude maps to
    FP8_MAX, then rounded to nearest. An all-zero row gets scale 1."""
    amax = w.float().abs().amax(dim=1)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    values = (w.float() / scale[:, None]).clamp(-FP8_MAX, FP8_MAX).to(FP8)
    return values, scale


def nvfp4_scales(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The NVFP4 scales of a whole matrix w [N, K], as compressed-tensors computes them (in FP32): the global scale
    g = 448 · 6 / max|w| ([1]) and the e4m3 group scales round(g · max|group| / 6) ([N, K/16]; a group of zeros
    gets e4m3's eps)."""
    w = w.float()
    g = (FP8_MAX * FP4_MAX / w.abs().amax().clamp(min=torch.finfo(torch.float32).tiny)).reshape(1)
    g = torch.nan_to_num(g, nan=1.0, posinf=1.0, neginf=1.0)
    group_max = w.reshape(w.shape[0], -1, FP4_GROUP).abs().amax(dim=-1)
    group = (g * (group_max / FP4_MAX)).clamp(-FP8_MAX, FP8_MAX).to(FP8).float()
    group = torch.where(group == 0, torch.finfo(FP8).eps, group).to(FP8)
    return g, group


def e2m1_codes(x: torch.Tensor) -> torch.Tensor:
    """x (already divided by its scale) → the nearest e2m1 code (sign bit 8), uint8; ties go to the even mantissa,
    as compressed-tensors rounds (0.25 → 0, 0.75 → 1, 1.25 → 1, 1.75 → 2, 2.5 → 2, 3.5 → 4, 5 → 4)."""
    a = x.abs()
    code = ((a > 0.25).to(torch.uint8) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0))
    return code | ((x < 0).to(torch.uint8) << 3)


def quantize_nvfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """w [N, K] (K a multiple of 16) → (packed [N, K/2] uint8, group_scale [N, K/16] e4m3, scale [N] FP32 = 1/g):
    the values compressed-tensors writes for the matrix (its NVFP4 recipe, computed in FP32)."""
    n, k = w.shape
    if k % FP4_GROUP:
        raise ValueError(f"nvfp4 needs a depth that is a multiple of {FP4_GROUP}, got {k}")
    g, group = nvfp4_scales(w)
    step = (group.float() / g).repeat_interleave(FP4_GROUP, dim=1)
    codes = e2m1_codes((w.float() / step).clamp(-FP4_MAX, FP4_MAX))
    return pack_codes(codes), group, (1.0 / g).expand(n).contiguous()


def pack_codes(codes: torch.Tensor) -> torch.Tensor:
    return codes[:, 0::2] | (codes[:, 1::2] << 4)


def unpack_codes(packed: torch.Tensor) -> torch.Tensor:
    """packed [N, K/2] uint8 → e2m1 codes [N, K] uint8."""
    return torch.stack([packed & 15, packed >> 4], dim=-1).reshape(packed.shape[0], -1)


def e2m1_values(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 codes → their FP32 values."""
    magnitude = E2M1.to(codes.device)[(codes & 7).long()]
    return torch.where(codes & 8 > 0, -magnitude, magnitude)


def dequantize(*w: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A quantised tuple (fp8 or nvfp4, as above) → the matrix it stands for."""
    if len(w) == 2:
        values, scale = w
        return (values.float() * scale[:, None]).to(dtype)
    packed, group, scale = w
    values = e2m1_values(unpack_codes(packed)) * group.float().repeat_interleave(FP4_GROUP, dim=1)
    return (values * scale[:, None]).to(dtype)


def quantize(w: torch.Tensor, weight_format: str) -> tuple[torch.Tensor, ...]:
    return quantize_fp8(w) if weight_format == "fp8" else quantize_nvfp4(w)


def cat(parts: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
    """Quantised matrices of one format stacked by rows (q, k and v as one matrix, each with its own scales)."""
    return tuple(torch.cat(component) for component in zip(*parts))


def weight_bytes(w) -> int:
    """Bytes a step reads for one matrix: a plain tensor, or a quantised tuple."""
    if isinstance(w, tuple):
        return sum(t.numel() * t.element_size() for t in w)
    return w.numel() * w.element_size()
