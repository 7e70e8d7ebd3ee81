"""The commands that make music: init-checkpoint, quantize, song, render, and the album's dashboard and report."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from stages.config import DEFAULT_DECODE_PRECISION

from .common import (EXIT_FAILED_TRACKS, ArFormatFlag, Cot, DecodePrecisionOpt, DeviceOpt, KvFormat, KvOpt,
                     ModelConfig, ModelOpt, QuantFormat, VaeOpt, app, fail, guarded, interruptible, writable_folder)


@app.command("init-checkpoint")
def init_checkpoint(
    out: Annotated[Path, typer.Argument(help="Directory to create model/ and vae/ in.", callback=writable_folder)],
    config: Annotated[ModelConfig, typer.Option("--config", "-c", help="A model config (configs/models/*.toml).")]
    = "tiny",
    seed: Annotated[int, typer.Option(help="Seed of the random weights.")] = 0,
    device: DeviceOpt = "cpu",
) -> None:
    """Write a random-weight checkpoint in exactly the released layout."""
    from stages.weights import init_checkpoint as write

    from ..devices import pick_device
    from ..models import named_config

    cfg = guarded(named_config, config)
    model_dir, vae_dir = guarded(write, cfg, out, seed, pick_device(device))
    typer.echo(f"wrote {model_dir} and {vae_dir} ({cfg.name}, seed {seed})")


@app.command(no_args_is_help=True)
def quantize(
    out: Annotated[Path, typer.Argument(help="New directory for the quantised AR checkpoint.",
                                        callback=writable_folder)],
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    weight_format: Annotated[QuantFormat, typer.Option("--format", help="fp8: FP8 weights, one scale per output "
                                                       "channel (compressed-tensors FP8_DYNAMIC, W8A8); nvfp4: FP4 "
                                                       "weights, an FP8 scale per 16 values (NVFP4A16, W4A16).")]
    = "fp8",
) -> None:
    """Write the AR half of a checkpoint as a quantised Qwen3-shaped checkpoint in the compressed-tensors format
    (for `--ar-checkpoint`, and readable by transformers)."""
    from ..quantized import write_quantized

    written = guarded(write_quantized, model, vae, out, weight_format)
    typer.echo(f"wrote {written} ({weight_format})")


@app.command()
def song(
    style: Annotated[str, typer.Option(help="Style tags, e.g. 'indie pop, female vocal, 120 bpm'.")],
    lyrics_file: Annotated[Path, typer.Option("--lyrics-file", help="UTF-8 lyrics.")],
    out: Annotated[str, typer.Option("--out", "-o", help="Song folder: a path or an fsspec URL.")],
    model: ModelOpt = "tiny",
    vae: VaeOpt = None,
    seed: Annotated[int, typer.Option(help="Request seed.", min=0, max=2**63 - 1)] = 831001,
    cot: Annotated[Cot, typer.Option(help="How much score the plan stage writes: full, melody or off.")] = "full",
    abc_file: Annotated[Path | None, typer.Option("--abc-file", help="Your own score: ABC text or plan.npy ids.")]
    = None,
    max_semantic_tokens: Annotated[int | None, typer.Option(help="Cap on codec tokens (25 per second).", min=1)]
    = None,
    device: DeviceOpt = "auto",
    force: Annotated[bool, typer.Option(help="Overwrite a non-empty --out.")] = False,
    exact: Annotated[bool, typer.Option(help="The reference AR sampler (torch.multinomial with the seed's "
                                             "generator); slower, another song than the default.")] = False,
    decode_precision: DecodePrecisionOpt = DEFAULT_DECODE_PRECISION,
    ar_checkpoint: Annotated[Path | None, typer.Option("--ar-checkpoint", help="A quantised AR checkpoint (`farm "
                                                       "quantize`) for the plan and semantic stages.")] = None,
    kv_cache: KvOpt = "bf16",
    ar_format: ArFormatFlag = None,
) -> None:
    """Render one song with the sequential path (plan → semantic → acoustic → decode) into a song folder."""
    from ..single import SongJob, render_song_folder

    job = SongJob(model=model, vae=vae, style=style, lyrics_file=lyrics_file, out=out, seed=seed, cot=cot,
                  abc_file=abc_file, max_semantic_tokens=max_semantic_tokens, device=device, force=force,
                  sampler="exact" if exact else "fast", decode_precision=decode_precision,
                  ar_checkpoint=ar_checkpoint, kv_cache=kv_cache, ar_format=ar_format)
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
    kv_cache: Annotated[KvFormat | None, typer.Option("--kv-cache", help="The AR KV cache: bf16 or fp8 (default: "
                                                      "the album's kv_cache, else bf16).")] = None,
    ar_format: ArFormatFlag = None,
    approve: Annotated[bool, typer.Option(help="Stop each track after its plan stage: read the candidate scores "
                                               "(plans/<k>/score.abc) and go on with `farm approve OUT TRACK K`.")]
    = False,
) -> None:
    """Render an album: each stage on the card that suits it, songs overlapping, resumable."""
    from ..driver import RenderOptions, render_album

    opts = RenderOptions(out=out, model=model, vae=vae, address=address, cluster=cluster, force=force, exact=exact,
                         threads=threads, pins=tuple(pin or ()), dashboard=(host, port) if dashboard else None,
                         stall_seconds=stall_timeout, ar_window=ar_window, log_level=log_level,
                         ar_checkpoint=ar_checkpoint, kv_cache=kv_cache, ar_format=ar_format, approve=approve)
    _finished(interruptible(guarded, render_album, album, opts))


def _finished(result) -> None:
    """The one-line summary of a render, the failed tracks, and the exit code."""
    from ..takes import AWAITING

    done = sum(r["status"] == "done" for r in result.rows)
    held = [r["folder"] for r in result.rows if r["status"] == AWAITING]
    typer.echo(f"{done}/{len(result.rows)} tracks done in {result.wall_seconds:.1f} s → {result.out} "
               f"(run {result.run_id}, {len(result.events)} stage calls)")
    if held:
        typer.echo(f"{len(held)} track(s) await a score: see <track>/plans/<k>/score.abc (or score.abc), then "
                   f"`farm approve {result.out} TRACK K` ({', '.join(held)})")
    for key, error in result.failures.items():
        typer.echo(f"failed: {key}: {error}", err=True)
    if result.failures:
        raise typer.Exit(code=EXIT_FAILED_TRACKS)


TrackArg = Annotated[str, typer.Argument(help="The track: its number, folder name or title.")]
OutArg = Annotated[str, typer.Argument(help="The album folder (path or URL) that `farm render` wrote.")]
AddressOpt = Annotated[str | None, typer.Option(help="A running Ray cluster: auto, HOST:PORT or ray://…; default: "
                                                     "start a local one.")]
ClusterOpt = Annotated[Path | None, typer.Option(help="Cluster profile (configs/clusters/*.toml).")]
LogLevelOpt = Annotated[str, typer.Option(help="What render.log keeps: debug, info, warning or error.")]


@app.command(no_args_is_help=True)
def rerender(
    out: OutArg,
    track: TrackArg,
    abc: Annotated[Path | None, typer.Option("--abc", help="The score to render from (ABC text); default: the "
                                             "track's score.abc as you edited it.")] = None,
    plan: Annotated[int | None, typer.Option("--plan", help="Render from plan candidate K instead "
                                             "(plans/K/score.abc; 1 is the plan stage's first).")] = None,
    address: AddressOpt = None,
    cluster: ClusterOpt = None,
    log_level: LogLevelOpt = "info",
) -> None:
    """Re-render one track from an edited score (or another plan candidate): same seed and settings, from the
    semantic stage on; the previous take is kept in takes/<n>/ and the album is mastered again."""
    from ..rerender import rerender as run

    _finished(interruptible(guarded, run, out, track, abc_file=abc, plan=plan, address=address, cluster=cluster,
                            log_level=log_level))


@app.command(no_args_is_help=True)
def approve(
    out: OutArg,
    track: TrackArg,
    candidate: Annotated[int, typer.Argument(help="The plan candidate to go on with (plans/K/score.abc).")],
    address: AddressOpt = None,
    cluster: ClusterOpt = None,
    log_level: LogLevelOpt = "info",
) -> None:
    """Go on with a track that `farm render --approve` held after its plan stage, from candidate K."""
    from ..rerender import rerender as run

    _finished(interruptible(guarded, run, out, track, plan=candidate, address=address, cluster=cluster,
                            log_level=log_level, plan_flag="K"))


@app.command("dashboard")
def dashboard_command(
    out: Annotated[str, typer.Argument(help="Album folder (path or URL) of a running or finished render.")],
    port: Annotated[int, typer.Option(help="Port (0: any free one).")] = 8365,
    host: Annotated[str, typer.Option(help="Address; 127.0.0.1 unless you mean to share it.")] = "127.0.0.1",
) -> None:
    """Serve the live page for an album folder (its metrics and live.json), until Ctrl-C."""
    import time

    from ..dashboard.server import check_port, serve
    from ..live import album_stats_fn
    from ..store import Store

    if not Store(out).exists("live.json") and not Store(out).exists("metrics.parquet"):
        fail(f"{out}: no live.json or metrics.parquet — not a farm album folder")
    guarded(check_port, host, port)
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
    from ..report import write_report
    from ..store import Store

    names = guarded(write_report, Store(out))
    typer.echo(f"wrote {', '.join(names)} in {out}")
