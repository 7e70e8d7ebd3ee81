"""Which AR weight format an album's plan runs: the plans made for each allowed format, compared.

Responsible for: the rule (the first allowed format — the model's own numerics — unless another shortens the
makespan by FORMAT_GAIN; the simulator's forecast where the planner ran it, else the estimate) and the sentence that says why. Not responsible for: the plans (placement.py) or each
format's bytes and costs (workload.py, memory.py, costs.py). One format for the whole album: a track's song then
never depends on which card drew its tokens.
"""
from __future__ import annotations

from .plans import Plan
from .roles import PlanOptions

FORMAT_GAIN = 0.05     # a quantised AR format must shorten the makespan by this much to be chosen


def choose_format(plans: dict[str, Plan], allowed: list[str], options: PlanOptions) -> tuple[str, str]:
    """(the chosen format, the reason line) among `plans` (format → its plan), in `allowed` order."""
    chosen = allowed[0]
    for fmt in allowed[1:]:
        if _faster(plans[fmt], plans[chosen]):
            chosen = fmt
    return chosen, _format_reason(plans, chosen, allowed, options)


def _faster(candidate: Plan, incumbent: Plan) -> bool:
    if not candidate.runnable:
        return False
    return not incumbent.runnable or candidate.expected_s < incumbent.expected_s * (1 - FORMAT_GAIN)


def _format_reason(plans: dict, chosen: str, allowed: list, options: PlanOptions) -> str:
    def span(f):
        return f"{plans[f].expected_s:,.1f} s" if plans[f].runnable else "cannot run"

    text = f"AR weights {chosen} on every AR card (KV cache {options.model.kv_format})"
    others = [f for f in allowed if f != chosen]
    if others:
        text += f": makespan {span(chosen)} against " + ", ".join(f"{span(f)} in {f}" for f in others)
        text += (f" (another format must be {FORMAT_GAIN:.0%} faster to replace {allowed[0]}, the model's own "
                 f"numerics)" if chosen == allowed[0] else "")
    if options.forbidden_formats:
        text += f"; the cluster profile forbids {', '.join(options.forbidden_formats)}"
    return text
