"""The spans of the vocabulary an AR step reads: a plan row can only emit text ids and the ABC end id, a semantic
row only codec ids and the music end id, so a step computes the lm_head and draws over just the spans its live
phases can emit (docs/ar-engine.md, "The vocabulary spans a step reads").

Each span has a logits buffer of its own, its own product with the lm_head rows and its own top-k, so a row's logits
and candidates always come from its own phase's span in one shape: they never depend on what else shares the step.
Knows nothing about caches or graphs (ar.py picks a variant per block).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import TokenLayout
from .sampling import allowed_range, end_id

SPAN_ALIGN = 64      # span widths round up to this: cuBLAS picks slow unaligned kernels for an odd width


def window(phase: str, layout: TokenLayout) -> tuple[int, int] | None:
    """The ids a row of `phase` may emit — its allowed range and its end id — as one span [a, b), or None where
    that span would not start at 0 or at the end id (what `fast_sampling.scores` asks of a span)."""
    lo, hi = allowed_range(phase, layout)
    end = end_id(phase, layout)
    a, b = min(lo, end), max(hi, end + 1)
    return (a, b) if a in (0, end) else None


@dataclass(frozen=True)
class StepSpans:
    """What a step computes for one set of live phases: the lm_head and the draw over `spans` of the vocabulary."""
    name: str
    spans: tuple[tuple[int, int], ...]      # one, or two: the plan span (from id 0) first


def for_phases(layout: TokenLayout, vocab: int) -> dict[frozenset, StepSpans]:
    """A step with only plan rows reads the lm_head's plan span (82 % of the yue2-3b vocabulary) and draws over
    it; only semantic rows, the codec span (18 %); both, the two. Each span is its phase's `window`, widened to a
    multiple of SPAN_ALIGN ids. The plan span must start at 0 and the semantic one at its end id (how a step of
    both tells its rows apart, `candidates`); otherwise every step reads the whole lm_head."""
    windows = [window(p, layout) for p in ("plan", "semantic")]
    keys = [frozenset({"plan"}), frozenset({"semantic"}), frozenset({"plan", "semantic"})]
    if None in windows or windows[0][0] != 0 or windows[1][0] != end_id("semantic", layout):
        return dict.fromkeys(keys, StepSpans("block", ((0, vocab),)))
    plan, semantic = ((a, min(vocab, a + -(-(b - a) // SPAN_ALIGN) * SPAN_ALIGN)) for a, b in windows)
    return dict(zip(keys, (StepSpans("block-plan", (plan,)), StepSpans("block-semantic", (semantic,)),
                           StepSpans("block-both", (plan, semantic)))))


def candidates(best, logits: dict, step: StepSpans, t) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's candidates (values, ids) from its own phase's span: `best(span_logits, t, first)` per span of
    `step` (`logits`: span → buffer); with two spans, the rows whose end id opens the second take its result."""
    (a, b), *second = step.spans
    values, ids = best(logits[(a, b)], t, a)
    if second:
        (c, d), = second
        other, other_ids = best(logits[(c, d)], t, c)
        theirs = (t.end == c)[:, None]
        values, ids = torch.where(theirs, other, values), torch.where(theirs, other_ids, ids)
    return values, ids
