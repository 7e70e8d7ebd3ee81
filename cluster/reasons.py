"""Why a plan is what it is: the sentences and summaries `farm plan` prints beside the placement.

Responsible for: each stage's summary (runs, fits no card, or fits only alone), the refusals per card kind, and the
reasons list: the album and the cards, the search, each worker's card and why that card suits the stage, the unused
cards and the LP's shares. Not responsible for: choosing anything (placement.py). `p` is placement's planning
problem: its options, card classes, tracks and runnable stages.
"""
from __future__ import annotations

from .estimate import Estimate
from .plans import Refusal, StageSummary, Worker
from .roles import CardClass
from .workload import AR_STAGES, STAGES


def stage_summaries(p, est: Estimate, workers: list[Worker], apart) -> tuple[StageSummary, ...]:
    out = []
    for s in STAGES:
        if s in p.unrunnable:
            why = next((cls.refusals[s] for cls in p.classes if s in cls.refusals), "no card")
            out.append(StageSummary(s, False, 0, 0.0, None, f"fits no card: {why}"))
        elif s in apart:
            out.append(StageSummary(s, False, 0, 0.0, None, apart_note(p, s)))
        else:
            n = sum(1 for w in workers if w.stage == s)
            out.append(StageSummary(s, True, n, est.capacity.get(s, 0.0), est.latency.get(s)))
    return tuple(out)


def refusals(p) -> tuple[Refusal, ...]:
    return tuple(Refusal(s, f"{cls.device.spec().model} x{cls.count} ({cls.device.key})", why)
                 for cls in p.classes for s, why in cls.refusals.items())


def apart_note(p, stage: str) -> str:
    full = [cls for cls in p.classes if stage in cls.speeds]
    return (f"fits a card alone, but no card has room for it next to the stages it would have to share with; "
            f"e.g. {full[0].device.spec().model} ({full[0].device.key}) offers {full[0].budget_gib:.2f} GiB, while all "
            f"{len(p.stages)} runnable stages need {_together_gib(p, full[0]):.2f} GiB at batch 1")


def _together_gib(p, cls: CardClass) -> float:
    from .gpus import decodes_on_tensor_cores
    from .memory import card_memory, peaks
    batches = dict.fromkeys(p.stages, 1)
    return card_memory(batches, p.options.model, peaks(p.options.model, p.tracks), min(p.options.decode_cores),
                       p.options.shared_process, decodes_on_tensor_cores(cls.device.spec())).total


def plan_reasons(p, est: Estimate, workers: list[Worker], method: str, tried: int, note: str,
                 apart: tuple[str, ...] = ()) -> list[str]:
    o = p.options
    processes = "share one process (weights loaded once)" if o.shared_process else "run as separate processes"
    lines = [f"{len(p.tracks)} track(s) of {o.model.name}; reserve {o.reserve_gib:g} GiB per card; stages on one "
             f"card {processes}"]
    if p.cpu:
        lines.append("no GPU in the inventory: every stage runs on the CPU (the farm uses the tiny model there); "
                     "host memory is not checked")
    for cls in p.classes:
        spec = cls.device.spec()
        lines.append(f"{spec.model} x{cls.count} ({', '.join(d.key for d in cls.devices[:4])}"
                     f"{', ...' if cls.count > 4 else ''}): {cls.budget_gib:,.1f} GiB usable, "
                     f"{spec.bandwidth_gbs:,.0f} GB/s, bf16 {spec.bf16_tflops or 0:,.1f} / "
                     f"fp32 {spec.fp32_tflops or 0:,.1f} TFLOP/s; "
                     f"runs alone: {', '.join(cls.speeds) or 'nothing'}")
    lines.append(note or f"{method} search over {tried} assignment(s) of roles to cards, objective album makespan")
    for s in p.unrunnable:
        lines.append(f"{s} cannot run: no card has the memory for it (see Refused)")
    for s in apart:
        lines.append(f"{s} cannot run alongside the others: {apart_note(p, s)}")
    for w in workers:
        lines.append(_worker_reason(p, w, runs=bool(p.stages) and not p.unrunnable and not apart))
    placed = {w.card for w in workers}
    for cls in p.classes:
        idle = [d.key for d in cls.devices if d.key not in placed]
        if idle and cls.speeds:
            lines.append(f"{len(idle)} {cls.device.spec().model} card(s) unused ({', '.join(idle[:4])}"
                         f"{', ...' if len(idle) > 4 else ''}): giving them a stage would not shorten the makespan")
        elif idle:
            lines.append(f"{cls.device.spec().model} ({', '.join(idle[:4])}) unused: no stage fits it (see Refused)")
    if p.stages and not p.unrunnable and not apart:
        b = max(p.stages, key=lambda s: est.load[s])
        lines.append(f"shares split each card's time so every stage sustains {est.throughput * 3600:,.1f} tracks/h "
                     f"(LP); bottleneck {b} ({est.load[b]:.2f} cards of time); makespan estimate "
                     f"{est.makespan:,.1f} s: the larger of the pipeline (the first wave through every stage "
                     f"{sum(est.latency.values()):,.1f} s, then the rest) and the busiest card's work")
    return lines


def _worker_reason(p, w: Worker, runs: bool = True) -> str:
    kinds = [cls for cls in p.classes if w.stage in cls.speeds]
    if w.stage in AR_STAGES:
        value = lambda c: c.device.spec().bandwidth_gbs
        what, unit, reverse = "bandwidth", "GB/s", True
    elif w.stage == "acoustic":
        value = lambda c: c.device.spec().bf16_tflops or 0.0
        what, unit, reverse = "bf16", "TFLOP/s", True
    else:
        value = lambda c: c.budget_gib
        what, unit, reverse = "usable memory", "GiB", False
    mine = next(c for c in p.classes if any(d.key == w.card for d in c.devices))
    rank = sorted({value(c) for c in kinds}, reverse=reverse).index(value(mine)) + 1
    order = "largest" if reverse else "smallest"
    tile = f", VAE tile {w.decode_core} frames" if w.decode_core else ""
    share = "- (the album cannot run)" if not runs else "0% (helps fill and drain only)" if w.share < 1e-9 \
        else f"{w.share:.0%}"
    return (f"{w.stage} on {w.card} ({w.model}): share {share}, batch {w.batch}{tile}; {what} {value(mine):,.1f} "
            f"{unit}, {_ordinal(rank)} {order} of {len({value(c) for c in kinds})} card kind(s) where it fits; "
            f"{w.card_seconds:,.1f} s of card time per track")


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"
