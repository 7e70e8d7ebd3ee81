"""From the planner's `Plan` to running workers: one actor per card, hosting the stages placed on it.

plan and semantic on a card share one AR engine (the same weights serve both). In `--exact` mode the AR engines run
the reference sampler, one track at a time.
"""
from __future__ import annotations

from cluster.placement import plan as make_plan
from cluster.roles import PlanOptions
from cluster.workload import ModelShape, TrackShape

from .jobs import TrackJob
from .raycluster import Runtime
from .workers import ENGINE, CardRef, CardWorker, Secrets, WorkerSpec, actor_options


def plan_for(runtime: Runtime, jobs: list[TrackJob], ckpt, exact: bool = False, pins: tuple[str, ...] = (),
             formats: tuple[str, str] = ("bf16", "bf16")):
    """Plan the album on the runtime's cards. Real or virtual GPUs are planned for the yue2-3b shapes (what the
    placement would be with the real weights); a CPU-only farm is planned for the checkpoint it runs. `pins`
    (STAGE=CARD) replace the planner's choice with the user's. `formats`: the AR weights' and KV cache's formats
    the render runs (the user's choice: they change the songs, so the planner does not pick them here)."""
    if pins:
        return pinned_plan(runtime, jobs, pins, exact, formats)
    try:
        plan = make_plan(*planning_inputs(runtime, jobs, ckpt, exact, formats))
    except ValueError as exc:      # every allowed AR format forbidden by the profile
        from .errors import UserError

        raise UserError(f"{runtime.profile.path if runtime.profile else 'this cluster'}: {exc}") from None
    if not plan.runnable:
        from .errors import UserError

        raise UserError(f"this cluster cannot run stage(s) {', '.join(plan.unrunnable)}:\n{plan.describe()}")
    return plan


def planning_inputs(runtime: Runtime, jobs: list[TrackJob], ckpt, exact: bool = False,
                    formats: tuple[str, str] = ("bf16", "bf16")):
    """(cards, track shapes, options) the planner and the simulator see for this album on this runtime."""
    gpus = [d for d in runtime.inventory if not d.is_cpu]
    shape = ModelShape.yue2_3b() if gpus or ckpt.cfg.name == "yue2-3b" else ModelShape.tiny()
    shape = shape.with_formats(*formats)
    tracks = [track_shape_of(job, ckpt, reference=shape.name != ckpt.cfg.name) for job in jobs]
    from .plan_commands import options_for

    batch = 1 if exact else PlanOptions().max_batch
    options = options_for(runtime.profile, model=shape, max_batch=batch, ar_formats=(formats[0],),
                          **({} if runtime.profile else {"cpu_threads": max(
                              (d.sm_count for d in runtime.inventory if d.is_cpu), default=2)}))
    return gpus or runtime.inventory, tracks, options


def forecast(runtime: Runtime, jobs: list[TrackJob], ckpt, plan, exact: bool = False,
             formats: tuple[str, str] = ("bf16", "bf16")) -> float | None:
    """The simulator's makespan for `plan` on these tracks (seconds), or None for a pinned plan."""
    if plan.method == "pinned":
        return None
    from cluster.simulate import SimOptions, simulate

    cards, tracks, options = planning_inputs(runtime, jobs, ckpt, exact, formats)
    return simulate(plan, cards, tracks, options, SimOptions(record_jobs=False)).makespan_s


def pinned_plan(runtime: Runtime, jobs: list[TrackJob], pins: tuple[str, ...], exact: bool,
                formats: tuple[str, str] = ("bf16", "bf16")):
    """A plan from the user's STAGE=CARD pins (CARD: node/index, or the index when there is one node). Every stage
    must be pinned; stages on one card split it evenly."""
    from cluster.plans import Plan, Worker

    from .errors import UserError
    from cluster.workload import STAGES

    cards = {d.key: d for d in runtime.inventory}
    nodes = {d.node for d in runtime.inventory}
    chosen: dict[str, list] = {}
    for pin in pins:
        stage, _, card = pin.partition("=")
        if stage not in STAGES:
            raise UserError(f"--pin {pin}: unknown stage {stage!r} (plan, semantic, acoustic, decode)")
        key = card if "/" in card or len(nodes) != 1 else f"{next(iter(nodes))}/{card}"
        if key not in cards:
            raise UserError(f"--pin {pin}: no card {key!r}; cards: {', '.join(cards)}")
        chosen.setdefault(stage, []).append(cards[key])
    missing = [s for s in STAGES if s not in chosen]
    if missing:
        raise UserError(f"--pin must place every stage; missing: {', '.join(missing)}")
    per_card: dict[str, int] = {}
    for devices in chosen.values():
        for d in devices:
            per_card[d.key] = per_card.get(d.key, 0) + 1
    batch = 1 if exact else min(32, len(jobs))
    workers = tuple(Worker(stage=stage, card=d.key, node=d.node, index=d.index, uuid=d.uuid, model=d.name,
                           share=1.0 / per_card[d.key], batch=batch if stage in ("plan", "semantic") else 1,
                           decode_core=1024 if stage == "decode" else None, card_seconds=1.0, latency_s=0.0)
                    for stage in STAGES for d in chosen[stage])
    return Plan(tracks=len(jobs), audio_seconds=0.0, model="pinned", method="pinned", assignments_tried=0,
                workers=workers, cards=(), stages=(), bottleneck=None, makespan_s=None, throughput_tracks_s=0.0,
                one_track_s=None, unrunnable=(), refusals=(),
                reasons=tuple(f"{w.stage} pinned to {w.card} ({w.model}) by --pin" for w in workers),
                reserve_gib=0.0, shared_process=True, ar_format=formats[0], kv_format=formats[1])


def describe(plan) -> str:
    if plan.method != "pinned":
        return plan.describe()
    return "Placement pinned by --pin:\n" + "\n".join(f"  - {r}" for r in plan.reasons)


def track_shape_of(job: TrackJob, ckpt, reference: bool) -> TrackShape:
    """The planner's view of a track: its token budgets and real prompt (a reference-length track when planning
    for yue2-3b shapes with a smaller checkpoint)."""
    from stages.protocol import plan_prefix

    from .jobs import track_shape

    if reference:
        return TrackShape.reference()
    prompt = len(plan_prefix(job.request, ckpt.tokenizer, ckpt.cfg.tokens))
    return track_shape(job.request, job.settings, job.title, prompt, job.candidates.count)


def ar_geometry(jobs: list[TrackJob], ckpt) -> tuple[int, int]:
    """(KV rows per track, tokens per row) for this album: 2 rows when any track uses CFG; the longest AR need."""
    from stages.requests import ar_tokens_needed

    needs = [ar_tokens_needed(ckpt, j.request, j.settings) for j in jobs]
    capacity = max(max(n.get("plan", 0), n["semantic"]) for n in needs)
    return (2 if any(j.request.cfg_scale != 1.0 for j in jobs) else 1), capacity


def start_workers(plan, runtime: Runtime, paths, store_url: str, opts, jobs: list[TrackJob], ckpt):
    """One actor per card hosting the engines of the stages placed there; waits until every one has loaded its
    weights (a worker that cannot load fails the render here, not mid-album).
    → ({dispatch slot id: actor}, {dispatch slot id: its actor's WorkerSpec}); the spec starts a replacement."""
    import ray

    branches, capacity = ar_geometry(jobs, ckpt)
    devices = {d.key: d for d in runtime.inventory}
    by_card: dict[str, list] = {}
    for w in plan.workers:
        by_card.setdefault(w.card, []).append(w)
    slots, specs = {}, {}
    for card, planned in by_card.items():
        d = devices[card]
        engines = tuple(dict.fromkeys(ENGINE[w.stage] for w in planned))
        rows = 2 if opts.exact else branches * sum(w.batch for w in planned if ENGINE[w.stage] == "ar")
        spec = WorkerSpec(engines, str(paths.model_dir), str(paths.vae_dir), store_url,
                          CardRef(d.node, d.name, d.uuid, d.virtual, d.is_cpu), opts.threads, rows,
                          None if opts.exact else capacity, opts.exact, name=f"{'+'.join(engines)}@{card}",
                          ar_checkpoint=str(opts.ar_checkpoint) if opts.ar_checkpoint else None,
                          kv_cache=opts.kv_cache, ar_format=opts.ar_format)
        actor = launch(spec)
        for w in planned:
            slots[f"{w.stage}@{w.card}"], specs[f"{w.stage}@{w.card}"] = actor, spec
    ray.get([a.report.remote() for a in set(slots.values())])
    return slots, specs


def launch(spec: WorkerSpec):
    """Start one card's worker actor (its weights load in the background; `report` answers once they have)."""
    return CardWorker.options(**actor_options(spec)).remote(spec, Secrets.from_environment())


def card_facts(plan, runtime: Runtime) -> list[dict]:
    """The plan's cards as the live view shows them."""
    devices = {d.key: d for d in runtime.inventory}
    cards: dict[str, dict] = {}
    for w in plan.workers:
        d = devices[w.card]
        c = cards.setdefault(w.card, {"card": w.card, "model": d.name, "uuid": d.uuid, "virtual": d.virtual or
                                      d.is_cpu, "memory_total": d.vram_bytes, "stages": []})
        if w.stage not in c["stages"]:
            c["stages"].append(w.stage)
    return list(cards.values())


def worker_reports(slots: dict[str, object]) -> dict[str, dict]:
    import ray

    return {slot: ray.get(actor.report.remote()) for slot, actor in slots.items()}
