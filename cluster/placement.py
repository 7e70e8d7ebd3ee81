"""The planner: which stages each card hosts, with shares and batches, chosen to minimise the album's makespan.

Responsible for: searching assignments of roles (sets of stages) to cards and turning the best one into a `Plan`.
Not responsible for: memory and time figures (roles.py, costs.py, memory.py), the objective (estimate.py), the
plan's reasons and refusals (reasons.py), or running anything (dispatch.py, simulate.py, farm/).

Search. Identical cards form a class, so an assignment is "how many cards of each class take each role".
- exact: every multiset of roles per class (plus "unused"), when there are at most options.exact_limit of them;
  `exhaustive_plan` tries every role of every card one by one instead, and must find the same makespan.
- flow (large clusters, Helix-style): an LP gives each class's card time per stage that balances the stages'
  capacity (single-stage roles, so its throughput bounds any plan's); rounding turns it into whole cards, co-hosting
  the fractional remainders where memory allows; then moves of one card or a quarter of a group while they help.
Preference: makespans within 0.5 % of each other count as equal, and then fewer workers win (each is an engine to
load; a standby worker that shaves a fraction of a percent is not worth its memory).
Choice: the estimate compares plans in steady state, and does not see how a card time-slices its stages or how
batches thin out (until it shared the first AR wave between cards, it gave every placement on two H200s the same
makespan and chose one the simulator puts 19 % behind the best). So the exact search runs every assignment whose
estimate lies within SIM_BAND of the best one through the simulator (the farm's own dispatch rule, simulate.py),
and the shortest simulated makespan wins, with the same preference (0.5 % steps, then the estimate's order). The
flow method walks from its choice by one-card moves that stay in that band, a round of simulations at a time.
Albums of more than SIM_TRACKS tracks keep the estimate's choice.
With no GPU at all, the same search runs on the CPU pseudo-card ("cpu" method): the farm runs the tiny model there.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import replace

from .estimate import Assignment, Estimate, Evaluator
from .formats import choose_format
from .gpus import GpuDevice
from .lp import maximize
from .plans import CardUse, Plan, Worker
from .reasons import plan_reasons, refusals, stage_summaries
from .roles import PlanOptions, build_classes, inventory_or_cpu, relaxed_role
from .simulate import SimOptions, simulate
from .workload import AR_STAGES, STAGES, TrackShape, check_track

MAKESPAN_STEP = math.log(1.005)  # makespans within the same 0.5 % step count as equal; then fewer workers win
WINDOW_FRACTIONS = (1 / 6, 1 / 4, 1 / 3, 1 / 2, 2 / 3)   # AR windows tried, as fractions of the AR slots
WINDOW_GAIN = 0.01               # a window must beat no window by this much in the simulator to be kept
SIM_TRACKS = 256                 # albums beyond this many tracks keep the estimate's choice and no AR window
SIM_BAND = 0.10                  # assignments within this much of the best estimate are simulated to choose one
SIM_CANDIDATES = 64              # at most this many, the first by the estimate's order
SIM_ROUNDS = 4                   # the flow method's simulated one-card moves: at most this many rounds
LOCAL_SEARCH_EVALUATIONS = 1500   # cap on one-card moves tried by the flow method (keeps 1,000 cards in seconds)
QUIET = SimOptions(record_jobs=False, lower_bound=False)   # the planner's simulations: the makespan only


class _Problem:
    def __init__(self, inventory: list[GpuDevice], workload: list[TrackShape], options: PlanOptions | None):
        if not workload:
            raise ValueError("plan needs at least one track")
        self.options = options or PlanOptions()
        for track in workload:
            check_track(track, self.options.model)
        self.tracks = list(workload)
        self.devices = inventory_or_cpu(inventory, self.options)
        self.cpu = all(d.is_cpu for d in self.devices)
        self.classes = build_classes(self.devices, self.tracks, self.options)
        hosted = {s for cls in self.classes for role in cls.roles for s in role.stages}
        self.stages = tuple(s for s in STAGES if s in hosted)
        self.unrunnable = tuple(s for s in STAGES if s not in hosted)
        self.evaluate = Evaluator(self.classes, self.stages, len(self.tracks))
        self.spans: dict[Assignment, float] = {}    # simulated makespans without an AR window (`simulated`)

    def simulated(self, assignment: Assignment) -> float:
        """The simulator's makespan for `assignment` without an AR window (inf when it cannot run), run once: the
        choice among candidates and the chosen plan's forecast read the same figure."""
        if assignment not in self.spans:
            trial = _assemble(self, assignment, "", 0, window=False, reasons=False)
            self.spans[assignment] = (simulate(trial, self.devices, self.tracks, self.options, QUIET).makespan_s
                                      if trial.runnable else math.inf)
        return self.spans[assignment]

    def key(self, assignment: Assignment) -> tuple:
        """Order of preference: makespan in steps of MAKESPAN_STEP, then fewer workers and cards (fewer engines to
        load; a worker that would only shave a fraction of a percent is not worth its memory), then a fixed order."""
        est = self.evaluate(assignment)
        step = math.inf if math.isinf(est.makespan) else math.floor(math.log(max(est.makespan, 1e-9)) / MAKESPAN_STEP)
        return (step, -est.covered, est.workers, est.cards, est.makespan, assignment)

    def exact_size(self) -> int:
        return math.prod(math.comb(c.count + len(c.roles), c.count) for c in self.classes)


def plan(inventory: list[GpuDevice], workload: list[TrackShape], options: PlanOptions | None = None) -> Plan:
    """Place the four stages on the inventory's cards for this workload (see the module docstring), for each AR
    weight format and KV cache the options allow; the first pair wins unless another is FORMAT_GAIN faster. The
    formats are one for the whole album, so a track's song never depends on which card drew its tokens
    (formats.py)."""
    options = options or PlanOptions()
    allowed = [f for f in options.ar_formats if f not in options.forbidden_formats]
    if not allowed:
        raise ValueError(f"AR weights: the album allows {', '.join(options.ar_formats)} and the cluster profile "
                         f"forbids {', '.join(options.forbidden_formats)}: no format is left")
    # nearest the model's own numerics first (docs/benchmarks.md: an FP8 KV cache moves the tokens' distributions
    # less than FP8 weights, and those less than NVFP4)
    pairs = [(f, kv) for f in allowed for kv in options.kv_formats or (options.model.kv_format,)]
    plans = {pair: _plan_format(inventory, workload, replace(options, model=options.model.with_formats(*pair)))
             for pair in pairs}
    chosen, reason = choose_format(plans, pairs, options)
    return replace(plans[chosen], reasons=plans[chosen].reasons + (reason,))


def _plan_format(inventory: list[GpuDevice], workload: list[TrackShape], options: PlanOptions) -> Plan:
    p = _Problem(inventory, workload, options)
    if not p.stages:
        return _assemble(p, (), "none", 0)
    if p.exact_size() > p.options.exact_limit:
        best, tried, note = _flow(p)
        best, chosen_by = _simulated_walk(p, best)
        return _assemble(p, best, "flow", tried, note, chosen_by=chosen_by)
    band, tried = _exact(p)
    best, chosen_by = _simulated_choice(p, band)
    return _assemble(p, best, "cpu" if p.cpu else "exact", tried, chosen_by=chosen_by)


def exhaustive_plan(inventory: list[GpuDevice], workload: list[TrackShape], options: PlanOptions | None = None,
                    limit: int = 2_000_000) -> Plan:
    """Try every role (or none) for every card, one card at a time: the reference `plan` is tested against."""
    p = _Problem(inventory, workload, options)
    if not p.stages:
        return _assemble(p, (), "none", 0)
    cards = [(k, [-1, *range(len(cls.roles))]) for k, cls in enumerate(p.classes) for _ in cls.devices]
    size = math.prod(len(choices) for _, choices in cards)
    if size > limit:
        raise ValueError(f"exhaustive search over {size} assignments exceeds the limit of {limit}")
    kinds, seen = [k for k, _ in cards], set()
    for combo in itertools.product(*(choices for _, choices in cards)):
        picked = tuple(sorted((k, r) for k, r in zip(kinds, combo) if r >= 0))
        seen.add(tuple((k, r, n) for (k, r), n in sorted(Counter(picked).items())))   # a multiset: one estimate
    best, chosen_by = _simulated_choice(p, _band(p, seen))
    return _assemble(p, best, "exhaustive", size, chosen_by=chosen_by)


def _exact(p: _Problem) -> tuple[list[Assignment], int]:
    """Every multiset of roles per class; the band of the best estimate (`_band`), evaluated only where a cheap
    bound does not already put an assignment beyond the band of the best so far."""
    per_class = []
    for k, cls in enumerate(p.classes):
        options = []
        for combo in itertools.combinations_with_replacement(range(-1, len(cls.roles)), cls.count):
            counts = Counter(r for r in combo if r >= 0)
            options.append(tuple((k, r, n) for r, n in sorted(counts.items())))
        per_class.append(options)
    kept, best, tried = [], math.inf, 0
    for parts in itertools.product(*per_class):
        tried += 1
        assignment = tuple(sorted(x for part in parts for x in part))
        if kept and p.evaluate.lower_bound(assignment) > _band_edge(best):
            continue
        kept.append(assignment)
        best = min(best, p.evaluate(assignment).makespan)
    return _band(p, kept), tried


def _band_edge(best: float) -> float:
    """The largest estimate inside the band of `best`: SIM_BAND above it, to the end of that makespan step."""
    if math.isinf(best):
        return math.inf
    return math.exp((math.floor(math.log(max(best * (1 + SIM_BAND), 1e-9)) / MAKESPAN_STEP) + 1) * MAKESPAN_STEP)


def _band(p: _Problem, assignments) -> list[Assignment]:
    """The assignments whose estimate lies within SIM_BAND of the best one (at least the best), in the estimate's
    order of preference (`_Problem.key`); only the best when nothing can run (every estimate infinite)."""
    ranked = sorted(assignments, key=p.key)
    best = p.evaluate(ranked[0]).makespan
    if math.isinf(best):
        return ranked[:1]
    return [a for a in ranked if p.evaluate(a).makespan < _band_edge(best)]


def _simulated_choice(p: _Problem, band: list[Assignment]) -> tuple[Assignment, str]:
    """The band's assignment (its first SIM_CANDIDATES) with the shortest simulated makespan (`_fastest`), and the
    reason line. The band's first alone beyond SIM_TRACKS tracks."""
    if len(band) < 2 or len(p.tracks) > SIM_TRACKS:
        return band[0], ""
    candidates = band[:SIM_CANDIDATES]
    chosen = _fastest(p, candidates)
    return chosen, _simulated_line(p, band[0], chosen, f"the {len(candidates)} assignment(s) whose estimate lies "
                                   f"within {SIM_BAND:.0%} of the best")


def _simulated_walk(p: _Problem, start: Assignment) -> tuple[Assignment, str]:
    """The flow method's choice, then while it gains: its one-card moves whose estimate stays within SIM_BAND of the
    start's, SIM_CANDIDATES at most a round, SIM_ROUNDS rounds, the fastest simulated taken (`_fastest`)."""
    if len(p.tracks) > SIM_TRACKS:
        return start, ""
    edge, current, tried = _band_edge(p.evaluate(start).makespan), start, set()
    for _ in range(SIM_ROUNDS):
        near = sorted({a for a in _moves(p, current, one_card=True) if p.evaluate(a).makespan < edge}, key=p.key)
        candidates = [current, *near[:SIM_CANDIDATES - 1]]
        tried.update(candidates)
        chosen = _fastest(p, candidates)
        if chosen == current:
            break
        current = chosen
    return current, _simulated_line(p, start, current, f"{len(tried)} assignment(s) one card away from the "
                                    f"estimate's choice, within {SIM_BAND:.0%} of its estimate")


def _fastest(p: _Problem, candidates: list[Assignment]) -> Assignment:
    """The candidate with the shortest simulated makespan in 0.5 % steps, the earliest among equals (the first
    when none can run)."""
    def step(a):
        span = p.simulated(a)
        return math.inf if math.isinf(span) else math.floor(math.log(max(span, 1e-9)) / MAKESPAN_STEP)
    return min(candidates, key=lambda a: (step(a), candidates.index(a)))


def _simulated_line(p: _Problem, first: Assignment, chosen: Assignment, which: str) -> str:
    if math.isinf(p.simulated(chosen)):
        return ""
    line = (f"simulated {which} (the estimate is steady-state: it does not see batches thin out or a card "
            f"time-slice its stages): this one {p.simulated(chosen):,.1f} s")
    if chosen != first:
        line += f", the estimate's choice ({_roles_text(p, first)}) {p.simulated(first):,.1f} s"
    return line


def _roles_text(p: _Problem, assignment: Assignment) -> str:
    return "; ".join(f"{n} x {p.classes[k].device.spec().model}: {'+'.join(p.classes[k].roles[r].stages)}"
                     for k, r, n in assignment)


def _flow(p: _Problem) -> tuple[Assignment, int, str]:
    """LP over (class, stage) card time with single-stage roles, rounding, then improving one-card moves."""
    single = {(k, role.stages[0]): r for k, cls in enumerate(p.classes)
              for r, role in enumerate(cls.roles) if len(role.stages) == 1}
    cols = [(k, s) for k in range(len(p.classes)) for s in p.stages if (k, s) in single]
    rate = {(k, s): 1.0 / p.classes[k].roles[single[(k, s)]].timing(s).card_seconds for k, s in cols}
    a, b = [], []
    for s in p.stages:
        a.append([-rate[c] if c[1] == s else 0.0 for c in cols] + [1.0])
        b.append(0.0)
    for k, cls in enumerate(p.classes):
        a.append([1.0 if c[0] == k else 0.0 for c in cols] + [0.0])
        b.append(float(cls.count))
    bound, y = maximize([0.0] * len(cols) + [1.0], a, b)
    counts = _round(p, dict(zip(cols, y)), single)
    best, tried = _improve(p, counts)
    relaxed = [relaxed_role(cls, p.stages) for cls in p.classes if any(s in cls.speeds for s in p.stages)]
    floor = p.evaluate.estimate(relaxed, [cls.count for cls in p.classes if any(s in cls.speeds for s in p.stages)])
    span = p.evaluate(best).makespan
    note = (f"flow: an LP over {len(p.classes)} card kind(s) balances card time per stage (at most "
            f"{bound * 3600:,.1f} tracks/h); if every card could host every stage the estimate would be "
            f"{floor.makespan:,.1f} s; rounding and {tried} one-card or quarter-group move(s) reach {span:,.1f} s")
    return best, tried + 1, note


def _round(p: _Problem, y: dict, single: dict) -> Counter:
    """Whole cards from the LP's card time: the integer part as single-stage cards; the fractional parts packed
    (first-fit decreasing) onto the class's remaining cards as co-hosted roles, or the largest part when the
    pack does not fit in memory."""
    counts: Counter = Counter()
    for k, cls in enumerate(p.classes):
        shares = {s: y.get((k, s), 0.0) for s in p.stages if (k, s) in single}
        whole = {s: math.floor(v + 1e-9) for s, v in shares.items()}
        for s, n in whole.items():
            if n:
                counts[(k, single[(k, s)])] += n
        left = cls.count - sum(whole.values())
        bins: list[list[tuple[float, str]]] = []
        for frac, s in sorted(((v - whole[s], s) for s, v in shares.items() if v - whole[s] > 1e-9), reverse=True):
            target = next((b for b in bins if sum(f for f, _ in b) + frac <= 1 + 1e-9), None)
            if target is None:
                bins.append([(frac, s)])
            else:
                target.append((frac, s))
        for chunk in bins[:left]:
            stages = tuple(s for s in STAGES if s in {s for _, s in chunk})
            role = next((r for r, role in enumerate(cls.roles) if role.stages == stages), None)
            counts[(k, role if role is not None else single[(k, max(chunk)[1])])] += 1
    return _cap_workers(p, counts)


def _cap_workers(p: _Problem, counts: Counter) -> Counter:
    """More single-stage cards than tracks cannot all be busy: keep the fastest N per stage."""
    n = len(p.tracks)
    for s in p.stages:
        entries = sorted(((p.classes[k].roles[r].timing(s).card_seconds, k, r) for (k, r), c in counts.items()
                          if c and p.classes[k].roles[r].stages == (s,)))
        keep = n
        for _, k, r in entries:
            take = min(counts[(k, r)], keep)
            counts[(k, r)], keep = take, keep - take
    return Counter({key: c for key, c in counts.items() if c})


def _improve(p: _Problem, counts: Counter) -> tuple[Assignment, int]:
    """Best-improvement moves of one card, or a quarter of a group, to another role or out of use."""
    current = tuple(sorted((k, r, n) for (k, r), n in counts.items() if n > 0))
    tried = 0
    while tried < LOCAL_SEARCH_EVALUATIONS:
        best = current
        for candidate in _moves(p, current):
            if tried >= LOCAL_SEARCH_EVALUATIONS:
                break
            tried += 1
            if p.key(candidate) < p.key(best):
                best = candidate
        if best == current:
            break
        current = best
    return current, tried


def _moves(p: _Problem, current: Assignment, one_card: bool = False):
    """The assignments one move away: a card, or a quarter of a group (unless `one_card`), to another role or out
    of use, or an unused one into a role."""
    idle = {k: cls.count - sum(n for kk, _, n in current if kk == k) for k, cls in enumerate(p.classes)}
    sources = [(k, r, n) for k, r, n in current] + [(k, -1, n) for k, n in idle.items() if n > 0]
    for k, src, n in sources:
        for size in sorted({1} if one_card else {max(1, n // 4), 1}, reverse=True):
            for dst in [-1, *range(len(p.classes[k].roles))]:
                if dst != src:
                    yield _move(current, k, src, dst, size)


def _move(assignment: Assignment, k: int, src: int, dst: int, size: int) -> Assignment:
    moved = Counter({(kk, r): c for kk, r, c in assignment})
    moved[(k, src)] -= size
    moved[(k, dst)] += size
    return tuple(sorted((kk, r, c) for (kk, r), c in moved.items() if c > 0 and r >= 0))


def _assemble(p: _Problem, assignment: Assignment, method: str, tried: int, note: str = "", chosen_by: str = "",
              window: bool = True, reasons: bool = True) -> Plan:
    """The plan for `assignment`, its reasons (with `note` for the search and `chosen_by` for the choice; none
    for a trial that is only simulated) and, with `window`, the AR window the simulator finds fastest."""
    est = p.evaluate(assignment) if p.stages else Estimate(float("inf"), 0.0, (), {}, {}, {}, 0, 0)
    hosted = {s for k, r, _ in assignment for s in p.classes[k].roles[r].stages}
    apart = tuple(s for s in p.stages if s not in hosted)   # fit some card alone, but not next to the others
    missing = tuple(s for s in STAGES if s in p.unrunnable or s in apart)
    runnable = bool(p.stages) and not missing
    workers, cards = _place(p, assignment, est)
    bottleneck = max(p.stages, key=lambda s: est.load[s]) if runnable else None   # the stage using most card time
    plan = Plan(tracks=len(p.tracks), audio_seconds=sum(t.audio_seconds for t in p.tracks),
                model=p.options.model.name, method=method, assignments_tried=tried, workers=tuple(workers),
                cards=tuple(cards), stages=stage_summaries(p, est, workers, apart), bottleneck=bottleneck,
                makespan_s=est.makespan if runnable else None, throughput_tracks_s=est.throughput if runnable else 0.0,
                one_track_s=sum(est.latency.values()) if runnable else None, unrunnable=missing,
                refusals=refusals(p),
                reasons=(*plan_reasons(p, est, workers, method, tried, note, apart), *[chosen_by] * bool(chosen_by))
                if reasons else (),
                reserve_gib=p.options.reserve_gib, shared_process=p.options.shared_process,
                ar_format=p.options.model.ar_format, kv_format=p.options.model.kv_format)
    return _ar_window(p, plan, assignment) if window else plan


def _ar_window(p: _Problem, plan: Plan, assignment: Assignment) -> Plan:
    """`plan` with its simulated makespan (`forecast_s`) and the cap on tracks inside the AR stages (dispatch.py)
    that the simulator finds fastest for this album, among a few fractions of the AR slots; no cap unless one wins
    by more than WINDOW_GAIN. A cap makes the first tracks reach acoustic sooner, so acoustic runs beside the AR work
    instead of after all of it, but fewer tracks share each AR step; which wins depends on the cards and the tracks,
    so it is measured, not guessed. Nothing is simulated beyond SIM_TRACKS tracks (a simulation per candidate), and
    no cap is tried where the AR and later stages never share a card (nothing to overlap)."""
    if not plan.runnable or plan.tracks > SIM_TRACKS:
        return plan
    best = replace(plan, forecast_s=p.simulated(assignment))
    if not any(len({s in AR_STAGES for s in c.stages}) == 2 for c in plan.cards):
        return best
    slots = min(sum(w.batch for w in plan.workers if w.stage == s) for s in AR_STAGES)
    windows = sorted({max(1, round(slots * f)) for f in WINDOW_FRACTIONS})
    bar = best.forecast_s * (1 - WINDOW_GAIN)
    for window in (w for w in windows if w < min(slots, plan.tracks)):
        span = simulate(replace(plan, ar_window=window), p.devices, p.tracks, p.options, QUIET).makespan_s
        if span < bar:
            best, bar = replace(plan, ar_window=window, forecast_s=span), span
    return best


def _place(p: _Problem, assignment: Assignment, est: Estimate) -> tuple[list[Worker], list[CardUse]]:
    """Hand each class's cards, in node/index order, to the assignment's roles; the rest are listed unused."""
    workers, cards = [], []
    free = {k: list(cls.devices) for k, cls in enumerate(p.classes)}
    for e, (k, r, n) in enumerate(assignment):
        cls, role = p.classes[k], p.classes[k].roles[r]
        for dev in (free[k].pop(0) for _ in range(n)):
            model = dev.spec().model
            cards.append(CardUse(card=dev.key, node=dev.node, index=dev.index, uuid=dev.uuid, model=model,
                                 stages=role.stages, memory_gib=role.memory.total, budget_gib=cls.budget_gib,
                                 memory=role.memory.breakdown()))
            for i, s in enumerate(role.stages):
                share = est.shares[e][i] if est.shares else 0.0   # no shares when the plan cannot run
                workers.append(Worker(stage=s, card=dev.key, node=dev.node, index=dev.index, uuid=dev.uuid,
                                      model=model, share=share, batch=role.batches[i],
                                      decode_core=role.memory.decode_core if s == "decode" else None,
                                      card_seconds=role.timing(s).card_seconds, latency_s=role.timing(s).latency))
    cards += [CardUse(card=d.key, node=d.node, index=d.index, uuid=d.uuid, model=d.spec().model, stages=(),
                      memory_gib=0.0, budget_gib=p.classes[k].budget_gib, memory="unused")
              for k, devs in free.items() for d in devs]
    workers.sort(key=lambda w: (STAGES.index(w.stage), -w.share, w.card))
    cards.sort(key=lambda c: (c.node, c.index))
    return workers, cards
