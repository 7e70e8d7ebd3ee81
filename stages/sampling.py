"""The per-step token sampler of the AR stages, in the reference runtime's exact order (the `--exact` sampler).

Order per step: (CFG combine) → dtype → allowed set → min_tokens → window penalty (power of the count) →
temperature → top-k (ties survive) → top-p → softmax over the whole vocab row → multinomial with the request's own
generator. The row is never compacted: torch.multinomial's draw consumes one variate per vocab entry, so the row width
is part of the RNG stream. Knows nothing about models or caches.
"""
from __future__ import annotations

import torch

from .config import Sampling, TokenLayout


def allowed_range(phase: str, layout: TokenLayout) -> tuple[int, int]:
    """The contiguous ids a stage may emit besides its end id: text (plan), codec codes (semantic)."""
    if phase == "plan":
        return 0, layout.eod
    return layout.codec_offset, layout.codec_offset + layout.codebook


def allowed_bias(phase: str, layout: TokenLayout, vocab: int, dtype: torch.dtype, device) -> torch.Tensor:
    """0 where the stage may emit an id, −inf elsewhere: `allowed_range` + the end id (ABC_END / MUSIC_END)."""
    bias = torch.full((1, vocab), float("-inf"), dtype=dtype, device=device)
    lo, hi = allowed_range(phase, layout)
    bias[..., lo:hi] = 0
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


class RecentWindow:
    """How often each id occurs among a request's last `window` generated ids, kept on the device.

    Equal to counting `history[-window:]` afresh every step (the reference's way), without sending the history
    to the device each token: a ring of the last ids and a count row updated by two scatter-adds per token.
    """

    def __init__(self, window: int, vocab: int, device):
        self.window, self.n = window, 0
        self.ring = torch.zeros(window, dtype=torch.long, device=device)
        self.counts = torch.zeros(1, vocab, dtype=torch.float32, device=device)
        self._one = torch.ones(1, 1, device=device)

    def push(self, token: torch.Tensor) -> None:
        """token: the drawn id as a device tensor [1]."""
        slot = self.n % self.window
        if self.n >= self.window:
            self.counts.scatter_add_(-1, self.ring[slot].view(1, 1), -self._one)
        self.ring[slot] = token[0]
        self.counts.scatter_add_(-1, token.view(1, 1), self._one)
        self.n += 1


def penalise(scores: torch.Tensor, counts: torch.Tensor, penalty: float) -> torch.Tensor:
    """window_penalty from a count row (integers, exact in BF16 too): ids never seen get factor 1, i.e. no change."""
    if penalty == 1.0:
        return scores
    factor = penalty ** counts.to(scores.dtype)
    return torch.where(scores < 0, scores * factor, scores / factor)


def step_scores(logits: torch.Tensor, s: Sampling, bias: torch.Tensor, end: int, recent: RecentWindow | list[int],
                step: int, legacy: bool) -> torch.Tensor:
    """logits [1, vocab] (model dtype) → the final scores to softmax and draw from (or argmax when T = 0).

    `recent` is the request's generated ids (a list, counted here) or its RecentWindow (counted on the device).
    """
    scores = logits.clone() if legacy else logits.float()
    scores = scores + bias.to(scores.dtype)
    if step < s.min_tokens:
        scores[..., end] = float("-inf")
    if isinstance(recent, RecentWindow):
        scores = penalise(scores, recent.counts, s.repetition_penalty)
    else:
        scores = window_penalty(scores, recent[-s.penalty_window:], s.repetition_penalty)
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
