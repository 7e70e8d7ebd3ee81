"""RMSNorm in YuE2's rounding order: one home, used by every layer path and by the skinny GEMM's norm prologue."""
from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """YuE2's rounding order (the reference runtime's, for bitwise parity): the rsqrt factor in FP32, cast to x's
    dtype, then x·factor·weight (HF Qwen3 instead normalises in FP32 and casts afterwards)."""
    factor = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x * factor.to(x.dtype)) * weight
