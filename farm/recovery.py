"""Keeping an album going when a worker is lost: replacement, re-dispatch, and a watchdog for a stuck worker.

Ray restarts a crashed worker actor itself (`max_restarts` in workers.actor_options) and retries the calls it was
running. Past those restarts, or when its node is gone, every call in flight on it fails with a "worker lost"
error (the actor died, or an object it made was lost with its node). Then the driver:
- kills what is left of the actor (so its card's resource is free) and starts a fresh one from the same spec,
  waiting up to `REPLACE_TIMEOUT_S` for it to load; a card whose worker was replaced `MAX_REPLACEMENTS` times,
  whose node is gone (no alive Ray node offers its resource any more: retired at once, nothing is started), or
  whose replacement does not come up, is retired: its dispatch slots take no more work, and its stages go on on the
  album's other workers; a stage that was placed only there moves to a surviving card (`move`: that card's worker
  is restarted with the stage's engine added, and its running calls go again);
- puts each lost call's track back in its stage's queue, reading its earlier stages' outputs from the store (each
  stage's files are written before its call returns, and the ObjectRefs may have been lost with the worker); a
  track whose call was lost `MAX_ATTEMPTS` times fails (it may be what kills the worker).
The watchdog pings every worker that has calls in flight; one that does not answer within `stall_seconds` (a hung
process, a stopped one) is killed, and the rules above take over. It also looks, every PING_EVERY_S, for cards that
no alive Ray node offers any more: a lost node's actors would otherwise wait in Ray's "restarting" state (their
card's resource is gone) until the stall timeout; their calls are given up at once instead. Calls are idempotent
(keyed, atomic writes), so running a stage again gives the same bytes.
"""
from __future__ import annotations

import time
from dataclasses import replace

MAX_REPLACEMENTS = 3     # fresh workers per card before the card is retired
MAX_ATTEMPTS = 3         # lost calls per track and stage before the track fails
REPLACE_TIMEOUT_S = 300.0
PING_EVERY_S = 5.0       # a busy worker is pinged this often


def worker_lost(exc: BaseException) -> bool:
    """Did the call fail because its worker (or the node holding its inputs) went away, not because of the work?"""
    import ray.exceptions as rex

    lost = (rex.RayActorError, rex.ObjectLostError, rex.WorkerCrashedError, rex.NodeDiedError)
    return isinstance(exc, lost) or isinstance(getattr(exc, "cause", None), lost)


def offered_resources() -> set[str]:
    """The resources the alive Ray nodes offer (a lost node's cards are not among them)."""
    import ray

    return {r for node in ray.nodes() if node.get("Alive") for r in node.get("Resources", {})}


def card_offered(resource: str) -> bool:
    return resource in offered_resources()


def _comes_up(actor, resource: str) -> bool:
    """Wait for a fresh worker to answer, up to REPLACE_TIMEOUT_S, giving up early once no alive node offers its
    card (Ray may declare a lost node dead only some seconds after the first call on it failed)."""
    import ray

    ping, deadline = actor.report.remote(), time.monotonic() + REPLACE_TIMEOUT_S
    while time.monotonic() < deadline:
        if ray.wait([ping], timeout=PING_EVERY_S)[0]:
            try:
                ray.get(ping)
                return True
            except Exception:
                return False
        if not card_offered(resource):
            return False
    return False


class Workers:
    """The album's worker actors by dispatch slot, with what it takes to replace one."""

    def __init__(self, slots: dict, specs: dict, launch, stall_seconds: float):
        self.slots, self.specs, self.launch = dict(slots), specs, launch
        self.stall_seconds = stall_seconds
        self.replaced: dict[str, int] = {}            # card worker name → replacements so far
        self.retired: set[str] = set()                # dispatch slot ids that take no more work
        self.pings: dict[int, tuple[object | None, float]] = {}   # id(actor) → (ping ref or None: answered, sent)
        self.lost_cards: set[str] = set()             # card resources no alive node offers (checked every ping)
        self.nodes_checked = -PING_EVERY_S

    def __getitem__(self, slot: str):
        return self.slots[slot]

    def replace(self, slot: str, dead) -> tuple[list[str], bool]:
        """The actor behind `slot` is lost. Start a fresh one for all its slots unless that was already done for
        this very actor (several of its calls fail at once) → (the slots retired by this loss, whether a fresh
        worker was started now)."""
        import ray

        if slot in self.retired or self.slots[slot] is not dead:   # another of its calls got here first
            return [], False
        spec = self.specs[slot]
        mine = [s for s, a in self.slots.items() if a is dead]
        self.pings.pop(id(dead), None)
        ray.kill(dead, no_restart=True)
        count = self.replaced.get(spec.name, 0) + 1
        self.replaced[spec.name] = count
        fresh = None
        if count <= MAX_REPLACEMENTS and card_offered(spec.card.resource):
            fresh = self.launch(spec)
            if not _comes_up(fresh, spec.card.resource):    # it cannot load, or its node is gone after all
                ray.kill(fresh, no_restart=True)
                fresh = None
        if fresh is None:
            self.retired.update(mine)
            return mine, False
        for s in mine:
            self.slots[s] = fresh
        return [], True

    def move(self, stage: str, lost: str) -> str | None:
        """`stage` has no worker left (`lost` was its last slot). Give it to a surviving card: the card's worker, if
        it already has the stage's engine, else a fresh worker for that card with the engine added (the old one is
        stopped: its running calls come back as lost and go again) → the new dispatch slot's id, or None when no
        card is left or the wider worker does not come up (the stage's tracks then fail as before)."""
        import ray

        from .workers import ENGINE

        alive = [s for s in self.slots if s not in self.retired]
        if not alive:
            return None
        host = alive[0]
        actor, spec, gone = self.slots[host], self.specs[host], self.specs[lost]
        slot = f"{stage}@{host.split('@', 1)[1]}"
        if ENGINE[stage] not in spec.engines:
            engines = spec.engines + (ENGINE[stage],)
            wider = replace(spec, engines=engines, name=f"{'+'.join(engines)}@{host.split('@', 1)[1]}",
                            **({"rows": gone.rows, "capacity": gone.capacity} if ENGINE[stage] == "ar" else {}))
            mine = [s for s, a in self.slots.items() if a is actor]
            self.pings.pop(id(actor), None)
            ray.kill(actor, no_restart=True)
            actor = self.launch(wider)
            if not _comes_up(actor, wider.card.resource):
                ray.kill(actor, no_restart=True)
                self.retired.update(mine)
                return None
            for s in mine:
                self.slots[s], self.specs[s] = actor, wider
            spec = wider
        self.slots[slot], self.specs[slot] = actor, spec
        return slot

    def watch(self, busy: set[str]) -> list[tuple[str, object, str]]:
        """Ping the actors of the busy slots every PING_EVERY_S; → (slot, actor, why) for each that has left a ping
        unanswered for stall_seconds, or whose card's node is gone (the caller kills it, which turns its calls into
        lost ones)."""
        import ray

        now = time.monotonic()
        if now - self.nodes_checked >= PING_EVERY_S:
            self.nodes_checked = now
            self.lost_cards = {spec.card.resource for spec in self.specs.values()} - offered_resources()
        actors = {id(self.slots[s]): (s, self.slots[s]) for s in busy if s not in self.retired}
        self.pings = {key: ping for key, ping in self.pings.items() if key in actors}
        pending = [ref for ref, _ in self.pings.values() if ref is not None]
        answered = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        stuck = []
        for key, (slot, actor) in actors.items():
            if self.specs[slot].card.resource in self.lost_cards:
                stuck.append((slot, actor, "lost its node"))
                self.pings.pop(key, None)
                continue
            ref, sent = self.pings.get(key, (None, -PING_EVERY_S))
            if ref is not None and ref in answered:
                ref = None
            if ref is not None and now - sent > self.stall_seconds:
                stuck.append((slot, actor, f"answered no ping for {self.stall_seconds:.0f} s"))
                self.pings.pop(key)
                continue
            if ref is None and now - sent >= PING_EVERY_S:
                ref, sent = actor.report.remote(), now
            self.pings[key] = (ref, sent)
        return stuck
