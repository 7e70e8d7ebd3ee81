"""The planner's objective: predicted album makespan of an assignment of roles to cards.

Responsible for: given how many cards of each class take each role, the share of each card's time per hosted stage
and the album's makespan. Not responsible for: which assignments to try (placement.py).

Makespan T = the larger of two estimates, each tight where the other is loose:
- pipeline: a flow line, stage by stage in order, with L_s the first track's latency through stage s on its fastest
  host (full card, first wave of min(batch, N) tracks; an AR burst that fits several cards' slots is shared between
  them in proportion to their speed, and L_s is the slowest card's share where that is shorter: `_first_wave`),
  W_s the tracks its hosts hold at once (sum of batches) and F_s its tracks/s if every host gave it the whole card.
  Tracks pass in whole waves of W_s, one per W_s / F_s:
      span_s = L_s if N <= W_s else max(L_s, ceil(N / W_s) W_s / F_s)
      last_s = max(last_{s-1} + L_s, first_{s-1} + span_s);  first_s = first_{s-1} + L_s (one wave) or
      + max(L_s, W_s / F_s) (several: the bulk of the tracks arrives one mean cycle in)
- resources, an LP: every stage must process N tracks (host card time y_cs at rate r_cs tracks per card-second);
  a card has T seconds (where it hosts AR and acoustic/decode in one process the two kinds run side by side,
  which gives it more: `_card_rows`); and it can work on stage s only inside a window: not before the first track
  reaches s (sum of L before s) nor after the last track must leave s for the later stages (sum of L after s):
      min T  s.t.  sum_c r_cs y_cs >= N,  sum_s y_cs <= T (weighted per kind: _card_rows),  y_cs <= T - w_s
  Solved as max theta = 1/T over shares u = y/T (all right-hand sides >= 0, so the origin is feasible).
The pipeline's fill (the first wave through every stage): sum of L_s. One shared card: about its total work.
Dedicated cards: fill + N / rate + drain.
The shares u are the plan's steady-state split of each card's time.

Against the simulator (which runs the real dispatch rule with batches that thin out and cards time-sliced between
their busy stages) the estimate is 0-17 % optimistic on the shipped profiles (2 % on two H200s since the first wave
is shared, where it was 19 % pessimistic) and ~20 % on 1,000-card fleets: use it to narrow the search, and
`simulate` to choose among the near-best (placement.py) and for a forecast.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .lp import maximize
from .roles import CardClass
from .workload import AR_STAGES

Assignment = tuple[tuple[int, int, int], ...]   # sorted (class index, role index, card count), counts > 0


@dataclass(frozen=True)
class Estimate:
    makespan: float                  # inf when some stage has no host
    throughput: float                # tracks/s the shares sustain at the bottleneck stage
    shares: tuple[tuple[float, ...], ...]   # per assignment entry: share of each card's time per hosted stage
    capacity: dict                   # stage -> tracks/s its hosts give at those shares
    load: dict                       # stage -> cards' worth of time it takes at those shares
    latency: dict                    # stage -> first-track latency (s)
    workers: int
    cards: int
    covered: int = 0                 # stages with a host (all of them unless makespan is inf)


class Evaluator:
    """Memoised evaluation of assignments for one planning problem (classes, stages, track count)."""

    def __init__(self, classes: list[CardClass], stages: tuple[str, ...], tracks: int):
        self.classes, self.stages, self.tracks = classes, stages, tracks
        self.memo: dict[Assignment, Estimate] = {}
        self.bounds: dict[Assignment, float] = {}

    def __call__(self, assignment: Assignment) -> Estimate:
        found = self.memo.get(assignment)
        if found is None:
            found = self.memo[assignment] = self._evaluate(assignment)
        return found

    def _evaluate(self, assignment: Assignment) -> Estimate:
        return self.estimate([self.classes[k].roles[r] for k, r, _ in assignment], [n for _, _, n in assignment])

    def estimate(self, roles: list, counts: list[int]) -> Estimate:
        """The estimate for `counts[i]` cards in role `roles[i]` (RoleConfig-like: stages, batch(), timing())."""
        workers = sum(n * len(role.stages) for role, n in zip(roles, counts))
        hosted = {s for role in roles for s in role.stages}
        if not self.stages or any(s not in hosted for s in self.stages):
            return Estimate(float("inf"), 0.0, (), {}, {}, {}, workers, sum(counts), len(hosted))
        latency = {s: self._first_wave(s, roles, counts) for s in self.stages}
        resources, shares = self._resources(roles, counts, latency)
        capacity = {s: sum(n * share[role.stages.index(s)] / role.timing(s).card_seconds
                           for role, n, share in zip(roles, counts, shares) if s in role.stages) for s in self.stages}
        load = {s: sum(n * share[role.stages.index(s)] for role, n, share in zip(roles, counts, shares)
                       if s in role.stages) for s in self.stages}
        makespan = max(self._pipeline(roles, counts, latency), resources)
        return Estimate(makespan, min(capacity.values()), shares, capacity, load, latency, workers, sum(counts),
                        len(self.stages))

    def lower_bound(self, assignment: Assignment) -> float:
        """Cheap and never above the estimate: the pipeline term, and for each stage its window plus N tracks at
        every host's full-card rate. The exact searches skip assignments whose bound cannot beat the best so far."""
        found = self.memo.get(assignment)
        if found is not None:
            return found.makespan
        bound = self.bounds.get(assignment)
        if bound is None:
            bound = self.bounds[assignment] = self._lower_bound(assignment)
        return bound

    def _lower_bound(self, assignment: Assignment) -> float:
        roles = [self.classes[k].roles[r] for k, r, _ in assignment]
        counts = [n for _, _, n in assignment]
        if not self.stages or any(not any(s in role.stages for role in roles) for s in self.stages):
            return float("inf")
        latency = {s: self._first_wave(s, roles, counts) for s in self.stages}
        total, bound = sum(latency.values()), self._pipeline(roles, counts, latency)
        for s in self.stages:
            full = sum(n / role.timing(s).card_seconds for role, n in zip(roles, counts) if s in role.stages)
            bound = max(bound, total - latency[s] + self.tracks / full)
        return bound

    def _first_wave(self, stage: str, roles, counts) -> float:
        """L_s: the first wave's latency. A burst that fits the AR hosts' slots is shared between their cards in
        proportion to each card's full-card speed, at most its batch (dispatch.py), and ends with the slowest card's
        wave, unless the fastest card's whole wave is shorter (a slow card's share delays only its own tracks, and
        the next stages start on the others'); otherwise (several waves, a batch-1 stage) the fastest host's wave."""
        hosts = [(role, n) for role, n in zip(roles, counts) if stage in role.stages]
        fastest = min(role.timing(stage).latency for role, _ in hosts)
        if stage not in AR_STAGES or self.tracks > sum(n * role.batch(stage) for role, n in hosts):
            return fastest
        rate = sum(n / role.timing(stage).card_seconds for role, n in hosts)
        shared = max(role.wave_latency(stage, math.ceil(self.tracks / (rate * role.timing(stage).card_seconds)))
                     for role, _ in hosts)
        return min(fastest, shared)

    def _pipeline(self, roles, counts, latency) -> float:
        first = last = 0.0
        for s in self.stages:
            hosts = [(role, n) for role, n in zip(roles, counts) if s in role.stages]
            slots = sum(n * role.batch(s) for role, n in hosts)
            if self.tracks <= slots:
                span = step = latency[s]
            else:   # whole waves: a slot turns over once per cycle (slots / full-card tracks per second)
                cycle = slots / sum(n / role.timing(s).card_seconds for role, n in hosts)
                span, step = max(latency[s], math.ceil(self.tracks / slots) * cycle), max(latency[s], cycle)
            last = max(last + latency[s], first + span)
            first += step     # the bulk of a multi-wave stage arrives one (mean) cycle in, not at the fastest host's
        return last

    def _resources(self, roles, counts, latency) -> tuple[float, tuple[tuple[float, ...], ...]]:
        """The windowed LP of the module docstring; returns T and the shares u / n per card."""
        total = sum(latency.values())
        window = {s: total - latency[s] for s in self.stages}      # w_s = latency before s + after s
        columns = [(e, s) for e, role in enumerate(roles) for s in role.stages if s in self.stages]
        n = len(columns) + 1                                       # u per column, then theta
        a, b = [], []
        for s in self.stages:                                      # N theta - sum r u <= 0
            a.append([-1.0 / roles[e].timing(s).card_seconds if st == s else 0.0 for e, st in columns]
                     + [float(self.tracks)])
            b.append(0.0)
        for e, count in enumerate(counts):                         # sum_s u <= count (see _card_rows)
            for weight in _card_rows(roles[e].overlap):
                a.append([weight(col[1]) if col[0] == e else 0.0 for col in columns] + [0.0])
                b.append(float(count))
        for j, (e, s) in enumerate(columns):                       # u + count w_s theta <= count
            row = [0.0] * n
            row[j], row[-1] = 1.0, counts[e] * window[s]
            a.append(row)
            b.append(float(counts[e]))
        theta, u = maximize([0.0] * len(columns) + [1.0], a, b)
        shares = [[0.0] * len(role.stages) for role in roles]
        for j, (e, s) in enumerate(columns):
            shares[e][roles[e].stages.index(s)] = u[j] / counts[e]
        return (1.0 / theta if theta > 0 else float("inf")), tuple(tuple(x) for x in shares)


def _card_rows(overlap: tuple[float, float] | None) -> list:
    """A card's time constraints as weights per stage, each row's weighted shares summing to at most 1 (per card).
    Stages that take turns: one row, every share at weight 1. AR beside acoustic/decode, (ka, kc) times slower
    while both run: the card splits its time between running both kinds (at p = 1/ka and q = 1/kc of their speed)
    and either alone, so the progress a (AR) and c (the others) lie in the hull of (1, 0), (0, 1) and (p, q):
    a + c (1 - p) / q <= 1 and a (1 - q) / p + c <= 1. Where p + q <= 1 running both at once gains nothing and
    the one turns row stands."""
    if not overlap or 1.0 / overlap[0] + 1.0 / overlap[1] <= 1.0:
        return [lambda stage: 1.0]
    p, q = 1.0 / overlap[0], 1.0 / overlap[1]
    return [lambda stage: 1.0 if stage in AR_STAGES else (1 - p) / q,
            lambda stage: (1 - q) / p if stage in AR_STAGES else 1.0]
