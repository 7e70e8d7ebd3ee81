"""Which AR weight format and KV cache an album's plan runs: the plans made for each allowed pair, compared.

Responsible for: the rule (the first allowed pair — the model's own numerics — unless another shortens the
makespan by FORMAT_GAIN; the simulator's forecast where the planner ran it, else the estimate) and the sentence that
says why. Not responsible for: the plans (placement.py) or each format's bytes and costs (workload.py, memory.py,
costs.py). One pair for the whole album: a track's song then never depends on which card drew its tokens.
"""
from __future__ import annotations

from .plans import Plan
from .roles import PlanOptions

FORMAT_GAIN = 0.05     # a quantised AR format or KV cache must shorten the makespan by this much to be chosen

Pair = tuple[str, str]   # (AR weight format, KV cache format)


def choose_format(plans: dict[Pair, Plan], allowed: list[Pair], options: PlanOptions) -> tuple[Pair, str]:
    """(the chosen pair, the reason line) among `plans` (pair → its plan), in `allowed` order."""
    chosen = allowed[0]
    for pair in allowed[1:]:
        if _faster(plans[pair], plans[chosen]):
            chosen = pair
    return chosen, _format_reason(plans, chosen, allowed, options)


def _faster(candidate: Plan, incumbent: Plan) -> bool:
    if not candidate.runnable:
        return False
    return not incumbent.runnable or candidate.expected_s < incumbent.expected_s * (1 - FORMAT_GAIN)


def _format_reason(plans: dict, chosen: Pair, allowed: list[Pair], options: PlanOptions) -> str:
    def span(pair):
        return f"{plans[pair].expected_s:,.1f} s" if plans[pair].runnable else "cannot run"

    kv_varies = len({kv for _, kv in allowed}) > 1
    name = (lambda pair: f"{pair[0]} with {pair[1]} KV") if kv_varies else (lambda pair: pair[0])
    text = f"AR weights {chosen[0]} on every AR card (KV cache {chosen[1]})"
    others = [pair for pair in allowed if pair != chosen]
    if others:
        text += f": makespan {span(chosen)} against " + ", ".join(f"{span(p)} in {name(p)}" for p in others)
        text += (f" (another {'pair' if kv_varies else 'format'} must be {FORMAT_GAIN:.0%} faster to replace "
                 f"{name(allowed[0])}, the model's own numerics)" if chosen == allowed[0] else "")
    if options.forbidden_formats:
        text += f"; the cluster profile forbids {', '.join(options.forbidden_formats)}"
    return text
