"""The dispatch rule: which workers with free slots take which ready track-stage jobs. State in, actions out.

Responsible for: the queue state of a running album (ready tracks per stage, the tracks each worker runs) and the
rule over it. `next_dispatch` is a pure function of that state:
- tracks leave a stage's ready queue in track order (FIFO by track number);
- each goes to the worker with a free slot that is least loaded for its speed, i.e. the lowest
  (tracks it runs + 1) / speed, speed being the worker's planned tracks per second. A batch-1 stage thus takes the
  fastest free worker; AR workers (continuous batching: a track joins whenever a slot is free) share a burst of
  tracks in proportion to their speed instead of filling one batch to the brim while others idle.
- an album may cap how many tracks are inside the AR stages at once (`ar_window`, from the plan): a track enters
  its first AR stage only while fewer are in. With identical tracks and no cap every track reaches acoustic at the
  same moment, after all the AR work; with a cap they arrive in small waves and a card's acoustic work runs beside
  the AR work of the next wave (placement.py, `_ar_window`, says how the plan sizes it).
Greedy on purpose: every free slot takes work while work is waiting. (A threshold rule that leaves slow workers idle
near the end of an album was tried; without time it misjudges how soon a batched worker frees its slots, and made
the simulated makespans worse. The planner avoids slow shared lanes instead: see estimate.py, stragglers.)
A track's next stage becomes ready when its current stage finishes (`finish`).
Not responsible for: time, Ray, or how long anything takes. The simulator and the farm's Ray driver call the same
functions: `new_state`, `start_at` (resume), `next_dispatch`, then `apply`, and `finish`, `fail` or `requeue` (the
worker was lost; the track runs the stage again) per job, `retire` for a worker whose card is gone and `add_worker` for one that takes over its stage; only
those change the state, and callers should not edit it by hand.
"""
from __future__ import annotations

import bisect
import heapq
from dataclasses import dataclass, field
from typing import Iterable

from .workload import AR_STAGES, STAGES

MIN_SPEED = 1e-9   # a worker planned at share 0 still takes work when every other worker is full


@dataclass(frozen=True)
class WorkerSlot:
    id: str            # unique, e.g. "acoustic@desk/0"
    stage: str
    card: str
    batch: int         # tracks it runs at once
    speed: float       # planned tracks per second (share of its card / card seconds per track)


@dataclass(frozen=True)
class Assign:
    worker: str
    stage: str
    tracks: tuple[int, ...]


@dataclass
class DispatchState:
    workers: dict[str, WorkerSlot]
    ready: dict[str, list[int]]                  # stage -> ready track ids, ascending
    running: dict[str, set[int]]                 # worker id -> tracks it is running now
    free: dict[str, list[tuple[float, str]]]     # stage -> (load, worker id) of workers with a free slot, ascending
    stage_index: dict[int, int] = field(default_factory=dict)   # track -> index in STAGES of its current stage
    done: list[int] = field(default_factory=list)               # finished tracks, in finishing order
    failed: list[int] = field(default_factory=list)             # tracks a stage gave up on; they go no further
    retired: set[str] = field(default_factory=set)              # workers that take no more work
    ar_window: int | None = None                                # most tracks inside the AR stages at once
    in_ar: set[int] = field(default_factory=set)                # tracks admitted to the AR stages, not yet out
    last: dict[int, int] = field(default_factory=dict)          # track -> index of the stage it stops after
                                                                # (absent: it runs through the last stage)


def workers_from_plan(plan, min_share: float = 0.01) -> list[WorkerSlot]:
    """One slot set per planned worker, its speed from the planned share (at least `min_share` of its card)."""
    return [WorkerSlot(f"{w.stage}@{w.card}", w.stage, w.card, w.batch, max(w.share, min_share) / w.card_seconds)
            for w in plan.workers]


def new_state(workers: Iterable[WorkerSlot], tracks: Iterable[int], ar_window: int | None = None) -> DispatchState:
    """Every track ready for its first stage; every worker free; at most `ar_window` tracks in AR at once."""
    if ar_window is not None and ar_window < 1:
        raise ValueError(f"ar_window must be >= 1 or None, got {ar_window}")
    workers = {w.id: w for w in workers}
    free = {s: sorted((_load(w, 0), w.id) for w in workers.values() if w.stage == s) for s in STAGES}
    tracks = sorted(tracks)
    ready = {s: [] for s in STAGES}
    ready[STAGES[0]] = list(tracks)
    return DispatchState(workers, ready, {w: set() for w in workers}, free, {t: 0 for t in tracks},
                         ar_window=ar_window)


def next_dispatch(state: DispatchState) -> list[Assign]:
    """Pure: the assignments to make now. Never changes `state`."""
    actions = []
    for stage in STAGES:
        queue, free = state.ready[stage], state.free[stage]
        if not queue or not free:
            continue
        picks: dict[str, list[int]] = {}
        bumped: list[tuple[float, str]] = []        # workers already picked in this call, at their new load
        i = 0                                       # next untouched entry of the sorted free list
        room = _ar_room(state, actions) if stage in AR_STAGES else None
        for track in queue:
            if room is not None and track not in state.in_ar:
                if room <= 0:
                    continue                        # the window is full: only tracks already in AR go on
                room -= 1
            while i < len(free) and free[i][1] in picks:
                i += 1                              # its current entry lives in `bumped`
            if bumped and (i >= len(free) or bumped[0] < free[i]):
                _, wid = heapq.heappop(bumped)
            elif i < len(free):
                wid, i = free[i][1], i + 1
            else:
                break
            picks.setdefault(wid, []).append(track)
            worker, busy = state.workers[wid], len(state.running[wid]) + len(picks[wid])
            if busy < worker.batch:
                heapq.heappush(bumped, (_load(worker, busy), wid))
        actions += [Assign(wid, stage, tuple(tracks)) for wid, tracks in picks.items()]
    return actions


def apply(state: DispatchState, actions: Iterable[Assign]) -> None:
    """Record that `actions` were submitted: their tracks leave the ready queue and occupy worker slots."""
    actions = list(actions)
    for stage in {a.stage for a in actions}:
        taken = {t for a in actions if a.stage == stage for t in a.tracks}
        queue = state.ready[stage]
        if set(queue[:len(taken)]) == taken:        # the common case: a prefix of the queue (FIFO)
            del queue[:len(taken)]
        elif taken <= set(queue):
            queue[:] = [t for t in queue if t not in taken]
        else:
            raise ValueError(f"tracks {sorted(taken - set(queue))} are not ready for {stage}")
    for a in actions:
        if a.stage in AR_STAGES:
            state.in_ar.update(a.tracks)
        k = len(a.tracks)
        worker, running = state.workers[a.worker], state.running[a.worker]
        if len(running) + k > worker.batch:
            raise ValueError(f"{a.worker} would run {len(running) + k} tracks; its batch is {worker.batch}")
        _reload(state, worker, lambda: running.update(a.tracks))


def finish(state: DispatchState, worker_id: str, track: int) -> str | None:
    """Record that `worker_id` finished `track`; returns the stage the track is now ready for (None: track done)."""
    worker, running = state.workers[worker_id], state.running[worker_id]
    if track not in running:
        raise ValueError(f"{worker_id} is not running track {track}")
    _reload(state, worker, lambda: running.discard(track))
    nxt = state.stage_index[track] + 1
    if nxt > state.last.get(track, len(STAGES) - 1):
        nxt = len(STAGES)                        # held: done for this run (its next stages wait for a person)
    state.stage_index[track] = nxt
    if nxt == len(STAGES) or STAGES[nxt] not in AR_STAGES:
        state.in_ar.discard(track)
    if nxt == len(STAGES):
        state.done.append(track)
        return None
    bisect.insort(state.ready[STAGES[nxt]], track)
    return STAGES[nxt]


def fail(state: DispatchState, worker_id: str, track: int) -> None:
    """Record that `worker_id`'s stage failed on `track`: the slot frees and the track goes no further."""
    worker, running = state.workers[worker_id], state.running[worker_id]
    if track not in running:
        raise ValueError(f"{worker_id} is not running track {track}")
    _reload(state, worker, lambda: running.discard(track))
    state.in_ar.discard(track)
    state.failed.append(track)


def requeue(state: DispatchState, worker_id: str, track: int) -> None:
    """Record that `worker_id` was lost while running `track`: the slot frees and the track waits again for the same
    stage, in track order (it is taken before later tracks)."""
    worker, running = state.workers[worker_id], state.running[worker_id]
    if track not in running:
        raise ValueError(f"{worker_id} is not running track {track}")
    _reload(state, worker, lambda: running.discard(track))
    bisect.insort(state.ready[STAGES[state.stage_index[track]]], track)


def retire(state: DispatchState, worker_id: str) -> None:
    """`worker_id` takes no more work (its card is gone); the tracks it still runs end by `requeue` or `fail`."""
    state.retired.add(worker_id)
    free = state.free[state.workers[worker_id].stage]
    free[:] = [entry for entry in free if entry[1] != worker_id]


def add_worker(state: DispatchState, worker: WorkerSlot) -> None:
    """A worker slot joins a running album (a stage moved to a surviving card when its own card was lost)."""
    if worker.id in state.workers:
        raise ValueError(f"{worker.id} is already a worker")
    state.workers[worker.id] = worker
    state.running[worker.id] = set()
    bisect.insort(state.free[worker.stage], (_load(worker, 0), worker.id))


def can_run(state: DispatchState, stage: str) -> bool:
    """Is any worker of `stage` still taking work?"""
    return any(w.stage == stage and w.id not in state.retired for w in state.workers.values())


def stop_after(state: DispatchState, track: int, stage: str) -> None:
    """`track` ends this run after `stage` (the album waits for a person to choose its score)."""
    state.last[track] = STAGES.index(stage)


def start_at(state: DispatchState, track: int, stage: str) -> None:
    """Resume: `track` already has the artifacts of the stages before `stage`, so it waits for `stage` instead."""
    current = state.stage_index[track]
    if track not in state.ready[STAGES[current]]:
        raise ValueError(f"track {track} is not waiting (it runs or has finished)")
    if STAGES.index(stage) < current:
        raise ValueError(f"track {track} is past {stage} already")
    state.ready[STAGES[current]].remove(track)
    state.stage_index[track] = STAGES.index(stage)
    bisect.insort(state.ready[stage], track)


def _ar_room(state: DispatchState, earlier: list[Assign]) -> int | None:
    """How many more tracks may enter the AR stages now (None: no window), after `earlier` actions of this call."""
    if state.ar_window is None:
        return None
    entering = {t for a in earlier if a.stage in AR_STAGES for t in a.tracks if t not in state.in_ar}
    return state.ar_window - len(state.in_ar) - len(entering)


def _load(worker: WorkerSlot, running: int) -> float:
    return (running + 1) / max(worker.speed, MIN_SPEED)


def _reload(state: DispatchState, worker: WorkerSlot, change) -> None:
    """Apply `change` to the worker's running set, keeping its entry in the free list at the right load."""
    free, running = state.free[worker.stage], state.running[worker.id]
    if len(running) < worker.batch:
        entry = (_load(worker, len(running)), worker.id)
        i = bisect.bisect_left(free, entry)
        if i < len(free) and free[i] == entry:
            del free[i]
    change()
    if len(running) < worker.batch and worker.id not in state.retired:
        bisect.insort(free, (_load(worker, len(running)), worker.id))
