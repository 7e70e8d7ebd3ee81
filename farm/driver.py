"""`farm render`: an album streamed through stage workers placed by the planner, resumable, byte-for-byte
reproducible.

The driver only decides and moves references: it validates the album, finds each track's first missing stage,
asks the planner where each stage runs, starts one worker actor per card, and then loops —
`cluster.dispatch.next_dispatch` says which idle worker slot takes which ready track, the call is submitted with
the previous stage's ObjectRef (or `FromStore` when an earlier run made it), and each finished call's small
`StageEvent` (never tokens, latents or audio) goes to metrics.parquet and the progress board. A failed stage fails
its track only; the others go on.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from cluster import dispatch

from . import eventlog, logs, recovery, trackstore
from .album import load_album
from .errors import UserError
from .jobs import FromStore, StageEvent, TrackJob, album_jobs
from .models import resolve_model
from .progress import Board
from .store import RenderLock, open_store


class Stopped(BaseException):
    """SIGTERM during a render, raised in the main thread like KeyboardInterrupt is for SIGINT."""

    exit_code = 143


@dataclass(frozen=True)
class RenderOptions:
    out: str | None = None
    model: str | None = None
    vae: str | None = None
    address: str | None = None
    cluster: Path | None = None
    force: bool = False
    exact: bool = False
    threads: int = 1
    pins: tuple[str, ...] = ()           # STAGE=CARD: the user's placement instead of the planner's
    dashboard: tuple[str, int] | None = None   # (host, port) of the live page; None: no page
    progress: bool | None = None          # None: a live table on a terminal, log lines otherwise
    stall_seconds: float = 600.0          # a busy worker that answers no ping for this long is replaced
    ar_window: int | None = None          # most tracks in the AR stages at once; None: the plan's, 0: no cap
    log_level: str = "info"               # what render.log in the album folder keeps (farm/logs.py)


@dataclass
class RenderResult:
    out: str
    run_id: str
    plan: object                       # cluster.plans.Plan: where each stage was placed, and why
    events: list[StageEvent]
    rows: list[dict]
    failures: dict[str, str]
    wall_seconds: float
    workers: dict[str, dict] = field(default_factory=dict)   # worker id → where it reported running
    forecast_s: float | None = None    # the simulator's makespan for the plan, before the render started


def prepare(album_path: Path, opts: RenderOptions):
    """Everything that can fail on bad input, before Ray starts or anything is written: the spec, the checkpoint
    (headers), every track against it, the profile, the flags, and last the output location (a probe write)."""
    from stages.requests import open_checkpoint
    from stages.weights import verify_checkpoint

    from .identity import checkpoint_identity

    album = load_album(album_path)
    paths = resolve_model(opts.model or album.model or "tiny", opts.vae,
                          flag="--model" if opts.model else f"{album.path}: model")
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    verify_checkpoint(paths.model_dir, paths.vae_dir, ckpt.cfg)
    identity = checkpoint_identity(paths)
    jobs = album_jobs(album, ckpt, identity, "exact" if opts.exact else "fast")
    check_options(opts)
    flag = "--out" if opts.out else "the default output folder"
    store = open_store(opts.out or f"out/{album.slug}", flag)
    if not opts.force and not trackstore.is_album_folder(store, [j.key for j in jobs]):
        raise UserError(f"{flag} {store.url} holds files that are not this album's; choose an empty or new folder "
                        f"(--out), or pass --force to render into it anyway")
    return album, paths, ckpt, identity, jobs, store


def check_options(opts: RenderOptions) -> None:
    """Flags that would otherwise fail only after Ray has started and the weights have loaded."""
    from cluster.profiles import load_profile

    from cluster.workload import STAGES

    if opts.threads < 1:
        raise UserError(f"--threads must be >= 1, got {opts.threads}")
    logs.level_of(opts.log_level)
    if opts.cluster is not None:
        load_profile(opts.cluster)
    for pin in opts.pins:
        stage, sep, card = pin.partition("=")
        if not sep or not card or stage not in STAGES:
            raise UserError(f"--pin {pin}: expected STAGE=CARD with STAGE one of {', '.join(STAGES)}")
    if opts.dashboard is not None:
        from .dashboard.server import check_port

        check_port(*opts.dashboard)
    if opts.address:
        from .raycluster import check_address

        check_address(opts.address)


def render_album(album_path: Path, opts: RenderOptions) -> RenderResult:
    """Validate, take the folder's render lock, render, release."""
    started = time.time()
    album, paths, ckpt, identity, jobs, store = prepare(album_path, opts)
    lock = RenderLock(store, "--out" if opts.out else "the default output folder")
    try:
        store.remove_tree(FAILURES)      # an earlier run's failures: this run says again what still fails
        with logs.album_log(store, opts.log_level):
            logs.log.info("render of %s (%d tracks) into %s", album.path, len(jobs), store.url)
            return _render(album, paths, ckpt, identity, jobs, store, opts, started)
    finally:
        lock.release()


def _render(album, paths, ckpt, identity, jobs, store, opts: RenderOptions, started: float) -> RenderResult:
    from . import deploy, manifest, mastering, raycluster
    from .live import LiveView
    from .report import write_report

    done = {} if opts.force else {j.key: trackstore.finished_stages(store, j) for j in jobs}
    starts = {j.key: len(done.get(j.key, {})) for j in jobs}
    todo = [j for j in jobs if starts[j.key] < len(j.stages)]
    runtime = raycluster.start(opts.address, opts.cluster)
    print(runtime.describe(), flush=True)
    view = None
    try:
        plan = deploy.plan_for(runtime, jobs, ckpt, exact=opts.exact, pins=opts.pins)
        if opts.ar_window is not None:
            plan = replace(plan, ar_window=opts.ar_window or None)
        print(deploy.describe(plan), flush=True)
        logs.log.info("%s", deploy.describe(plan))
        predicted = deploy.forecast(runtime, todo, ckpt, plan, opts.exact) if todo else None
        if predicted is not None:
            print(f"simulated makespan of this plan: {predicted:,.1f} s", flush=True)
            logs.log.info("simulated makespan of this plan: %.1f s", predicted)
        run_id = eventlog.new_run_id()
        recovered = eventlog.recover_events(store, run_id, done)
        if recovered:
            print(f"metrics: {recovered} stage call(s) that finished after an earlier render stopped were logged "
                  f"from their stage markers", flush=True)
        log = eventlog.EventLog(store, run_id)
        slots, specs, where = {}, {}, {}
        if todo:
            slots, specs = deploy.start_workers(plan, runtime, paths, store.url, opts, todo, ckpt)
            where = deploy.worker_reports(slots)
        workers = recovery.Workers(slots, specs, deploy.launch, opts.stall_seconds)
        pipeline = Pipeline(jobs, todo, starts, workers, plan, log, opts.progress, store)
        pipeline.master = mastering.AlbumMaster(store, album, jobs, identity)
        for job in jobs:
            if job not in todo:              # finished in an earlier run: master it while the others render
                pipeline.master.submit(job.key)
        view = LiveView(store, run_id, album.title, deploy.card_facts(plan, runtime), pipeline.live_state,
                        opts.dashboard)
        pipeline.view = view
        try:
            failures = pipeline.run()
        except BaseException:          # Ctrl-C, SIGTERM: keep what finished, say the album stopped
            log.flush()
            view.close("stopped")
            pipeline.master.abandon()
            raise
        try:
            log.flush(strict=True)
            eventlog.compact(store)
            rows = manifest.write_album(store, album, jobs, failures, identity, ckpt.cfg)
            mastered = pipeline.master.finish({r["folder"] for r in rows if r["status"] == "done"})
            if mastered is not None:
                logs.log.info("mastered %d track(s) to %.1f LUFS, ceiling %.1f dBTP%s", len(mastered["tracks"]),
                              album.master.lufs, album.master.true_peak,
                              "; album.flac and album.cue written" if "album_samples" in mastered else "")
            view.close()
            write_report(store)
        except OSError as exc:         # a full disk, most likely: what finished is kept, a rerun completes it
            lost = "; ".join(f"{key}: {why}" for key, why in sorted(failures.items()))
            raise UserError(f"{store.url}: could not write the album's own files ({exc.strerror or exc}); the "
                            f"stages that finished are kept — make room and run the same command again to finish"
                            + (f" (failed: {lost})" if lost else "")) from None
    finally:
        runtime.stop()
        if view is not None:
            view.stop_server()
    return RenderResult(store.url, run_id, plan, log.events, rows, failures, time.time() - started, where,
                        predicted)


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
        self.refs: dict[int, dict[str, object]] = {j.number: {} for j in todo}
        self.inflight: dict[object, tuple[int, str, str, object]] = {}   # event ref → (track, stage, slot, actor)
        self.failures: dict[str, str] = {}
        self.attempts: dict[tuple[int, str], int] = {}              # lost calls per (track, stage)
        self.board = Board(jobs, starts, progress)
        now = time.time()
        self.ready_at = {(j.number, j.stages[starts[j.key]]): now for j in todo}
        self.status = {j.key: "queued" if j in todo else "done" for j in jobs}
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
                            "needs": list(j.stages[self.starts[j.key]:]) if j.key in todo else []}
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


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    lines = [line for line in text if line.strip()]
    return lines[-1][:500] if lines else type(exc).__name__
