"""`farm bench …`: tables against the H200 floors (docs/benchmarks.md)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .common import (ArFormatOpt, DeviceOpt, JsonOutOpt, KvOpt, ModelOpt, SummaryOpt, VaeOpt, bench_app, fail,
                     guarded, one_of, writable_file)


@bench_app.command("song")
def bench_song(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    plan_tokens: Annotated[int, typer.Option(help="Forced plan length (reference track: 4540).", min=1)] = 4540,
    semantic_tokens: Annotated[int, typer.Option(help="Forced semantic length (reference track: 5371).", min=1)] = 5371,
    device: DeviceOpt = "auto",
    repeats: Annotated[int, typer.Option(help="Timed runs; the table shows medians.", min=1)] = 1,
    json_out: JsonOutOpt = None,
    calibrate: Annotated[Path | None, typer.Option(help="Also fit and write a calibration file from this run.",
                                                   callback=writable_file)] = None,
    summary: SummaryOpt = None,
    weight_format: ArFormatOpt = "bf16",
) -> None:
    """One reference-length track through all four stages in one process: per-stage time, rate and peak memory."""
    from ..bench.song import run_song_bench

    _check_formats(weight_format, "bf16")
    report = guarded(run_song_bench, model=model, vae=vae, plan_tokens=plan_tokens,
                     semantic_tokens=semantic_tokens, device=device, repeats=repeats, json_out=json_out,
                     weight_format=weight_format)
    if summary:
        from ..measured import song_figures, update_summary

        update_summary(summary, song_figures(report), report["environment"])
    if calibrate:
        from ..plan_commands import calibrate_report

        typer.echo(guarded(calibrate_report, report, calibrate))


@bench_app.command("acoustic")
def bench_acoustic(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    device: DeviceOpt = "auto",
    prefix_tokens: Annotated[int, typer.Option(help="AR prefix of the chunk (reference track: 5000).", min=1)] = 5000,
    frames: Annotated[int, typer.Option(help="Latent frames of the chunk (reference track: 5371).", min=1)] = 5371,
    evals: Annotated[int, typer.Option(help="Timed velocity evaluations per path.", min=1)] = 4,
    json_out: JsonOutOpt = None,
    summary: SummaryOpt = None,
) -> None:
    """One acoustic chunk: ms per velocity evaluation on the engine's and the plain path, share of the measured
    matrix-multiply rate, and each path's latents against an FP32 run."""
    from ..bench.acoustic import run_acoustic_bench

    report = guarded(run_acoustic_bench, model=model, vae=vae, device=device, prefix_tokens=prefix_tokens,
                     frames=frames, evals=evals, json_out=json_out)
    if summary:
        from ..measured import acoustic_figures, update_summary

        update_summary(summary, acoustic_figures(report), report["environment"])


@bench_app.command("ar")
def bench_ar(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    device: DeviceOpt = "auto",
    rows: Annotated[list[int] | None, typer.Option("--rows", help="Live rows to measure (repeatable).")] = None,
    blocks: Annotated[int, typer.Option(help="Timed blocks of steps per point (after one warm block).", min=1)] = 4,
    numerics_tokens: Annotated[int, typer.Option(help="Teacher-forced tokens for the FP32 comparison.", min=2)] = 4096,
    weight_format: ArFormatOpt = "bf16",
    kv_cache: KvOpt = "bf16",
    chain: Annotated[one_of("auto", "on", "off"), typer.Option(
        "--chain", help="Each layer's products after attention as one kernel (Hopper, bf16 weights): auto (on "
                        "where the kernel runs), on, off.")] = "auto",
    json_out: JsonOutOpt = None,
    summary: SummaryOpt = None,
) -> None:
    """The AR step against its memory-bandwidth floor at 1…32 rows, batch invariance, kernel and numerics checks."""
    from stages.ar import STEP_SLOTS

    from ..bench.ar import ROWS, run_ar_bench

    if any(not 1 <= r <= STEP_SLOTS for r in rows or ()):
        fail(f"--rows: each value must be 1…{STEP_SLOTS} (the step's slots), got {', '.join(map(str, rows))}")
    _check_formats(weight_format, kv_cache)
    if chain == "on" and weight_format != "bf16":
        fail(f"--chain on: the layer chain's kernel reads bf16 weights, not {weight_format} (the W8A8 numerics "
             "have no fast kernel; farm bench quality measures them)")
    report = guarded(run_ar_bench, model=model, vae=vae, device=device, rows=tuple(rows or ROWS), blocks=blocks,
                     numerics_tokens=numerics_tokens, json_out=json_out, weight_format=weight_format,
                     kv_format=kv_cache, chain={"auto": None, "on": True, "off": False}[chain])
    if summary:
        from ..measured import ar_figures, update_summary

        update_summary(summary, ar_figures(report), report["environment"])


@bench_app.command("quality")
def bench_quality(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    device: DeviceOpt = "auto",
    plan_tokens: Annotated[int, typer.Option(help="Plan ids the BF16 engine samples (forced length).", min=1)] = 512,
    semantic_tokens: Annotated[int, typer.Option(help="Semantic ids it samples (forced length).", min=1)] = 1024,
    json_out: JsonOutOpt = None,
    summary: SummaryOpt = None,
) -> None:
    """Each AR format against the BF16 engine, teacher-forced on its own samples: top-1, NLL and TV per phase."""
    from ..bench.quality import run_quality_bench

    report = guarded(run_quality_bench, model=model, vae=vae, device=device, plan_tokens=plan_tokens,
                     semantic_tokens=semantic_tokens, json_out=json_out)
    if summary:
        from ..measured import quality_figures, update_summary

        update_summary(summary, quality_figures(report), report["environment"])


@bench_app.command("model-check")
def bench_model_check(
    album_json: Annotated[Path, typer.Argument(help="A `farm bench album --json` report.")],
    calibration: Annotated[Path | None, typer.Option(help="Calibration file (default: configs/calibration/).")]
    = None,
) -> None:
    """Compare the calibrated cost model and the simulator with a measured album run."""
    from ..plan_commands import model_check

    typer.echo(guarded(model_check, album_json, calibration))


@bench_app.command("album")
def bench_album(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    tracks: Annotated[int, typer.Option(help="Tracks in the album.", min=1)] = 4,
    plan_tokens: Annotated[int, typer.Option(help="Forced plan length per track.", min=1)] = 4540,
    semantic_tokens: Annotated[int, typer.Option(help="Forced semantic length per track.", min=1)] = 5371,
    mixed: Annotated[bool, typer.Option(help="Mixed lengths: a fixed list of 2.5–4.5 min tracks, scaled from "
                                             "the forced lengths (a 3.58 min track).")] = False,
    pin: Annotated[list[str] | None, typer.Option(help="STAGE=CARD placement instead of the planner's.")] = None,
    sequential: Annotated[bool, typer.Option(help="Also time the sequential path on the same tracks.")] = True,
    ar_window: Annotated[int | None, typer.Option(help="Most tracks inside the AR stages at once (0: no cap); "
                                                       "default: the plan's (a cap only where the simulator finds "
                                                       "staggered tracks faster).", min=0)] = None,
    address: Annotated[str | None, typer.Option(help="A running Ray cluster (default: a local one).")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster profile (virtual cards).")] = None,
    json_out: JsonOutOpt = None,
    gantt: Annotated[Path | None, typer.Option(help="Also write the album's Gantt chart (PNG) here.",
                                               callback=writable_file)] = None,
    kv_cache: KvOpt = "bf16",
    summary: SummaryOpt = None,
) -> None:
    """An album of forced-length tracks through the farm, and through the sequential path in the same run."""
    from ..bench.album import run_album_bench

    report = guarded(run_album_bench, model=model, vae=vae, tracks=tracks, plan_tokens=plan_tokens,
                     semantic_tokens=semantic_tokens, pins=tuple(pin or ()), sequential=sequential,
                     json_out=json_out, address=address, cluster=cluster, mixed=mixed, ar_window=ar_window,
                     gantt=gantt, kv_cache=kv_cache)
    if summary:
        from ..measured import album_figures, update_summary

        update_summary(summary, album_figures(report), report["environment"])


def _check_formats(weight_format: str, kv_cache: str) -> None:
    from stages.quant import FORMATS

    from ..quantized import check_kv_cache

    if weight_format not in FORMATS:
        fail(f"--format: expected one of {', '.join(FORMATS)}, got {weight_format!r}")
    guarded(check_kv_cache, kv_cache)
