"""Keeping an album going when a worker is lost: replacement, re-dispatch, and a watchdog for a stuck worker.

Ray restarts a crashed worker actor itself (`max_restarts` in workers.actor_options) and retries the calls it was
running. Past those restarts, or when its node is gone, every call in flight on it fails with a "worker lost"
error (the actor died, or an object it made was lost with its node). Then the driver:
- kills what is left of the actor (so its card's resource is free) and starts a fresh one from the same spec,
  waiting up to `REPLACE_TIMEOUT_S` for it to load; a card whose worker was replaced `MAX_REPLACEMENTS` times, or
  whose replacement does not come up (its node is gone), is retired: its dispatch slots take no more work, and its
  stages go on on the album's other workers if there are any;
- puts each lost call's track back in its stage's queue, reading its earlier stages' outputs from the store (each
  stage's files are written before its call returns, and the ObjectRefs may have been lost with the worker); a
  track whose call was lost `MAX_ATTEMPTS` times fails (it may be what kills the worker).
The watchdog pings every worker that has calls in flight; one that does not answer within `stall_seconds` (a hung
process, a stopped one) is killed, and the rules above take over. Calls are idempotent (keyed, atomic writes), so
running a stage again gives the same bytes.
"""
from __future__ import annotations

import time

MAX_REPLACEMENTS = 3     # fresh workers per card before the card is retired
MAX_ATTEMPTS = 3         # lost calls per track and stage before the track fails
REPLACE_TIMEOUT_S = 300.0
PING_EVERY_S = 5.0       # a busy worker is pinged this often


def worker_lost(exc: BaseException) -> bool:
    """Did the call fail because its worker (or the node holding its inputs) went away, not because of the work?"""
    import ray.exceptions as rex

    lost = (rex.RayActorError, rex.ObjectLostError, rex.WorkerCrashedError, rex.NodeDiedError)
    return isinstance(exc, lost) or isinstance(getattr(exc, "cause", None), lost)


class Workers:
    """The album's worker actors by dispatch slot, with what it takes to replace one."""

    def __init__(self, slots: dict, specs: dict, launch, stall_seconds: float):
        self.slots, self.specs, self.launch = dict(slots), specs, launch
        self.stall_seconds = stall_seconds
        self.replaced: dict[str, int] = {}            # card worker name → replacements so far
        self.retired: set[str] = set()                # dispatch slot ids that take no more work
        self.pings: dict[int, tuple[object | None, float]] = {}   # id(actor) → (ping ref or None: answered, sent)

    def __getitem__(self, slot: str):
        return self.slots[slot]

    def replace(self, slot: str, dead) -> tuple[list[str], bool]:
        """The actor behind `slot` is lost. Start a fresh one for all its slots unless that was already done for
        this very actor (several of its calls fail at once) → (the slots retired by this loss, whether a fresh
        worker was started now)."""
        import ray

        if self.slots[slot] is not dead:
            return [], False
        spec = self.specs[slot]
        mine = [s for s, a in self.slots.items() if a is dead]
        self.pings.pop(id(dead), None)
        ray.kill(dead, no_restart=True)
        count = self.replaced.get(spec.name, 0) + 1
        self.replaced[spec.name] = count
        fresh = None
        if count <= MAX_REPLACEMENTS:
            fresh = self.launch(spec)
            try:
                ray.get(fresh.report.remote(), timeout=REPLACE_TIMEOUT_S)
            except Exception:        # its node is gone, or it cannot load: this card takes no more work
                ray.kill(fresh, no_restart=True)
                fresh = None
        if fresh is None:
            self.retired.update(mine)
            return mine, False
        for s in mine:
            self.slots[s] = fresh
        return [], True

    def watch(self, busy: set[str]) -> list[tuple[str, object]]:
        """Ping the actors of the busy slots every PING_EVERY_S; → (slot, actor) for each that has left a ping
        unanswered for stall_seconds (the caller kills it, which turns its calls into lost ones)."""
        import ray

        now = time.monotonic()
        actors = {id(self.slots[s]): (s, self.slots[s]) for s in busy if s not in self.retired}
        self.pings = {key: ping for key, ping in self.pings.items() if key in actors}
        pending = [ref for ref, _ in self.pings.values() if ref is not None]
        answered = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        stuck = []
        for key, (slot, actor) in actors.items():
            ref, sent = self.pings.get(key, (None, -PING_EVERY_S))
            if ref is not None and ref in answered:
                ref = None
            if ref is not None and now - sent > self.stall_seconds:
                stuck.append((slot, actor))
                self.pings.pop(key)
                continue
            if ref is None and now - sent >= PING_EVERY_S:
                ref, sent = actor.report.remote(), now
            self.pings[key] = (ref, sent)
        return stuck
