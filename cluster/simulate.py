"""Discrete-event simulation of a plan on an album, driven by the same dispatch functions as the farm.

Responsible for: time. A card is shared by its busy workers: evenly by default (a GPU time-slices between the
engines that have work), or by planned share (`sharing="weighted"`); either way it never gives out more than its
whole time — except that a card hosting AR and acoustic/decode stages in one process runs the two kinds side by
side (bandwidth-bound and compute-bound work on their own CUDA streams): each kind shares the whole card among its
own busy workers, slowed by the calibration's overlap factors while the other kind is busy too. An AR worker batches continuously: every step advances each of its tracks by one token, a step costs
costs.step_seconds for the tracks in it, and a joining track's prefill stalls the batch. Acoustic and decode jobs
take costs.job_seconds of card time. Reports makespan, per-stage and per-card use, queue lengths over time, and
every job (the conservation tests read them). Not responsible for: decisions (dispatch.py) or figures (costs.py).
"""
from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass

from .costs import (CardSpeed, card_speed, job_seconds, lower_bound_card_seconds, stall_seconds, step_seconds,
                    track_work)
from .dispatch import apply, finish, new_state, next_dispatch, workers_from_plan
from .gpus import GpuDevice
from .roles import PlanOptions, inventory_or_cpu
from .tables import table
from .workload import AR_STAGES, STAGES, TrackShape

DONE = 1e-9   # remaining work below this (tokens or card-seconds, relative) counts as finished


@dataclass(frozen=True)
class SimOptions:
    sharing: str = "equal"       # "equal": busy workers split a card evenly (GPU time-slicing between engines);
                                 # "weighted": in proportion to their planned shares (needs MPS-like control)
    min_weight: float = 0.05     # weight of a worker planned at share 0 whenever it does have work
    record_jobs: bool = True
    queue_points: int = 400      # queue-length samples kept (max per time bucket)
    lower_bound: bool = True     # compute SimResult.bound_s (the planner's trial runs need the makespan only)


@dataclass(frozen=True)
class JobRecord:
    track: int
    stage: str
    worker: str
    card: str
    start: float
    end: float


@dataclass(frozen=True)
class StageStats:
    stage: str
    jobs: int
    card_seconds: float          # card time its workers consumed
    mean_queue: float            # time-averaged ready tracks waiting
    max_queue: int


@dataclass(frozen=True)
class CardStats:
    card: str
    model: str
    busy_seconds: float          # time with at least one busy worker (it then uses the whole card)
    utilisation: float           # busy / makespan


@dataclass(frozen=True)
class SimResult:
    tracks: int
    makespan_s: float
    predicted_s: float | None    # the plan's estimate
    bound_s: float | None        # a lower bound no schedule can beat (critical path; stage work over its workers)
    stages: tuple[StageStats, ...]
    cards: tuple[CardStats, ...]
    queue_series: tuple[tuple[float, tuple[int, ...]], ...]   # (time, ready tracks per stage)
    jobs: tuple[JobRecord, ...]
    events: int

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        pred = "-" if self.predicted_s is None else f"{self.predicted_s:,.1f} s"
        bound = "-" if self.bound_s is None else f"{self.bound_s:,.1f} s"
        lines = [f"Simulated {self.tracks} track(s): makespan {self.makespan_s:,.1f} s (the plan's steady-state "
                 f"estimate {pred}; lower bound {bound}; {self.events} events)", "",
                 table(["stage", "jobs", "card s", "mean queue", "max queue"],
                       [[s.stage, s.jobs, s.card_seconds, s.mean_queue, s.max_queue] for s in self.stages]), "",
                 table(["card", "model", "busy s", "utilisation"], self._card_rows())]
        return "\n".join(lines)

    def _card_rows(self) -> list[list]:
        if len(self.cards) <= 24:
            return [[c.card, c.model, c.busy_seconds, f"{c.utilisation:.0%}"] for c in self.cards]
        models: dict[str, list[CardStats]] = {}
        for c in self.cards:
            models.setdefault(c.model, []).append(c)
        return [[f"{len(cs)} cards", model, sum(c.busy_seconds for c in cs) / len(cs),
                 f"{min(c.utilisation for c in cs):.0%}-{max(c.utilisation for c in cs):.0%}"]
                for model, cs in models.items()]


class _Worker:
    """One stage engine on a card: its running tracks, and (AR) the prefill still stalling its batch."""

    def __init__(self, slot, speed: CardSpeed, weight: float, core: int):
        self.slot, self.speed, self.weight, self.core = slot, speed, weight, core
        self.ar = slot.stage in AR_STAGES
        self.jobs: dict[int, list] = {}     # track -> [remaining, work, start, initial]; tokens (AR) or card-s
        self.stall = 0.0                    # AR: card-seconds of prefill still to run before the next step
        self.card_time = 0.0

    def add(self, track: int, work, now: float) -> None:
        if self.ar:   # a joining track's prefill (and job overhead) stalls the whole batch
            self.stall += stall_seconds(self.speed, work)
            self.jobs[track] = [float(work.tokens), work, now, float(work.tokens)]
        else:
            size = job_seconds(self.speed, work)
            self.jobs[track] = [size, work, now, size]

    def step(self) -> float:
        works = [job[1] for job in self.jobs.values()]
        return step_seconds(self.speed, sum(w.kv_bytes_per_step for w in works), sum(w.flop_per_step for w in works),
                            len(works))

    def time_to_event(self, share: float) -> float:
        """Seconds until its next change at `share` of the card."""
        if self.ar:
            if self.stall > 0:
                return self.stall / share
            return min(j[0] for j in self.jobs.values()) * self.step() / share
        return min(j[0] for j in self.jobs.values()) * len(self.jobs) / share

    def advance(self, share: float, dt: float) -> None:
        self.card_time += share * dt
        if self.ar:
            used = min(self.stall, share * dt)
            self.stall = self.stall - used if self.stall - used > 1e-12 else 0.0   # snap: no endless tiny events
            steps = (share * dt - used) / self.step() if self.jobs and share * dt > used else 0.0
            for job in self.jobs.values():
                job[0] -= steps
        else:
            for job in self.jobs.values():
                job[0] -= share * dt / len(self.jobs)


class _Card:
    """A card's busy workers share it; `version` invalidates its older entries in the event heap."""

    def __init__(self, key, model, overlap: float | None = None):
        self.key, self.model, self.workers, self.overlap = key, model, [], overlap
        self.last, self.version, self.busy = 0.0, 0, 0.0

    def shares(self) -> dict:
        busy = [w for w in self.workers if w.jobs]
        if not self.overlap:
            total = sum(w.weight for w in busy)
            return {w: w.weight / total for w in busy}
        kinds = [(kind, slow) for kind, slow in zip(([w for w in busy if w.ar], [w for w in busy if not w.ar]),
                                                    self.overlap) if kind]
        both = len(kinds) == 2
        return {w: w.weight / sum(v.weight for v in kind) / (slow if both else 1.0) for kind, slow in kinds
                for w in kind}

    def advance(self, t: float) -> None:
        dt = t - self.last
        if dt > 0:
            shares = self.shares()
            for w, share in shares.items():
                w.advance(share, dt)
            if shares:
                self.busy += dt
        self.last = t

    def next_event(self) -> float | None:
        shares = self.shares()
        return min((w.time_to_event(s) for w, s in shares.items()), default=None)


def simulate(plan, inventory: list[GpuDevice], workload: list[TrackShape], options: PlanOptions | None = None,
             sim: SimOptions | None = None) -> SimResult:
    """Run `plan` on `workload` (the tracks it was planned for, or others) on the cards of `inventory`."""
    if not plan.workers or plan.unrunnable:
        raise ValueError("the plan cannot run every stage: " + ", ".join(plan.unrunnable or STAGES))
    run = _Run(plan, inventory, workload, options or PlanOptions(), sim or SimOptions())
    run.start(0.0)
    run.sample(0.0)
    while run.heap:
        run.step()
    return run.result(plan)


class _Run:
    """One simulation: cards, workers, the dispatch state, the event heap, and what gets recorded."""

    def __init__(self, plan, inventory, workload, options: PlanOptions, sim: SimOptions):
        self.workload, self.options, self.sim = workload, options, sim
        devices = {d.key: d for d in inventory_or_cpu(inventory, options)}
        planned = {f"{w.stage}@{w.card}": w for w in plan.workers}
        slots = workers_from_plan(plan)
        self.cards: dict[str, _Card] = {}
        self.workers: dict[str, _Worker] = {}
        for slot in slots:
            pw = planned[slot.id]
            weight = 1.0 if sim.sharing == "equal" else max(pw.share, sim.min_weight)
            worker = _Worker(slot, _speed(devices[slot.card], slot.stage, options), weight, pw.decode_core or 1024)
            self.workers[slot.id] = worker
            self.cards.setdefault(slot.card, _Card(slot.card, pw.model)).workers.append(worker)
        for card in self.cards.values():
            kinds = {w.ar for w in card.workers}
            if plan.shared_process and len(kinds) == 2 and not devices[card.key].is_cpu:
                card.overlap = options.calibration_for(devices[card.key]).overlap
        self.state = new_state(slots, range(len(workload)), plan.ar_window)
        self.heap: list = []
        self.seq = self.events = 0
        self.works: dict = {}
        self.records: list[JobRecord] = []
        self.samples: list = []
        self.queue_area, self.max_queue = [0.0] * len(STAGES), [0] * len(STAGES)
        self.last_q, self.now = self._queues(), 0.0

    def work(self, track: int, worker: _Worker):
        key = (track, worker.slot.stage, worker.core if worker.slot.stage == "decode" else 0)
        if key not in self.works:
            self.works[key] = track_work(self.workload[track], worker.slot.stage, self.options.model, worker.core)
        return self.works[key]

    def start(self, now: float) -> dict:
        """Dispatch what can start now; returns the cards whose work changed, by key, in the actions' order (a set
        of cards would schedule them in the order of their memory addresses, and ties in the heap would follow)."""
        actions = next_dispatch(self.state)
        apply(self.state, actions)
        touched: dict[str, _Card] = {}
        for a in actions:
            worker = self.workers[a.worker]
            card = self.cards[worker.slot.card]
            card.advance(now)
            for track in a.tracks:
                worker.add(track, self.work(track, worker), now)
            touched[card.key] = card
        for card in touched.values():
            self.schedule(card, now)
        return touched

    def schedule(self, card: _Card, now: float) -> None:
        card.version += 1                        # earlier heap entries of this card are now stale
        dt = card.next_event()
        if dt is not None:
            self.seq += 1
            heapq.heappush(self.heap, (now + dt, self.seq, card.key, card.version))

    def step(self) -> None:
        now, _, key, version = heapq.heappop(self.heap)
        card = self.cards[key]
        if version != card.version:
            return
        self.events += 1
        card.advance(now)
        finished = [(w, t) for w in card.workers for t, job in w.jobs.items() if job[0] <= DONE * max(1.0, job[3])]
        for worker, track in finished:
            job = worker.jobs.pop(track)
            if self.sim.record_jobs:
                self.records.append(JobRecord(track, worker.slot.stage, worker.slot.id, worker.slot.card, job[2], now))
            finish(self.state, worker.slot.id, track)
        touched = self.start(now) if finished else {}
        if key not in touched:
            self.schedule(card, now)
        self.sample(now)

    def _queues(self) -> tuple[int, ...]:
        return tuple(len(self.state.ready[s]) for s in STAGES)

    def sample(self, now: float) -> None:
        q = self._queues()
        for i, n in enumerate(self.last_q):
            self.queue_area[i] += n * (now - self.now)
            self.max_queue[i] = max(self.max_queue[i], n, q[i])
        if q != self.last_q or not self.samples:
            self.samples.append((now, q))
        self.last_q, self.now = q, now

    def result(self, plan) -> SimResult:
        if len(self.state.done) != len(self.workload):
            raise RuntimeError(f"simulation stalled with {len(self.workload) - len(self.state.done)} track(s) left")
        span = self.now
        stages = tuple(StageStats(s, len(self.workload), sum(w.card_time for w in self.workers.values()
                                                            if w.slot.stage == s),
                                  self.queue_area[i] / span if span else 0.0, self.max_queue[i])
                       for i, s in enumerate(STAGES))
        cards = tuple(CardStats(c.key, c.model, c.busy, c.busy / span if span else 0.0)
                      for c in sorted(self.cards.values(), key=lambda c: c.key))
        bound = _lower_bound(self.workers, self.workload, self.options) if self.sim.lower_bound else None
        return SimResult(len(self.workload), span, plan.makespan_s, bound, stages, cards,
                         _downsample(self.samples, self.sim.queue_points), tuple(self.records), self.events)


def _speed(device: GpuDevice, stage: str, options: PlanOptions) -> CardSpeed:
    speed = card_speed(device, stage, options.model, options.calibration_for(device))
    if isinstance(speed, str):
        raise ValueError(speed)
    return speed


def _lower_bound(workers: dict, workload: list[TrackShape], options: PlanOptions) -> float:
    """max(critical path of any track at full speed, each stage's least card time over its worker count)."""
    kinds = {s: {(w.speed, w.core if s == "decode" else 0, w.slot.batch) for w in workers.values() if w.slot.stage == s}
             for s in STAGES}
    count = {s: sum(1 for w in workers.values() if w.slot.stage == s) for s in STAGES}
    path, stage = 0.0, dict.fromkeys(STAGES, 0.0)
    for t in workload:
        along = 0.0
        for s in STAGES:
            works = {core: track_work(t, s, options.model, core or 1024) for _, core, _ in kinds[s]}
            along += min(job_seconds(speed, works[core]) for speed, core, _ in kinds[s])
            stage[s] += min(lower_bound_card_seconds(speed, works[core], b) for speed, core, b in kinds[s])
        path = max(path, along)
    return max(path, *(stage[s] / count[s] for s in STAGES))


def _downsample(samples: list, points: int) -> tuple:
    if len(samples) <= points:
        return tuple(samples)
    end = samples[-1][0] or 1.0
    buckets: dict[int, tuple] = {}
    for t, q in samples:
        b = min(points - 1, int(t / end * points))
        kept = buckets.get(b)
        buckets[b] = (t, tuple(max(x, y) for x, y in zip(kept[1], q))) if kept else (t, q)
    return tuple(buckets[b] for b in sorted(buckets))
