"""`farm render`: an album streamed through stage workers placed by the planner, resumable, byte-for-byte
reproducible.

The driver only decides and moves references: it validates the album, finds each track's first missing stage,
asks the planner where each stage runs, starts one worker actor per card, and runs the streaming loop
(pipeline.py) — each finished call's small `StageEvent` (never tokens, latents or audio) goes to metrics.parquet
and the progress board; a failed stage fails its track only. Then the album's own files: manifest, mastering,
report.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import albumrecord, eventlog, logs, recovery, takes, trackstore
from .album import AlbumSpec, load_album
from .errors import UserError
from .jobs import StageEvent, album_jobs, track_has_plan_stage
from .models import resolve_model
from .pipeline import FAILURES, Pipeline
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
    ar_checkpoint: Path | None = None     # a quantised AR checkpoint for plan and semantic (`farm quantize`)
    kv_cache: str | None = None           # the AR engines' KV format (kv_cache.KV_FORMATS); None: the album's
    ar_format: str | None = None          # the AR step's weights (quant.FORMATS); None: the album's, else the
                                          # ar_checkpoint's format, else bf16
    approve: bool = False                 # stop each track after its plan stage: a person picks the score
    only: frozenset[str] | None = None    # render these track folders only (`farm rerender`); None: all


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


def prepare(album_path: Path | AlbumSpec, opts: RenderOptions, choose: tuple[str, dict] | None = None):
    """Everything that can fail on bad input, before Ray starts or anything is written: the spec, the checkpoint
    (headers), every track against it with the score chosen for it (the folder's take.json files, and `choose`:
    a new choice for one track, takes.choice), the profile, the flags, and the output location (a probe write).
    `album_path`: a spec file, or an album already read (an album folder's own record, for `farm rerender`)."""
    from stages.requests import open_checkpoint
    from stages.weights import verify_checkpoint

    from .identity import checkpoint_identity
    from .quantized import check_ar_checkpoint, check_ar_format, check_kv_cache

    album = album_path if isinstance(album_path, AlbumSpec) else load_album(album_path)
    paths = resolve_model(opts.model or album.model or "tiny", opts.vae,
                          flag="--model" if opts.model else f"{album.path}: model")
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    verify_checkpoint(paths.model_dir, paths.vae_dir, ckpt.cfg)
    # the flags win over the album's own AR options; the rest of the render reads them from opts
    opts = replace(opts, ar_checkpoint=opts.ar_checkpoint or album.ar_checkpoint,
                   kv_cache=opts.kv_cache or album.kv_cache or "bf16",
                   ar_format=opts.ar_format or album.ar_format)
    flag = "--ar-checkpoint" if opts.ar_checkpoint != album.ar_checkpoint else f"{album.path}: ar_checkpoint"
    ar_format = check_ar_checkpoint(opts.ar_checkpoint, ckpt.cfg, flag) if opts.ar_checkpoint else None
    check_kv_cache(opts.kv_cache)
    asked = "--ar-format" if opts.ar_format != album.ar_format else f"{album.path}: ar_format"
    opts = replace(opts, ar_format=check_ar_format(opts.ar_format, ar_format, asked))
    identity = checkpoint_identity(paths, opts.ar_checkpoint, opts.ar_format, opts.kv_cache)
    sampler = "exact" if opts.exact else "fast"
    jobs = album_jobs(album, ckpt, identity, sampler, hold=opts.approve)
    check_options(opts)
    flag = "--out" if opts.out else "the default output folder"
    store = open_store(opts.out or f"out/{album.slug}", flag)
    if not opts.force and not trackstore.is_album_folder(store, [j.key for j in jobs]):
        raise UserError(f"{flag} {store.url} holds files that are not this album's; choose an empty or new folder "
                        f"(--out), or pass --force to render into it anyway")
    chosen = takes.with_choices(store, album, choose)
    if chosen != album:       # scores chosen in the folder (or now) replace the spec's: their tracks are checked again
        jobs = album_jobs(chosen, ckpt, identity, sampler, hold=opts.approve)
    return album, paths, ckpt, identity, jobs, store, opts


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


def render_album(album_path: Path | AlbumSpec, opts: RenderOptions,
                 choose: tuple[str, dict] | None = None) -> RenderResult:
    """Validate, take the folder's render lock, render, release. `choose`: (track folder, takes.choice) — a new
    score for that track (`farm rerender`, `farm approve`), made its current take under the lock."""
    started = time.time()
    album, paths, ckpt, identity, jobs, store, opts = prepare(album_path, opts, choose)
    lock = RenderLock(store, "--out" if opts.out else "the default output folder")
    try:
        albumrecord.save(store, album, paths, opts)
        store.remove_tree(FAILURES)      # an earlier run's failures: this run says again what still fails
        with logs.album_log(store, opts.log_level):
            logs.log.info("render of %s (%d tracks) into %s", album.path, len(jobs), store.url)
            if choose is not None:
                _begin_take(store, album, ckpt, identity, opts, *choose)
            return _render(album, paths, ckpt, identity, jobs, store, opts, started)
    finally:
        lock.release()


def _begin_take(store, album, ckpt, identity, opts: RenderOptions, key: str, new: dict) -> None:
    """`new` (takes.choice) becomes track `key`'s score: its current take is kept first if it finished
    (farm/takes.py)."""
    track = next(t for t in album.tracks if t.folder == key)
    (now,) = album_jobs(takes.with_choices(store, replace(album, tracks=(track,))), ckpt, identity,
                        "exact" if opts.exact else "fast")
    finished = len(trackstore.finished_stages(store, now)) == len(now.stages)
    take = takes.begin(store, key, new, ckpt.tokenizer, from_plan_stage=track_has_plan_stage(track),
                       finished=finished)
    print(f"{key}: take {take}, score {takes.describe(new)}", flush=True)
    logs.log.info("%s: take %d, score %s", key, take, takes.describe(new))


def _render(album, paths, ckpt, identity, jobs, store, opts: RenderOptions, started: float) -> RenderResult:
    from . import deploy, manifest, mastering, raycluster
    from .live import LiveView
    from .report import write_report

    done = {} if opts.force else {j.key: trackstore.finished_stages(store, j) for j in jobs}
    starts = {j.key: len(done.get(j.key, {})) for j in jobs}
    todo = [j for j in jobs if starts[j.key] < len(j.to_run) and (opts.only is None or j.key in opts.only)]
    runtime = raycluster.start(opts.address, opts.cluster)
    print(runtime.describe(), flush=True)
    view = None
    try:
        formats = (opts.ar_format, opts.kv_cache)
        # a render of a few tracks (`farm rerender`) is placed for those, not for the whole album
        planned = todo if opts.only is not None and todo else jobs
        plan = deploy.plan_for(runtime, planned, ckpt, exact=opts.exact, pins=opts.pins, formats=formats)
        if opts.ar_window is not None:
            plan = replace(plan, ar_window=opts.ar_window or None, forecast_s=None)   # forecast below
        print(deploy.describe(plan), flush=True)
        logs.log.info("%s", deploy.describe(plan))
        predicted = deploy.forecast(runtime, todo, ckpt, plan, opts.exact, formats) if todo else None
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
            if len(done.get(job.key, {})) == len(job.stages):   # finished earlier: master it meanwhile
                pipeline.master.submit(job.key)
        view = LiveView(store, run_id, album.title, deploy.card_facts(plan, runtime), pipeline.live_state,
                        opts.dashboard, forecast_s=predicted)
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
