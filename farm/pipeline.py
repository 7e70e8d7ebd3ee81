"""The streaming loop of `farm render`: dispatch ready track-stages to free worker slots, collect each finished
call's `StageEvent`, repeat until nothing runs.

`cluster.dispatch` decides (the same rule the simulator runs); this loop submits each call with the previous
stage's ObjectRef (or `FromStore` when an earlier run made it), logs every event (eventlog, render.log, the
progress board, the live view), hands finished tracks to the mastering threads, and keeps the album going when a
stage fails (its track only) or a worker or card is lost (recovery.py). The driver (driver.py) sets it up.
"""
from __future__ import annotations

import time
from dataclasses import replace

from cluster import dispatch

from . import logs, recovery
from .jobs import FromStore, StageEvent, TrackJob
from .progress import Board
from .takes import AWAITING


class Pipeline:
    """The streaming loop: dispatch ready track-stages to free worker slots, collect events, repeat."""

    def __init__(self, jobs, todo, starts, workers, plan, log, progress, store):
        self.store = store
        self.jobs = {j.number: j for j in todo}
        self.todo, self.starts, self.workers, self.log = todo, starts, workers, log
        self.state = dispatch.new_state(dispatch.workers_from_plan(plan) if todo else [],
                                        [j.number for j in todo], plan.ar_window)
        for j in todo:
            if starts[j.key] or not j.request.has_plan_stage:
                dispatch.start_at(self.state, j.number, j.stages[starts[j.key]])
            if j.to_run != j.stages:
                dispatch.stop_after(self.state, j.number, j.to_run[-1])
        self.refs: dict[int, dict[str, object]] = {j.number: {} for j in todo}
        self.inflight: dict[object, tuple[int, str, str, object]] = {}   # event ref → (track, stage, slot, actor)
        self.failures: dict[str, str] = {}
        self.attempts: dict[tuple[int, str], int] = {}              # lost calls per (track, stage)
        self.board = Board(jobs, starts, progress)
        now = time.time()
        self.ready_at = {(j.number, j.stages[starts[j.key]]): now for j in todo}
        self.status = {j.key: "queued" if j in todo else _resting(j, starts[j.key]) for j in jobs}
        self.all_jobs, self.view, self.master = jobs, None, None
        self.drained = time.monotonic()

    def _note(self, text: str) -> None:
        self.board.note(text)
        logs.log.warning("%s", text, extra=logs.SHOWN)

    def _drain(self) -> None:
        """The workers' log lines since the last drain, into render.log (a worker that does not answer is skipped:
        the watchdog deals with it)."""
        import ray

        self.drained = time.monotonic()
        actors = {id(a): a for a in self.workers.slots.values()}
        refs = {a.drain_logs.remote(): a for a in actors.values()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=5.0)
        for ref in ready:
            try:
                logs.write_worker_lines(ray.get(ref))
            except Exception as exc:       # a lost worker: its lines are gone with it
                logs.log.debug("no log lines from a worker: %s", exc)

    def run(self) -> dict[str, str]:
        import ray

        try:
            self._dispatch()
            while self.inflight:
                ready, _ = ray.wait(list(self.inflight), num_returns=1, timeout=1.0)
                if ready:
                    self._collect(ready[0])
                    self._dispatch()
                for slot, actor, why in self.workers.watch({w for _, _, w, _ in self.inflight.values()}):
                    self._note(f"worker {slot} {why}: stopping it; its tracks go again")
                    ray.kill(actor, no_restart=True)
                if self.view is not None:
                    self.view.tick()
                if time.monotonic() - self.drained >= DRAIN_EVERY_S:
                    self._drain()
            self._strand()
        finally:
            self._drain()
            self.board.close()
        return self.failures

    def live_state(self) -> dict:
        """Queues, running calls and each track's status, for the live view."""
        running: dict[str, int] = {}
        for _, stage, _, _ in self.inflight.values():
            running[stage] = running.get(stage, 0) + 1
        todo = {j.key: j for j in self.todo}
        return {"queues": {s: len(q) for s, q in self.state.ready.items()}, "running": running,
                "tracks": [{"key": j.key, "title": j.title, "status": self.status[j.key],
                            "needs": list(j.to_run[self.starts[j.key]:]) if j.key in todo else []}
                           for j in self.all_jobs]}

    def _keep_details(self, key: str, stage: str, exc: Exception) -> str:
        """Write the whole error beside the album (a failed track's own folder may be what failed) → a pointer."""
        import re

        path = f"{FAILURES}/{key}.{stage}.txt"
        text = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(exc).__name__}: {exc}\n")     # Ray colours its tracebacks
        try:
            self.store.write_bytes(path, text.encode("utf-8", "replace"))
        except Exception:          # the store itself failing is already the message; nothing more to keep
            return ""
        return f" (details: {path})"

    def _dispatch(self) -> None:
        actions = dispatch.next_dispatch(self.state)
        dispatch.apply(self.state, actions)
        for action in actions:
            for track in action.tracks:
                self._submit(self.jobs[track], action.stage, action.worker)

    def _submit(self, job: TrackJob, stage: str, worker_id: str) -> None:
        actor = self.workers[worker_id]
        refs = self.refs[job.number]

        def made(s: str):       # an earlier stage's output: this run's ObjectRef, or "read it from the store"
            return refs.get(s, FromStore(job.key))

        if stage == "plan":
            refs["plan"], event = actor.plan.remote(job)
        elif stage == "semantic":
            refs["semantic"], event = actor.semantic.remote(job, made("plan"))
        elif stage == "acoustic":
            refs["acoustic"], event = actor.synthesize.remote(job, made("plan"), made("semantic"))
            refs.pop("plan", None)
        else:
            event = actor.decode.remote(job, made("acoustic"))
            refs.clear()             # the track's payloads are no longer needed: let Ray free them
        self.inflight[event] = (job.number, stage, worker_id, actor)
        self.status[job.key] = "running"
        self.board.running(job.key, stage)

    def _collect(self, ref) -> None:
        import ray

        track, stage, worker_id, actor = self.inflight.pop(ref)
        job = self.jobs[track]
        try:
            event = ray.get(ref)
        except Exception as exc:  # the stage failed: this track stops here, the album goes on
            if recovery.worker_lost(exc) and self._again(job, stage, worker_id, actor, exc):
                return
            message = _first_line(exc)
            self.failures[job.key] = f"{stage}: {message}{self._keep_details(job.key, stage, exc)}"
            logs.log.error("%s failed: %s", job.key, self.failures[job.key], extra=logs.SHOWN)
            now = time.time()
            event = StageEvent(track=job.key, stage=stage, worker=worker_id, host="", pid=0, gpu="", gpu_uuid="",
                               start=now, end=now, units=0, batch=0.0, batch_shape="", peak_bytes=0, ok=False,
                               error=message)
            dispatch.fail(self.state, worker_id, track)
        else:
            event = replace(event, queue_wait=max(0.0, event.start - self.ready_at.get((track, stage), event.start)))
            nxt = dispatch.finish(self.state, worker_id, track)
            if nxt is not None:
                self.ready_at[(track, nxt)] = event.end
        if job.key in self.failures:
            self.status[job.key] = "failed"
        elif stage == job.stages[-1]:
            self.status[job.key] = "done"
            if self.master is not None:
                self.master.submit(job.key)
        elif stage == job.to_run[-1]:
            self.status[job.key] = AWAITING
        self.log.add(event)
        self.log.flush()
        if event.ok:
            logs.log.info("%s %s done in %.2f s: %d units, batch %.1f, on %s (%s)", job.key, stage,
                          event.end - event.start, event.units, event.batch, event.gpu, event.worker)
        self.board.finished(event)
        if self.view is not None:
            self.view.event(event)

    def _again(self, job: TrackJob, stage: str, worker_id: str, actor, exc: Exception) -> bool:
        """The call's worker was lost: replace it (recovery.py) and queue the track for the stage again → True, or
        False when the track has lost this stage too often or no worker of the stage is left (it then fails)."""
        retired, fresh = self.workers.replace(worker_id, actor)
        why = type(exc).__name__
        for slot in retired:
            dispatch.retire(self.state, slot)
            self._note(f"worker {slot} lost ({why}) and could not be replaced: it takes no more work")
        for slot in retired:
            self._move(self.state.workers[slot])
        if fresh:
            self._note(f"worker {worker_id} lost ({why}): a fresh worker took its place")
        attempts = self.attempts[(job.number, stage)] = self.attempts.get((job.number, stage), 0) + 1
        if attempts >= recovery.MAX_ATTEMPTS or not dispatch.can_run(self.state, stage):
            return False
        dispatch.requeue(self.state, worker_id, job.number)
        self.refs[job.number].clear()         # earlier stages' ObjectRefs may be gone with the worker: use the store
        self.status[job.key] = "queued"
        self._note(f"{job.key}: {stage} goes again")
        return True

    def _move(self, lost: dispatch.WorkerSlot) -> None:
        """`lost` was retired; if its stage has no worker left, a surviving card takes it over (recovery.move)."""
        if dispatch.can_run(self.state, lost.stage):
            return
        slot = self.workers.move(lost.stage, lost.id)
        for retired in self.workers.retired - self.state.retired:   # the host's wider worker did not come up
            dispatch.retire(self.state, retired)
        if slot is None:
            return
        if slot not in self.state.workers:
            dispatch.add_worker(self.state, replace(lost, id=slot, card=slot.split("@", 1)[1]))
        self._note(f"{lost.stage}: its card was lost; {slot.split('@', 1)[1]} takes it over")

    def _strand(self) -> None:
        """Tracks still waiting when nothing runs: their stage has no worker left."""
        for stage, queue in self.state.ready.items():
            for track in list(queue):
                job = self.jobs[track]
                self.failures[job.key] = f"{stage}: no worker left for this stage (its cards were lost)"
                self.status[job.key] = "failed"
                queue.remove(track)


DRAIN_EVERY_S = 5.0     # how often the workers' log lines are fetched into render.log
FAILURES = ".failures"       # <track>.<stage>.txt: the whole error (with the worker's traceback) of a failed stage


def _resting(job: TrackJob, finished: int) -> str:
    """The status of a track this render does not run: finished, held for approval, or left for another run."""
    if finished == len(job.stages):
        return "done"
    return AWAITING if job.hold_after and finished == len(job.to_run) else "incomplete"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    lines = [line for line in text if line.strip()]
    return lines[-1][:500] if lines else type(exc).__name__
