"""`farm plan`, `farm simulate` and `farm calibrate`: the planner and simulator of cluster/ on a profile or this host.

Knows how to turn the user's inputs (a profile, an album or a track count, a bench report) into the planner's
plain data; the decisions and the figures are cluster/'s.
"""
from __future__ import annotations

import json
import socket
from pathlib import Path

from cluster.calibration import Calibration, Measured, load_calibration, write_calibration
from cluster.gpus import GpuDevice, lookup, probe_nvml
from cluster.profiles import load_profile, profile_inventory
from cluster.roles import PlanOptions
from cluster.workload import ModelShape, TrackShape, album_tracks

from .errors import UserError
from .models import configs_dir


def calibrations() -> tuple[Calibration, ...]:
    """Every measured calibration shipped in configs/calibration/ (one per GPU model)."""
    folder = configs_dir() / "calibration"
    return tuple(load_calibration(p) for p in sorted(folder.glob("*.toml"))) if folder.is_dir() else ()


def options_for(profile, **overrides) -> PlanOptions:
    cals = calibrations()
    base = {"calibrations": cals, **({"calibration": cals[0]} if cals else {}), **overrides}
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
    from .jobs import track_settings
    from .models import named_config

    cfg = named_config("yue2-3b")
    out = []
    for track in load_album(album).tracks:
        s = track_settings(track, cfg)
        guided = (track.guidance or (1.01 if track.cot == "off" else 1.0)) != 1.0
        out.append(TrackShape(s.semantic.max_tokens / 25.0, 0 if track.cot == "off" else s.plan.max_tokens,
                              s.semantic.max_tokens, title=track.title, cfg_branches=2 if guided else 1))
    return out


def plan_command(profile_path: Path | None, album: Path | None, tracks: int | None, seed: int, mean_seconds: float,
                 as_json: bool) -> str:
    from cluster.placement import plan

    inventory, profile = inventory_for(profile_path)
    result = plan(inventory, workload_for(album, tracks, seed, mean_seconds), options_for(profile))
    return json.dumps(result.to_dict(), indent=2, default=str) if as_json else result.describe()


def simulate_command(profile_path: Path | None, album: Path | None, tracks: int | None, seed: int,
                     mean_seconds: float, as_json: bool) -> str:
    from cluster.placement import plan
    from cluster.simulate import simulate

    inventory, profile = inventory_for(profile_path)
    workload = workload_for(album, tracks, seed, mean_seconds)
    options = options_for(profile)
    chosen = plan(inventory, workload, options)
    if not chosen.runnable:
        raise UserError(f"the plan cannot run stage(s) {', '.join(chosen.unrunnable)}:\n{chosen.describe()}")
    result = simulate(chosen, inventory, workload, options)
    return json.dumps(result.to_dict(), indent=2, default=str) if as_json else result.describe()


def measured_from_bench(report: dict) -> Measured:
    """A `farm bench song --json` report → what the cost model is fitted to (one track alone, batch 1)."""
    env = report["environment"]
    if env.get("model") != "yue2-3b" or "gpu" not in env:
        raise UserError("calibrate from a `farm bench song` report of the yue2-3b shapes on a GPU")
    gpu = lookup(env["gpu"])
    if gpu is None:
        raise UserError(f"{env['gpu']} is not in the GPU catalogue; add it to cluster/gpus.py first")
    seconds = {row["stage"]: row["seconds"] for row in report["rows"]}
    track = TrackShape(env["semantic_tokens"] / 25.0, env["plan_tokens"], env["semantic_tokens"],
                       prompt_tokens=env["prompt_tokens"], title="bench song")
    ar = {1: env["semantic_tokens"] / seconds["semantic"]}
    return Measured(gpu.model, track, seconds, ar, source=f"farm bench song, {env['date']}, torch {env['torch']}")


def calibrate_command(bench_json: Path, out: Path | None) -> str:
    try:
        report = json.loads(Path(bench_json).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{bench_json}: not a readable bench report ({exc})") from None
    return calibrate_report(report, out)


def calibrate_report(report: dict, out: Path | None) -> str:
    measured = measured_from_bench(report)
    target = out or configs_dir() / "calibration" / f"{measured.gpu.lower().replace(' ', '-')}.toml"
    fitted = write_calibration(target, measured, model=ModelShape.yue2_3b())
    return f"wrote {target}: " + ", ".join(f"{k}={getattr(fitted, k):.4g}" for k in (
        "ar_bandwidth_efficiency", "ar_step_overhead_s", "acoustic_efficiency", "decode_efficiency"))
