"""The attention of the acoustic stage: every NAR row over the chunk's prefix keys and the NAR rows (non-causal, no
mask, grouped KV heads) — about half the FLOPs of a velocity evaluation at the reference track's geometry.

Two kernels, one maths:
- **FlashAttention-4** (the `flash-attn-4` package, CuTe-DSL kernels compiled on first use) on a Hopper or Blackwell
  card where it is installed (`pip install "yue2-farm[flash]"`). Its natural layout is [B, S, H, D], so its K/V
  buffers are stored that way (`seq_major`) and handed over as [B, H, S, D] views.
- **SDPA** everywhere else (cuDNN's flash kernel on an H200; the math kernel on the CPU).

`YUE2_FARM_NAR_ATTENTION=sdpa|fa4` overrides the automatic choice (fa4 where it cannot run is an error); like
every YUE2_FARM_ variable it travels from `farm render` to the farm's workers. Both kernels are deterministic, so
the choice is a property of the installation, like any kernel choice: the same card and installation give the same
song for the same seed.

FA4 compiles its kernels in every process unless its own on-disk cache is on, which the package leaves off. So
`_flash4` turns the cache on (`FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1`, kept in FA4's default folder or
`FLASH_ATTENTION_CUTE_DSL_CACHE_DIR`) unless the variable is set; its keys cover FA4's sources and the DSL's
version. Measured in fresh processes on an H100 (2026-12-05, docs/benchmarks.md, twenty-second session): the
acoustic engine's build took 17.0–17.2 s with FA4 and its cache off, 14.2–16.5 s with it on, 12.2–12.8 s with
SDPA; the latents were the same bits with the cache on and off.

Measured on an H200 at the reference chunk's shapes (5,373 queries, 15,745 keys; docs/benchmarks.md, 2026-12-03,
seventh session): 1.05–1.07 ms per layer against cuDNN's 1.25 (~650 against ~554 TFLOP/s), the same distance from
an FP32 attention; a velocity evaluation 62.1 against 67.5 ms. Through PyTorch's own FA4 hook
(`torch.nn.attention.activate_flash_attention_impl`) torch 2.11 failed on this package version, so it is called
directly.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .transformer import attend as sdpa


FA4_CACHE = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"


@dataclass(frozen=True)
class NarAttention:
    name: str                    # "fa4" or "sdpa"
    attend: Callable             # (q [B, H, T, D], k, v [B, KV, S, D]) → [B, H, T, D]
    seq_major: bool              # K/V buffers stored [B, S, KV, D] (seen as [B, KV, S, D])


def _flash4() -> Callable | None:
    os.environ.setdefault(FA4_CACHE, "1")        # read when FA4 is imported (the module docstring says why)
    try:
        from flash_attn.cute.interface import flash_attn_func
    except ImportError:
        return None

    def attend(q, k, v):
        out, _ = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                 softmax_scale=1.0 / math.sqrt(q.shape[-1]))
        return out.transpose(1, 2)
    return attend


def pick(device: torch.device, dtype: torch.dtype, choice: str | None = None) -> NarAttention:
    """The kernel for this device and dtype: `choice` ("auto", "sdpa", "fa4"), else $YUE2_FARM_NAR_ATTENTION,
    else auto. FlashAttention-4 takes 16-bit inputs only: an FP32 engine (the reference runs) always uses SDPA."""
    choice = choice or os.environ.get("YUE2_FARM_NAR_ATTENTION", "auto")
    if choice not in ("auto", "sdpa", "fa4"):
        raise ValueError(f"YUE2_FARM_NAR_ATTENTION: unknown kernel {choice!r} (auto, sdpa or fa4)")
    if (choice != "sdpa" and device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)
            and torch.cuda.get_device_capability(device)[0] in (9, 10)):
        fa4 = _flash4()
        if fa4 is not None:
            return NarAttention("fa4", fa4, True)
    if choice == "fa4":
        raise ValueError("YUE2_FARM_NAR_ATTENTION=fa4 needs a Hopper or Blackwell card, BF16/FP16 and the "
                         "flash-attn-4 package")
    return NarAttention("sdpa", sdpa, False)
