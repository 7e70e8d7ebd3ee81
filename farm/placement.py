"""From the planner's `Plan` to running workers: one actor per (card, engine), shared by the stages it hosts.

plan and semantic on the same card share one AR engine (the same weights serve both); acoustic and decode get
their own. Actors on one card split it evenly in Ray's accounting of that card's resource. In `--exact` mode every
worker handles one track at a time, which is the sequential path's numerics.
"""
from __future__ import annotations

from cluster.placement import plan as make_plan
from cluster.roles import PlanOptions
from cluster.workload import ModelShape, TrackShape

from .jobs import TrackJob
from .raycluster import Runtime
from .workers import ARWorker, AcousticWorker, CardRef, DecodeWorker, WorkerSpec, actor_options

ENGINE = {"plan": "ar", "semantic": "ar", "acoustic": "acoustic", "decode": "decode"}
ACTOR = {"ar": ARWorker, "acoustic": AcousticWorker, "decode": DecodeWorker}


def plan_for(runtime: Runtime, jobs: list[TrackJob], ckpt, exact: bool = False):
    """Plan the album on the runtime's cards. Real or virtual GPUs are planned for the yue2-3b shapes (what the
    placement would be with the real weights); a CPU-only farm is planned for the checkpoint it runs."""
    gpus = [d for d in runtime.inventory if not d.is_cpu]
    shape = ModelShape.yue2_3b() if gpus or ckpt.cfg.name == "yue2-3b" else ModelShape.tiny()
    tracks = [track_shape(job, shape, reference=shape.name != ckpt.cfg.name) for job in jobs]
    options = PlanOptions(model=shape, max_batch=1 if exact else 16,
                          cpu_threads=max((d.sm_count for d in runtime.inventory if d.is_cpu), default=2))
    if runtime.profile is not None:
        options = PlanOptions.for_profile(runtime.profile, model=shape, max_batch=options.max_batch)
    plan = make_plan(gpus or runtime.inventory, tracks, options)
    if not plan.runnable:
        from .errors import UserError

        raise UserError(f"this cluster cannot run stage(s) {', '.join(plan.unrunnable)}:\n{plan.describe()}")
    return plan


def track_shape(job: TrackJob, shape: ModelShape, reference: bool) -> TrackShape:
    """The planner's view of a track: its token budgets (a reference-length track when planning for yue2-3b
    shapes with a smaller checkpoint)."""
    if reference:
        return TrackShape.reference()
    s = job.settings
    return TrackShape(s.semantic.max_tokens / 25.0, s.plan.max_tokens, s.semantic.max_tokens,
                      cfg_branches=2 if job.request.cfg_scale != 1.0 else 1, title=job.title)


def ar_geometry(jobs: list[TrackJob], ckpt) -> tuple[int, int]:
    """(KV rows per track, tokens per row) for this album: 2 rows when any track uses CFG; the longest AR need."""
    from stages.song import ar_tokens_needed

    needs = [ar_tokens_needed(ckpt, j.request, j.settings) for j in jobs]
    capacity = max(max(n.get("plan", 0), n["semantic"]) for n in needs)
    return (2 if any(j.request.cfg_scale != 1.0 for j in jobs) else 1), capacity


def start_workers(plan, runtime: Runtime, paths, store_url: str, opts, jobs: list[TrackJob], ckpt) -> dict:
    """Start the actors and wait until each has loaded its weights; → {dispatch slot id: actor handle}."""
    import ray

    branches, capacity = ar_geometry(jobs, ckpt)
    devices = {d.key: d for d in runtime.inventory}
    groups: dict[tuple[str, str], list] = {}
    for w in plan.workers:
        groups.setdefault((w.card, ENGINE[w.stage]), []).append(w)
    per_card: dict[str, int] = {}
    for card, _ in groups:
        per_card[card] = per_card.get(card, 0) + 1
    handles, slots = {}, {}
    for (card, engine), planned in groups.items():
        device = devices[card]
        ref = CardRef(device.node, device.name, device.uuid, device.virtual, device.is_cpu)
        rows = 2 if opts.exact else branches * sum(w.batch for w in planned)
        spec = WorkerSpec(engine, str(paths.model_dir), str(paths.vae_dir), store_url, ref, opts.threads, rows,
                          None if opts.exact else capacity, opts.exact, name=f"{engine}@{card}")
        actor = ACTOR[engine].options(**actor_options(spec, 1.0 / per_card[card])).remote(spec)
        handles[(card, engine)] = actor
        for w in planned:
            slots[f"{w.stage}@{w.card}"] = actor
    ray.get([a.report.remote() for a in handles.values()])       # fail here, not mid-album, if a worker can't load
    return slots


def worker_reports(slots: dict[str, object]) -> dict[str, dict]:
    import ray

    return {slot: ray.get(actor.report.remote()) for slot, actor in slots.items()}
