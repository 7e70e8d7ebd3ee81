"""The per-step token sampler of the AR stages, in the reference's exact order (MODEL.md §4).

Order per step: (CFG combine) → dtype → allowed set → min_tokens → window penalty (power of the count) →
temperature → top-k (ties survive) → top-p → softmax over the whole vocab row → multinomial with the request's own
generator. The row is never compacted: torch.multinomial's draw consumes one variate per vocab entry, so the row width
is part of the RNG stream. Knows nothing about models or caches.
"""
from __future__ import annotations

import torch

from .config import Sampling, TokenLayout


def allowed_bias(phase: str, layout: TokenLayout, vocab: int, dtype: torch.dtype, device) -> torch.Tensor:
    """0 where the stage may emit an id, −inf elsewhere: text + ABC_END (plan), codec codes + MUSIC_END (semantic)."""
    bias = torch.full((1, vocab), float("-inf"), dtype=dtype, device=device)
    if phase == "plan":
        bias[..., :layout.eod] = 0
    else:
        bias[..., layout.codec_offset:layout.codec_offset + layout.codebook] = 0
    bias[..., end_id(phase, layout)] = 0
    return bias


def end_id(phase: str, layout: TokenLayout) -> int:
    if phase not in ("plan", "semantic"):
        raise ValueError(f"phase must be plan or semantic, got {phase!r}")
    return layout.abc_end if phase == "plan" else layout.music_end


def cfg_combine(conditional: torch.Tensor, unconditional: torch.Tensor | None, scale: float) -> torch.Tensor:
    """u + g·(c − u) in the logits' dtype, before any upcast."""
    if unconditional is None or scale == 1.0:
        return conditional
    return unconditional + scale * (conditional - unconditional)


def window_penalty(scores: torch.Tensor, recent: list[int], penalty: float) -> torch.Tensor:
    """Each id seen n times in the window: positive logits ÷ penalty^n, negative ones × penalty^n."""
    if penalty == 1.0 or not recent:
        return scores
    ids = torch.tensor(recent, dtype=torch.long, device=scores.device).reshape(1, -1)
    counts = torch.zeros_like(scores).scatter_add_(-1, ids, torch.ones_like(ids, dtype=scores.dtype))
    factor = penalty ** counts
    return torch.where(scores < 0, scores * factor, scores / factor)


def step_scores(logits: torch.Tensor, s: Sampling, bias: torch.Tensor, end: int, history: list[int], step: int,
                legacy: bool) -> torch.Tensor:
    """logits [1, vocab] (model dtype) → the final scores to softmax and draw from (or argmax when T = 0)."""
    scores = logits.clone() if legacy else logits.float()
    scores = scores + bias.to(scores.dtype)
    if step < s.min_tokens:
        scores[..., end] = float("-inf")
    scores = window_penalty(scores, history[-s.penalty_window:], s.repetition_penalty)
    if s.temperature == 0:
        return scores
    if s.temperature != 1:
        scores = scores / s.temperature
    if 0 < s.top_k < scores.shape[-1]:
        threshold = scores.topk(s.top_k).values[..., -1, None]
        scores = scores.masked_fill(scores < threshold, float("-inf"))
    if s.top_p < 1:
        values, order = scores.sort(descending=True)
        probs = values.softmax(-1)
        removed = probs.cumsum(-1) - probs > s.top_p
        removed[..., :3 if legacy else 1] = False
        values = values.masked_fill(removed, float("-inf"))
        scores = values.scatter(-1, order, values)
    return scores


def draw(scores: torch.Tensor, s: Sampling, generator: torch.Generator) -> torch.Tensor:
    """One id [1, 1] from the scores: argmax at T = 0, else one multinomial draw over the whole vocab row."""
    if s.temperature == 0:
        return scores.argmax(-1, keepdim=True)
    return torch.multinomial(scores.softmax(-1), 1, generator=generator)
