"""`farm plan`, `farm simulate` and `farm calibrate`: the planner and simulator of cluster/ on a profile or this host.

Knows how to turn the user's inputs (a profile, an album or a track count, a bench report) into the planner's
plain data; the decisions and the figures are cluster/'s.
"""
from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path

from cluster.calibration import calibration_dir, load_calibration, shipped_calibrations
from cluster.fitting import Measured, write_calibration
from cluster.gpus import GpuDevice, lookup, probe_nvml
from cluster.profiles import load_profile, profile_inventory
from cluster.roles import PlanOptions
from cluster.workload import FRAMES_PER_SECOND, STAGES, ModelShape, TrackShape, album_tracks

from .errors import UserError
from .models import configs_dir


def options_for(profile, **overrides) -> PlanOptions:
    """Plan options for a profile (or this host): every shipped calibration, each for its GPU model; the default
    one (cluster.calibration.default_calibration) for the others."""
    base = {"calibrations": shipped_calibrations(), **overrides}
    return PlanOptions.for_profile(profile, **base) if profile else PlanOptions(**base)


def inventory_for(profile_path: Path | None) -> tuple[list[GpuDevice], object]:
    if profile_path:
        profile = load_profile(profile_path)
        return profile_inventory(profile), profile
    return probe_nvml(socket.gethostname()), None


def workload_for(album: Path | None, tracks: int | None, seed: int, mean_seconds: float) -> list[TrackShape]:
    """An album's tracks at their token budgets (yue2-3b defaults plus its overrides), or N seeded song lengths."""
    if album is None:
        return album_tracks(tracks or 12, seed=seed, mean_seconds=mean_seconds)
    from .album import load_album
    from .jobs import track_request, track_settings, track_shape
    from .models import named_config

    cfg = named_config("yue2-3b")    # planning needs no checkpoint: the prompt is estimated from its characters
    return [track_shape(track_request(t), track_settings(t, cfg), t.title, estimated_prompt_tokens(t), t.plans)
            for t in load_album(album).tracks]


def estimated_prompt_tokens(track) -> int:
    """Without a tokenizer at hand: ~3.5 characters per BPE token for lyrics and tags (Qwen's vocabulary), plus the
    instruction; the render uses the real count."""
    return 40 + round(len(track.style + track.lyrics) / 3.5)


def format_options(album: Path | None, ar_format: str | None, kv_cache: str | None) -> dict:
    """PlanOptions fields for the AR formats: `ar_format` "auto" lets the planner choose among bf16, fp8 and
    nvfp4 (advice: a render runs the format it is given); None takes the album's (else bf16); likewise the KV cache
    (its "auto": bf16 or fp8)."""
    from stages.kv_cache import KV_FORMATS
    from stages.quant import FORMATS

    spec = None
    if album is not None and (ar_format is None or kv_cache is None):
        from .album import load_album

        spec = load_album(album)
    ar_format = ar_format or (spec and spec.ar_format) or "bf16"
    kv_cache = kv_cache or (spec and spec.kv_cache) or "bf16"
    if ar_format != "auto" and ar_format not in FORMATS:
        raise UserError(f"--ar-format: expected auto or one of {', '.join(FORMATS)}, got {ar_format!r}")
    if kv_cache != "auto" and kv_cache not in KV_FORMATS:
        raise UserError(f"--kv-cache: expected auto or one of {', '.join(KV_FORMATS)}, got {kv_cache!r}")
    return {"ar_formats": tuple(FORMATS) if ar_format == "auto" else (ar_format,),
            "kv_formats": tuple(KV_FORMATS) if kv_cache == "auto" else (),
            "model": ModelShape.yue2_3b().with_formats(kv_format=None if kv_cache == "auto" else kv_cache)}


def plan_command(profile_path: Path | None, album: Path | None, tracks: int | None, seed: int, mean_seconds: float,
                 as_json: bool, ar_format: str | None = None, kv_cache: str | None = None) -> str:
    from cluster.placement import plan

    inventory, profile = inventory_for(profile_path)
    options = options_for(profile, **format_options(album, ar_format, kv_cache))
    try:
        result = plan(inventory, workload_for(album, tracks, seed, mean_seconds), options)
    except ValueError as exc:
        raise UserError(f"{profile_path or 'this host'}: {exc}") from None
    return json.dumps(result.to_dict(), indent=2, default=str) if as_json else result.describe()


def simulate_command(profile_path: Path | None, album: Path | None, tracks: int | None, seed: int,
                     mean_seconds: float, as_json: bool, ar_format: str | None = None,
                     kv_cache: str | None = None) -> str:
    from cluster.placement import plan
    from cluster.simulate import simulate

    inventory, profile = inventory_for(profile_path)
    workload = workload_for(album, tracks, seed, mean_seconds)
    options = options_for(profile, **format_options(album, ar_format, kv_cache))
    try:
        chosen = plan(inventory, workload, options)
    except ValueError as exc:
        raise UserError(f"{profile_path or 'this host'}: {exc}") from None
    options = replace(options, model=options.model.with_formats(chosen.ar_format, chosen.kv_format))
    if not chosen.runnable:
        raise UserError(f"the plan cannot run stage(s) {', '.join(chosen.unrunnable)}:\n{chosen.describe()}")
    result = simulate(chosen, inventory, workload, options)
    return json.dumps(result.to_dict(), indent=2, default=str) if as_json else result.describe()


def measured_from_bench(report: dict, albums: tuple[dict, ...] = ()) -> Measured:
    """A `farm bench song --json` report → what the cost model is fitted to (one track alone, batch 1), plus the
    aggregate semantic-stage tokens/s of `farm bench album` reports at their batch size (AR batching points)."""
    env = report["environment"]
    if env.get("model") != "yue2-3b" or "gpu" not in env:
        raise UserError("calibrate from a `farm bench song` report of the yue2-3b shapes on a GPU")
    gpu = lookup(env["gpu"])
    if gpu is None:
        raise UserError(f"{env['gpu']} is not in the GPU catalogue; add it to cluster/gpus.py first")
    seconds = {row["stage"]: row["seconds"] for row in report["rows"]}
    track = TrackShape(env["semantic_tokens"] / FRAMES_PER_SECOND, env["plan_tokens"], env["semantic_tokens"],
                       prompt_tokens=env["prompt_tokens"], title="bench song")
    per_stage = {s: {1: track.generated_tokens(s) / seconds[s]} for s in ("plan", "semantic")}
    for album in albums:
        for row in album["stages"]:
            if row["stage"] in per_stage:
                per_stage[row["stage"]][round(row["max_batch"])] = row["per_second"]
    return Measured(gpu.model, track, seconds, dict(per_stage["semantic"]), per_stage,
                    source=f"farm bench song, {env['date']}, torch {env['torch']}"
                           + "".join(f" + bench album of {a['tracks']}" for a in albums),
                    decode_precision=env.get("decode_precision", "fp32"),     # reports before 2026-12-05: fp32
                    decode_seconds={r["precision"]: r["seconds"] for r in report.get("decode_precisions", [])})


# the keys each kind of report must hold for the commands that read it (a report of another kind is refused)
SONG_REPORT = ("farm bench song --json", ("environment", "rows"))
ALBUM_REPORT = ("farm bench album --json", ("environment", "tracks", "plan_tokens", "semantic_tokens", "placement",
                                            "stages", "album_makespan_s"))


def calibrate_command(bench_json: Path, out: Path | None, album_jsons: tuple[Path, ...] = ()) -> str:
    report = _read_json(bench_json, SONG_REPORT)
    albums = tuple(_read_json(p, ALBUM_REPORT) for p in album_jsons)
    return calibrate_report(report, out, albums)


def _read_json(path: Path, kind: tuple[str, tuple[str, ...]]) -> dict:
    try:
        report = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a readable bench report ({exc})") from None
    command, keys = kind
    missing = [k for k in keys if not isinstance(report, dict) or k not in report]
    if missing:
        raise UserError(f"{path}: not a `{command}` report (no {', '.join(missing)})")
    return report


def calibrate_report(report: dict, out: Path | None, albums: tuple[dict, ...] = ()) -> str:
    measured = measured_from_bench(report, albums)
    folder = calibration_dir() or configs_dir() / "calibration"
    target = out or folder / f"{measured.gpu.lower().replace(' ', '-')}.toml"
    # what this report does not measure (the co-run slowdowns, the formats' step costs) keeps the file's values
    try:
        base = load_calibration(target) if Path(target).is_file() else None
    except (OSError, ValueError) as exc:
        raise UserError(f"{target}: an existing calibration this run would update, but it cannot be read ({exc});"
                        f" fix it or give --out") from None
    fitted = write_calibration(target, measured, base=base, model=ModelShape.yue2_3b())
    return f"wrote {target}: " + ", ".join(f"{k}={getattr(fitted, k):.4g}" for k in (
        "ar_bandwidth_efficiency", "ar_step_overhead_s", "acoustic_efficiency", "decode_efficiency",
        "decode_tf32x3_efficiency"))


def model_check(album_json: Path, calibration: Path | None = None) -> str:
    """How well the calibrated cost model predicts a measured `farm bench album` run, stage by stage (its
    sequential one-song timings) and album-wide (the simulator's makespan for the plan the farm used), with the
    run's track lengths and KV cache format."""
    from cluster.gpus import device_from_spec
    from cluster.plans import Plan, Worker
    from cluster.simulate import simulate
    from cluster.tables import table

    report = _read_json(album_json, ALBUM_REPORT)
    formats = {"model": ModelShape.yue2_3b().with_formats(kv_format=report.get("kv_cache", "bf16"))}
    options = (PlanOptions(calibration=load_calibration(calibration), **formats) if calibration
               else options_for(None, **formats))
    gpu = lookup(report["environment"]["gpu"])
    track = TrackShape(report["semantic_tokens"] / FRAMES_PER_SECOND, report["plan_tokens"], report["semantic_tokens"],
                       prompt_tokens=report.get("prompt_tokens", 559))
    lines = []
    if "sequential" in report:
        from cluster.costs import card_speed, job_seconds, track_work

        device = device_from_spec(gpu, "check", 0)
        rows = []
        for stage in STAGES:
            speed = card_speed(device, stage, options.model, options.calibration_for(device))
            predicted = job_seconds(speed, track_work(track, stage, options.model))
            measured = sorted(t[stage] for t in report["sequential"]["per_track"])[len(report["sequential"]["per_track"]) // 2]
            rows.append([stage, measured, predicted, f"{100 * (predicted - measured) / measured:+.1f} %"])
        lines += [f"Sequential path, one {track.audio_seconds:.1f} s track alone on {gpu.model} (median of "
                  f"{len(report['sequential']['per_track'])}): measured vs the cost model", "",
                  table(["stage", "measured s", "predicted s", "error"], rows), ""]
    workers = tuple(Worker(**w) for w in report["placement"])
    cards = sorted({(w.node, w.index) for w in workers})
    inventory = [device_from_spec(gpu, node, index) for node, index in cards]
    plan = Plan(tracks=report["tracks"], audio_seconds=0.0, model=options.model.name, method="measured run",
                assignments_tried=0, workers=workers, cards=(), stages=(), bottleneck=None, makespan_s=None,
                throughput_tracks_s=0.0, one_track_s=None, unrunnable=(), refusals=(), reasons=(), reserve_gib=0.0,
                shared_process=True, ar_window=report.get("ar_window"))
    lengths = report.get("lengths") or [(report["plan_tokens"], report["semantic_tokens"])] * report["tracks"]
    tracks = [TrackShape(semantic / FRAMES_PER_SECOND, plan_tokens, semantic, prompt_tokens=track.prompt_tokens)
              for plan_tokens, semantic in lengths]
    sim = simulate(plan, inventory, tracks, options)
    measured = report["album_makespan_s"]
    lines.append(f"Album of {report['tracks']} tracks on {len(cards)} x {gpu.model}, the farm's own placement: "
                 f"measured makespan {measured:.1f} s, simulated {sim.makespan_s:.1f} s "
                 f"({100 * (sim.makespan_s - measured) / measured:+.1f} %)")
    return "\n".join(lines)
