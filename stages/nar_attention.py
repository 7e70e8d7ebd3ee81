"""The attention of the acoustic stage: every NAR row over the chunk's prefix keys and the NAR rows (non-causal, no
mask, grouped KV heads) — about half the FLOPs of a velocity evaluation at the reference track's geometry.

Two kernels, one maths:
- **FlashAttention-4** (the `flash-attn-4` package, CuTe-DSL kernels compiled on first use) on a Hopper or Blackwell
  card where it is installed (`pip install "yue2-farm[flash]"`). Its natural layout is [B, S, H, D], so its K/V
  buffers are stored that way (`seq_major`) and handed over as [B, H, S, D] views.
- **SDPA** everywhere else (cuDNN's flash kernel on an H200; the math kernel on the CPU).

`YUE2_FARM_NAR_ATTENTION=sdpa|fa4|fa4-whole` overrides the automatic choice (fa4 where it cannot run is an
error); like every YUE2_FARM_ variable it travels from `farm render` to the farm's workers. Both kernels are
deterministic, so the choice is a property of the installation, like any kernel choice: the same card and
installation give the same song for the same seed.

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

**The last wave** (FA4 on Hopper). FA4's SM90 kernel gives each of 132 SMs whole tiles of 128 query rows × one head
over every key, so a reference chunk (5,373 rows, 16 heads: 672 tiles) runs in 6 rounds of which the last keeps 12
SMs busy: 5.09 rounds of work in 6 rounds of time, which is the ~650 of ~764 TFLOP/s measured. `wave_split` moves
the last few row tiles out of the main call and attends those rows over the keys in `splits` separate ranges (one
varlen call, the rows repeated once per range), then merges the ranges by their log-sum-exps (`merge_partials`,
compiled into one kernel: ~12 µs a layer less than its seven eager ones on an H100, 2026-12-07).
The main rows keep the unsplit kernel's bits; the tail rows' partial outputs are rounded to BF16 before the merge,
one rounding more. The plan follows the card's SM count, so it is a property of the card like any kernel choice:
cards of one model give the same song. `fa4-whole` is the kernel without the split, for comparison.
Measured on an H100 (docs/benchmarks.md, 2026-12-07, twenty-ninth session): the reference chunk 1,053 → 962 µs a
layer (the tail 125 rows over 8 ranges), 11 % at the song's own chunk and 8 % at 4,402 rows; an evaluation 59.8 →
56.8 ms. Where the model saw a small gain the split measured slower (1,502 and 3,752 rows) or level, so its costs
were fitted to those runs and it now splits only where it saves a quarter of a round; elsewhere the call is FA4's
own. The tail rows sit 1.2× as far from an FP32 attention as unsplit (2.9e-5 against 2.3e-5 mean abs); the
latents of `farm bench acoustic` stay as close to FP32 as before (0.0083 mean abs). On an H200 (thirtieth
session, the merge compiled) an evaluation took 55.6 ms against 57.7 with FA4 whole.
"""
from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .compiled import compiled
from .transformer import attend as sdpa


FA4_CACHE = "FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED"
CHOICES = ("auto", "sdpa", "fa4", "fa4-whole")
TILE_ROWS = 128          # query rows of a tile of FA4 4.0's SM90 forward at head dim 128 (its config.select_sm90_tile)
# The tail's costs in keys' worth of one tile's time (~5.8 TFLOP/s an SM on an H100 or H200: 178 µs a tile over
# 15,745 keys), fitted to the 2026-12-07 probe on an H100 (docs/benchmarks.md): each tile over a key range ~20 µs
# beyond its share of the keys, the tail call, the rows' copy and the merge ~40 µs.
RANGE_KEYS = 1770
TAIL_KEYS = 3540
MIN_GAIN = 0.25          # rounds a split must save (the model's times are within ~7 % of the probe's)
MIN_RANGE_KEYS = 512     # no key range shorter than this
MERGE_COMPILE = {"fullgraph": True, "dynamic": True}
WARM_TAILS = (TILE_ROWS - 1, 1)   # the tails `warm` compiles the merge on (its docstring says why these)


@dataclass(frozen=True)
class NarAttention:
    name: str                    # "fa4", "fa4-whole" or "sdpa"
    attend: Callable             # (q [B, H, T, D], k, v [B, KV, S, D]) → [B, H, T, D]
    seq_major: bool              # K/V buffers stored [B, S, KV, D] (seen as [B, KV, S, D])
    warm: Callable | None = None  # (heads, kv_heads, head_dim, dtype, device): compile every kernel attend may use


@dataclass(frozen=True)
class WaveSplit:
    main_rows: int               # query rows attended over all keys in one call (whole tiles)
    splits: int                  # key ranges the rows after them are attended over apart (1: no tail)


def wave_split(rows: int, heads: int, keys: int, sms: int, tile: int = TILE_ROWS) -> WaveSplit:
    """How to cut `rows` queries × `heads` heads so that the card's `sms` SMs finish together: the plan of least
    modelled time, in rounds (one tile over every key on every SM). Unsplit: ceil(tiles / sms) rounds. Moving the
    last `tail` row tiles out: ceil((blocks − tail)·heads / sms) rounds for the main call, then
    ceil(tail·heads·s / sms) rounds of tiles over one of s key ranges, each 1/s + RANGE_KEYS/keys, and
    TAIL_KEYS/keys for the call and the merge. Split only where that saves MIN_GAIN rounds."""
    blocks = -(-rows // tile)
    whole = -(-blocks * heads // sms)
    best, plan = whole - MIN_GAIN, WaveSplit(rows, 1)
    for tail in range(1, blocks):
        main = -(-(blocks - tail) * heads // sms)
        for s in range(2, min(16, keys // MIN_RANGE_KEYS) + 1):
            cost = main + -(-tail * heads * s // sms) * (1 / s + RANGE_KEYS / keys) + TAIL_KEYS / keys
            if cost < best - 1e-9:
                best, plan = cost, WaveSplit((blocks - tail) * tile, s)
    return plan


def key_ranges(keys: int, splits: int, tile: int = TILE_ROWS) -> list[int]:
    """Boundaries of `splits` contiguous key ranges over `keys` keys, each a whole number of key tiles but the
    last: [0, b1, ..., keys]."""
    step = -(-keys // splits // tile) * tile if keys >= splits * tile else -(-keys // splits)
    return [min(keys, j * step) for j in range(splits)] + [keys]


def merge_partials(out: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Attention outputs of the same queries over disjoint key ranges → the attention over all of them.
    out [s, T, H, D] (each range's softmax-weighted values), lse [s, H, T] (each range's log-sum-exp of the scaled
    scores, natural log) → [T, H, D] in out's dtype: each range weighs exp(lse − logsumexp over ranges). The softmax
    over ranges is written out: compiled (`_flash4`), torch.softmax over so short a dim makes Inductor warn."""
    lse = lse.float()
    weight = torch.exp(lse - lse.amax(dim=0, keepdim=True))
    weight = (weight / weight.sum(dim=0, keepdim=True)).permute(0, 2, 1).unsqueeze(-1)
    return (out.float() * weight).sum(0).to(out.dtype)


@functools.cache
def _sms(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _flash4(split: bool = True) -> tuple[Callable, Callable] | None:
    """FA4's attend and its warm-up; with `split` (Hopper only: the tiles `wave_split` models are SM90's) the last
    wave is split where `wave_split` says so, the ranges merged by `merge_partials` compiled into one kernel."""
    os.environ.setdefault(FA4_CACHE, "1")        # read when FA4 is imported (the module docstring says why)
    try:
        from flash_attn.cute.interface import _flash_attn_fwd
    except ImportError:
        return None
    bounds: dict = {}     # (tail rows, splits, keys, device) -> cu_seqlens on the device, made before any capture
    merge = compiled(merge_partials, **MERGE_COMPILE)

    def attend(q, k, v, plan: WaveSplit | None = None):
        qs, ks, vs = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        b, rows, heads, d = qs.shape
        keys, scale = ks.shape[1], 1.0 / math.sqrt(d)
        if plan is None:
            plan = WaveSplit(rows, 1)
            if split and b == 1:
                plan = wave_split(rows, heads, keys, _sms(q.device))
        if plan.splits == 1:
            return _flash_attn_fwd(qs, ks, vs, softmax_scale=scale)[0].transpose(1, 2)
        main, s = plan.main_rows, plan.splits
        tail = rows - main
        key = (tail, s, keys, q.device)
        if key not in bounds:
            ranges = key_ranges(keys, s)
            bounds[key] = (torch.arange(0, (s + 1) * tail, tail, dtype=torch.int32, device=q.device),
                           torch.tensor(ranges, dtype=torch.int32, device=q.device),
                           max(hi - lo for lo, hi in zip(ranges, ranges[1:])))
        cu_q, cu_k, longest = bounds[key]
        out = torch.empty_like(qs)
        _flash_attn_fwd(qs[:, :main], ks, vs, softmax_scale=scale, out=out[:, :main])
        part, lse = _flash_attn_fwd(qs[0, main:].repeat(s, 1, 1), ks[0], vs[0], cu_seqlens_q=cu_q,
                                    cu_seqlens_k=cu_k, max_seqlen_q=tail, max_seqlen_k=longest,
                                    softmax_scale=scale, return_lse=True)[:2]
        out[0, main:] = merge(part.view(s, tail, heads, d), lse.view(heads, s, tail).transpose(0, 1))
        return out.transpose(1, 2)

    def warm(heads: int, kv_heads: int, d: int, dtype: torch.dtype, device: torch.device) -> None:
        """Every kernel compiled (or read from FA4's disk cache) now, not in the first long chunk: a short
        chunk never splits. FA4's compile keys hold no lengths, so small tensors give the same kernels. The merge
        is compiled for any length from a tail of 127 rows: Dynamo gives sizes that are equal when it traces one
        symbol (a tail of 128 rows would have tied it to the head dim, and the first real tail would compile
        anew, inside a song) and keeps sizes of 1 apart, so a one-row tail is compiled too."""
        q = torch.zeros(1, 2 * TILE_ROWS, heads, d, dtype=dtype, device=device).transpose(1, 2)
        k = torch.zeros(1, 4 * MIN_RANGE_KEYS, kv_heads, d, dtype=dtype, device=device).transpose(1, 2)
        if not split:
            attend(q, k, k)
            return
        for tail in WARM_TAILS:
            attend(q[:, :, :TILE_ROWS + tail], k, k, WaveSplit(TILE_ROWS, 2))
    return attend, warm


def pick(device: torch.device, dtype: torch.dtype, choice: str | None = None) -> NarAttention:
    """The kernel for this device and dtype: `choice` (one of CHOICES), else $YUE2_FARM_NAR_ATTENTION, else auto.
    FlashAttention-4 takes 16-bit inputs only: an FP32 engine (the reference runs) always uses SDPA."""
    choice = choice or os.environ.get("YUE2_FARM_NAR_ATTENTION", "auto")
    if choice not in CHOICES:
        raise ValueError(f"YUE2_FARM_NAR_ATTENTION: unknown kernel {choice!r} ({', '.join(CHOICES)})")
    if (choice != "sdpa" and device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)
            and torch.cuda.get_device_capability(device)[0] in (9, 10)):
        fa4 = _flash4(split=choice != "fa4-whole" and torch.cuda.get_device_capability(device)[0] == 9)
        if fa4 is not None:
            return NarAttention("fa4-whole" if choice == "fa4-whole" else "fa4", fa4[0], True, fa4[1])
    if choice.startswith("fa4"):
        raise ValueError(f"YUE2_FARM_NAR_ATTENTION={choice} needs a Hopper or Blackwell card, BF16/FP16 and the "
                         "flash-attn-4 package")
    return NarAttention("sdpa", sdpa, False)
