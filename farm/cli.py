"""The `farm` command line: each command parses its options and calls one library function."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(no_args_is_help=True, rich_markup_mode="rich", add_completion=False, context_settings=HELP,
                  help="yue2-farm: render YuE2-3B songs and albums across the GPUs you have.")
bench_app = typer.Typer(no_args_is_help=True, context_settings=HELP,
                        help="Benchmarks: tables against the H200 floors (docs/benchmarks.md).")
app.add_typer(bench_app, name="bench")

# Exit codes (README, "Exit codes"): 0 done; 1 a crash (a bug: the traceback is in the crash log); 2 bad input;
# 3 the album finished but some tracks failed (their reasons are printed and kept in the album folder);
# 130 / 143 stopped by Ctrl-C / SIGTERM (the same command resumes).
EXIT_FAILED_TRACKS = 3


def _version(show: bool) -> None:
    if show:
        from . import __version__

        typer.echo(f"yue2-farm {__version__}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                   help="Print the version and exit.")] = False) -> None:
    """yue2-farm: render YuE2-3B songs and albums across the GPUs you have."""

ModelOpt = Annotated[str, typer.Option("--model", "-m", envvar="FARM_MODEL",
                                       help="'tiny' (random, created on first use) or a checkpoint directory.")]
VaeOpt = Annotated[str | None, typer.Option("--vae", help="VAE directory, when --model is a bare model dir.")]
KvOpt = Annotated[str, typer.Option("--kv-cache", help="The AR KV cache: bf16 (the model's dtype) or fp8 (e4m3: "
                                    "half the bytes a step reads; other songs).")]
DeviceOpt = Annotated[str, typer.Option("--device", help="auto, cpu, cuda or cuda:N.")]
# One meaning per flag name: `--json PATH` writes a report file (the benchmarks); how a command prints is --format.
OutputOpt = Annotated[str, typer.Option("--format", help="How to print it: table or json.")]


def _as_json(output: str) -> bool:
    if output not in ("table", "json"):
        fail(f"--format must be table or json, got {output!r}")
    return output == "json"


def main() -> None:
    """The `farm` command. A user's mistake is one line and exit 2 (`guarded`); a bug is one line that points at the
    log file holding its traceback, and exit 1."""
    import sys

    from .errors import write_crash_log

    try:
        app()
    except Exception as exc:        # SystemExit (every normal end, typer.Exit included) is not an Exception
        lines = [line for line in str(exc).splitlines() if line.strip()]
        typer.echo(f"farm: internal error ({type(exc).__name__}: {lines[0][:200] if lines else ''}); the traceback "
                   f"is in {write_crash_log(exc)} — please report it", err=True)
        sys.exit(1)


def fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def guarded(fn, *args, **kwargs):
    """Run a library call; a user error becomes one line on stderr and exit code 2."""
    from .errors import user_error_types

    try:
        return fn(*args, **kwargs)
    except user_error_types() as exc:
        fail(str(exc))
    except FileExistsError as exc:
        fail(str(exc))


def interruptible(fn, *args, **kwargs):
    """Ctrl-C (exit 130) and SIGTERM (exit 143) stop a render cleanly: finished stages stay on disk, live.json says
    `stopped`, and the message says that the same command resumes."""
    import signal

    from .driver import Stopped

    def on_term(signum, frame):
        raise Stopped()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        return fn(*args, **kwargs)
    except (KeyboardInterrupt, Stopped) as exc:
        code = 130 if isinstance(exc, KeyboardInterrupt) else Stopped.exit_code
        typer.echo(f"stopped ({'Ctrl-C' if code == 130 else 'SIGTERM'}); finished stages are kept — run the same "
                   f"command again to resume", err=True)
        raise typer.Exit(code) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


@app.command("init-checkpoint")
def init_checkpoint(
    out: Annotated[Path, typer.Argument(help="Directory to create model/ and vae/ in.")],
    config: Annotated[str, typer.Option("--config", "-c", help="tiny or yue2-3b (configs/models/*.toml).")] = "tiny",
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
    device: DeviceOpt = "cpu",
) -> None:
    """Write a random-weight checkpoint in exactly the released layout."""
    from stages.weights import init_checkpoint as write

    from .devices import pick_device
    from .models import named_config

    cfg = guarded(named_config, config)
    model_dir, vae_dir = guarded(write, cfg, out, seed, pick_device(device))
    typer.echo(f"wrote {model_dir} and {vae_dir} ({cfg.name}, seed {seed})")


@app.command(no_args_is_help=True)
def quantize(
    out: Annotated[Path, typer.Argument(help="New directory for the quantised AR checkpoint.")],
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    weight_format: Annotated[str, typer.Option("--format", help="fp8: FP8 weights, one scale per output channel "
                                               "(compressed-tensors FP8_DYNAMIC, W8A8).")] = "fp8",
) -> None:
    """Write the AR half of a checkpoint as a quantised Qwen3-shaped checkpoint in the compressed-tensors format
    (for `--ar-checkpoint`, and readable by transformers)."""
    from .quantized import write_quantized

    written = guarded(write_quantized, model, vae, out, weight_format)
    typer.echo(f"wrote {written} ({weight_format})")


@app.command()
def song(
    style: Annotated[str, typer.Option(help="Style tags, e.g. 'indie pop, female vocal, 120 bpm'.")],
    lyrics_file: Annotated[Path, typer.Option("--lyrics-file", help="UTF-8 lyrics.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Song folder: a path or an fsspec URL.")],
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    seed: Annotated[int, typer.Option(help="Request seed.")] = 831001,
    # A plain string checked by the song job: typer's own choice errors are a multi-line box, ours one line.
    cot: Annotated[str, typer.Option(help="How much score the plan stage writes: full, melody or off.")] = "full",
    abc_file: Annotated[Path | None, typer.Option("--abc-file", help="Your own score: ABC text or plan.npy ids.")]
    = None,
    max_semantic_tokens: Annotated[int | None, typer.Option(help="Cap on codec tokens (25 per second).")] = None,
    device: DeviceOpt = "auto",
    force: Annotated[bool, typer.Option(help="Overwrite a non-empty --out.")] = False,
    exact: Annotated[bool, typer.Option(help="The reference AR sampler (torch.multinomial with the seed's "
                                             "generator); slower, another song than the default.")] = False,
    decode_precision: Annotated[str, typer.Option(help="The VAE's convolutions: fp32 (default) or tf32 (about 2x "
                                                       "faster on a GPU, audio ~3e-4 from FP32; another song's "
                                                       "bytes).")] = "fp32",
    ar_checkpoint: Annotated[Path | None, typer.Option("--ar-checkpoint", help="A quantised AR checkpoint (`farm "
                                                       "quantize`) for the plan and semantic stages.")] = None,
    kv_cache: KvOpt = "bf16",
) -> None:
    """Render one song with the sequential path (plan → semantic → acoustic → decode) into a song folder."""
    from .single import SongJob, render_song_folder

    job = SongJob(model=model, vae=vae, style=style, lyrics_file=lyrics_file, out=out, seed=seed, cot=cot,
                  abc_file=abc_file, max_semantic_tokens=max_semantic_tokens, device=device, force=force,
                  sampler="exact" if exact else "fast", decode_precision=decode_precision,
                  ar_checkpoint=ar_checkpoint, kv_cache=kv_cache)
    record = guarded(render_song_folder, job)
    t = record["timings"]
    line = ", ".join(f"{k} {v['seconds']:.2f}s" for k, v in t.items())
    midi = record["score_midi"]
    typer.echo(f"wrote {out}: {record['audio']['seconds']:.2f} s of audio ({line}); "
               + ("score.mid beside score.abc" if midi == "score.mid" else f"no score.mid: {midi}"))


@app.command(no_args_is_help=True)
def render(
    album: Annotated[Path, typer.Argument(help="Album spec (TOML), e.g. configs/albums/demo.toml.")],
    out: Annotated[str | None, typer.Option("--out", "-o", envvar="FARM_OUT",
                                            help="Album folder: a path or an fsspec URL (default out/<album>).")]
    = None,
    model: Annotated[str | None, typer.Option("--model", "-m", envvar="FARM_MODEL",
                                              help="'tiny' or a checkpoint dir (default: the album's, else tiny).")]
    = None,
    vae: VaeOpt = None,
    address: Annotated[str | None, typer.Option(help="A running Ray cluster: auto, HOST:PORT or ray://…; "
                                                     "default: start a local one.")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster profile (configs/clusters/*.toml); without "
                                                      "--address, a local cluster of its virtual cards.")] = None,
    force: Annotated[bool, typer.Option(help="Redo every stage, even finished ones.")] = False,
    exact: Annotated[bool, typer.Option(help="The reference AR sampler (torch.multinomial with a per-track "
                                             "generator), one track at a time per AR worker; slower, other songs.")]
    = False,
    threads: Annotated[int, typer.Option(help="Torch CPU threads per worker.", min=1)] = 1,
    pin: Annotated[list[str] | None, typer.Option(help="STAGE=CARD (node/index, or index on one node), for every "
                                                       "stage: your placement instead of the planner's.")] = None,
    ar_window: Annotated[int | None, typer.Option(help="Most tracks inside the AR stages at once (0: no cap); "
                                                       "default: the plan's (a cap only where the simulator finds "
                                                       "staggered tracks faster).", min=0)] = None,
    dashboard: Annotated[bool, typer.Option(help="Serve the live page while the album renders.")] = False,
    port: Annotated[int, typer.Option(help="Dashboard port (0: any free one).")] = 8365,
    host: Annotated[str, typer.Option(help="Dashboard address; 127.0.0.1 unless you mean to share it.")]
    = "127.0.0.1",
    stall_timeout: Annotated[float, typer.Option(help="Seconds a busy worker may leave a ping unanswered before "
                                                      "it is replaced and its tracks go again.", min=1)] = 600.0,
    log_level: Annotated[str, typer.Option(help="What render.log in the album folder keeps: debug, info, warning "
                                                "or error (the terminal shows warnings and errors).")] = "info",
    ar_checkpoint: Annotated[Path | None, typer.Option("--ar-checkpoint", help="A quantised AR checkpoint (`farm "
                                                       "quantize`) for the plan and semantic stages (default: "
                                                       "the album's ar_checkpoint, if any).")] = None,
    kv_cache: Annotated[str | None, typer.Option("--kv-cache", help="The AR KV cache: bf16 or fp8 (default: the "
                                                 "album's kv_cache, else bf16).")] = None,
) -> None:
    """Render an album: each stage on the card that suits it, songs overlapping, resumable."""
    from .driver import RenderOptions, render_album

    opts = RenderOptions(out=out, model=model, vae=vae, address=address, cluster=cluster, force=force, exact=exact,
                         threads=threads, pins=tuple(pin or ()), dashboard=(host, port) if dashboard else None,
                         stall_seconds=stall_timeout, ar_window=ar_window, log_level=log_level,
                         ar_checkpoint=ar_checkpoint, kv_cache=kv_cache)
    result = interruptible(guarded, render_album, album, opts)
    done = sum(r["status"] == "done" for r in result.rows)
    typer.echo(f"{done}/{len(result.rows)} tracks done in {result.wall_seconds:.1f} s → {result.out} "
               f"(run {result.run_id}, {len(result.events)} stage calls)")
    for key, error in result.failures.items():
        typer.echo(f"failed: {key}: {error}", err=True)
    if result.failures:
        raise typer.Exit(code=EXIT_FAILED_TRACKS)


@app.command("dashboard")
def dashboard_command(
    out: Annotated[str, typer.Argument(help="Album folder (path or URL) of a running or finished render.")],
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = 8365,
    host: Annotated[str, typer.Option(help="Address; 127.0.0.1 unless you mean to share it.")] = "127.0.0.1",
) -> None:
    """Serve the live page for an album folder (its metrics and live.json), until Ctrl-C."""
    import time

    from .dashboard.server import serve
    from .live import album_stats_fn
    from .store import Store

    if not Store(out).exists("live.json") and not Store(out).exists("metrics.parquet"):
        fail(f"{out}: no live.json or metrics.parquet — not a farm album folder")
    server, url = serve(album_stats_fn(out), host=host, port=port)
    typer.echo(f"dashboard for {out}: {url}  (Ctrl-C to stop)")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()


@app.command()
def report(out: Annotated[str, typer.Argument(help="Album folder (path or URL) holding metrics.parquet.")]) -> None:
    """Rebuild report.html and the PNG charts of an album folder from its metrics.parquet alone."""
    from .report import write_report
    from .store import Store

    names = guarded(write_report, Store(out))
    typer.echo(f"wrote {', '.join(names)} in {out}")


@app.command()
def inventory(
    cluster: Annotated[Path | None, typer.Option(help="Show a profile's virtual cards instead of this host's.")]
    = None,
) -> None:
    """The cards the farm can place stages on: this host's GPUs (NVML), or a cluster profile's."""
    from .inventory import show_inventory

    guarded(show_inventory, cluster)


AlbumOpt = Annotated[Path | None, typer.Option(help="Plan for this album's tracks (their token budgets).")]
TracksOpt = Annotated[int | None, typer.Option(help="Plan for N songs of seeded lengths instead (default 12).",
                                              min=1)]
ClusterOpt = Annotated[Path | None, typer.Option(help="Cluster profile (configs/clusters/*.toml); default: this "
                                                      "host's GPUs.")]


@app.command()
def plan(
    cluster: ClusterOpt = None,
    album: AlbumOpt = None,
    tracks: TracksOpt = None,
    seed: Annotated[int, typer.Option(help="Seed of the song-length draw (--tracks).")] = 0,
    mean_seconds: Annotated[float, typer.Option(help="Mean song length for --tracks.")] = 214.85,
    output: OutputOpt = "table",
) -> None:
    """Which stage runs on which card, how many replicas and batches, the bottleneck and the ETA — with reasons."""
    from .plan_commands import plan_command

    typer.echo(guarded(plan_command, cluster, album, tracks, seed, mean_seconds, _as_json(output)))


@app.command()
def simulate(
    cluster: ClusterOpt = None,
    album: AlbumOpt = None,
    tracks: TracksOpt = None,
    seed: Annotated[int, typer.Option(help="Seed of the song-length draw (--tracks).")] = 0,
    mean_seconds: Annotated[float, typer.Option(help="Mean song length for --tracks.")] = 214.85,
    output: OutputOpt = "table",
) -> None:
    """Run the planner's plan through a discrete-event simulation of the farm's dispatch: makespan, use, queues."""
    from .plan_commands import simulate_command

    typer.echo(guarded(simulate_command, cluster, album, tracks, seed, mean_seconds, _as_json(output)))


@app.command()
def calibrate(
    bench_json: Annotated[Path, typer.Argument(help="A `farm bench song --json` report measured on a GPU.")],
    out: Annotated[Path | None, typer.Option(help="Calibration file (default configs/calibration/<gpu>.toml).")]
    = None,
    album: Annotated[list[Path] | None, typer.Option(help="`farm bench album --json` reports: AR batching points.")]
    = None,
) -> None:
    """Fit the cost model's efficiency factors to a measured bench report and write the calibration file."""
    from .plan_commands import calibrate_command

    typer.echo(guarded(calibrate_command, bench_json, out, tuple(album or ())))


@bench_app.command("song")
def bench_song(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    plan_tokens: Annotated[int, typer.Option(help="Forced plan length (reference track: 4540).")] = 4540,
    semantic_tokens: Annotated[int, typer.Option(help="Forced semantic length (reference track: 5371).")] = 5371,
    device: DeviceOpt = "auto",
    repeats: Annotated[int, typer.Option(help="Timed runs; the table shows medians.")] = 1,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the rows as JSON here.")] = None,
    calibrate: Annotated[Path | None, typer.Option(help="Also fit and write a calibration file from this run.")]
    = None,
    summary: Annotated[Path | None, typer.Option(help="Update the headline keys (docs/measured/summary.json).")]
    = None,
) -> None:
    """One reference-length track through all four stages in one process: per-stage time, rate and peak memory."""
    from .bench.song import run_song_bench

    report = guarded(run_song_bench, model=model, vae=vae, plan_tokens=plan_tokens,
                     semantic_tokens=semantic_tokens, device=device, repeats=repeats, json_out=json_out)
    if summary:
        from .measured import song_figures, update_summary

        update_summary(summary, song_figures(report), report["environment"])
    if calibrate:
        from .plan_commands import calibrate_report

        typer.echo(guarded(calibrate_report, report, calibrate))


@bench_app.command("acoustic")
def bench_acoustic(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    device: DeviceOpt = "auto",
    prefix_tokens: Annotated[int, typer.Option(help="AR prefix of the chunk (reference track: 5000).")] = 5000,
    frames: Annotated[int, typer.Option(help="Latent frames of the chunk (reference track: 5371).")] = 5371,
    evals: Annotated[int, typer.Option(help="Timed velocity evaluations per path.")] = 4,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.")] = None,
    summary: Annotated[Path | None, typer.Option(help="Update the headline keys (docs/measured/summary.json).")]
    = None,
) -> None:
    """One acoustic chunk: ms per velocity evaluation on the engine's and the plain path, share of the measured
    matrix-multiply rate, and each path's latents against an FP32 run."""
    from .bench.acoustic import run_acoustic_bench

    report = guarded(run_acoustic_bench, model=model, vae=vae, device=device, prefix_tokens=prefix_tokens,
                     frames=frames, evals=evals, json_out=json_out)
    if summary:
        from .measured import acoustic_figures, update_summary

        update_summary(summary, acoustic_figures(report), report["environment"])


@bench_app.command("ar")
def bench_ar(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    device: DeviceOpt = "auto",
    rows: Annotated[list[int] | None, typer.Option("--rows", help="Live rows to measure (repeatable).")] = None,
    blocks: Annotated[int, typer.Option(help="Timed blocks of steps per point (after one warm block).")] = 4,
    numerics_tokens: Annotated[int, typer.Option(help="Teacher-forced tokens for the FP32 comparison.")] = 4096,
    weight_format: Annotated[str, typer.Option("--format", help="AR weights: bf16 (the model's own) or fp8 "
                                               "(quantised per output channel when the engine starts).")] = "bf16",
    kv_cache: KvOpt = "bf16",
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.")] = None,
    summary: Annotated[Path | None, typer.Option(help="Update these headline keys (docs/measured/summary.json).")]
    = None,
) -> None:
    """The AR step against its memory-bandwidth floor at 1…32 rows, batch invariance, kernel and numerics checks."""
    from stages.quant import FORMATS

    from .bench.ar import ROWS, run_ar_bench

    if weight_format not in FORMATS:
        fail(f"--format: expected one of {', '.join(FORMATS)}, got {weight_format!r}")
    from .quantized import check_kv_cache

    guarded(check_kv_cache, kv_cache)
    report = guarded(run_ar_bench, model=model, vae=vae, device=device, rows=tuple(rows or ROWS), blocks=blocks,
                     numerics_tokens=numerics_tokens, json_out=json_out, weight_format=weight_format,
                     kv_format=kv_cache)
    if summary:
        from .measured import ar_figures, update_summary

        update_summary(summary, ar_figures(report), report["environment"])


@bench_app.command("model-check")
def bench_model_check(
    album_json: Annotated[Path, typer.Argument(help="A `farm bench album --json` report.")],
    calibration: Annotated[Path | None, typer.Option(help="Calibration file (default: configs/calibration/).")]
    = None,
) -> None:
    """Compare the calibrated cost model and the simulator with a measured album run."""
    from .plan_commands import model_check

    typer.echo(guarded(model_check, album_json, calibration))


@bench_app.command("album")
def bench_album(
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    tracks: Annotated[int, typer.Option(help="Tracks in the album.")] = 4,
    plan_tokens: Annotated[int, typer.Option(help="Forced plan length per track.")] = 4540,
    semantic_tokens: Annotated[int, typer.Option(help="Forced semantic length per track.")] = 5371,
    mixed: Annotated[bool, typer.Option(help="Mixed lengths: a fixed list of 2.5–4.5 min tracks, scaled from "
                                             "the forced lengths (a 3.58 min track).")] = False,
    pin: Annotated[list[str] | None, typer.Option(help="STAGE=CARD placement instead of the planner's.")] = None,
    sequential: Annotated[bool, typer.Option(help="Also time the sequential path on the same tracks.")] = True,
    ar_window: Annotated[int | None, typer.Option(help="Most tracks inside the AR stages at once (0: no cap); "
                                                       "default: the plan's (a cap only where the simulator finds "
                                                       "staggered tracks faster).", min=0)] = None,
    address: Annotated[str | None, typer.Option(help="A running Ray cluster (default: a local one).")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster profile (virtual cards).")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report as JSON here.")] = None,
    gantt: Annotated[Path | None, typer.Option(help="Also write the album's Gantt chart (PNG) here.")] = None,
    kv_cache: KvOpt = "bf16",
    summary: Annotated[Path | None, typer.Option(help="Update the headline keys (docs/measured/summary.json).")]
    = None,
) -> None:
    """An album of forced-length tracks through the farm, and through the sequential path in the same run."""
    from .bench.album import run_album_bench

    report = guarded(run_album_bench, model=model, vae=vae, tracks=tracks, plan_tokens=plan_tokens,
                     semantic_tokens=semantic_tokens, pins=tuple(pin or ()), sequential=sequential,
                     json_out=json_out, address=address, cluster=cluster, mixed=mixed, ar_window=ar_window,
                     gantt=gantt, kv_cache=kv_cache)
    if summary:
        from .measured import album_figures, update_summary

        update_summary(summary, album_figures(report), report["environment"])


if __name__ == "__main__":
    app()
