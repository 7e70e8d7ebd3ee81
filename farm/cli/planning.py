"""The planning commands: inventory, plan, simulate, calibrate."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cluster.workload import LONGEST_SECONDS, REFERENCE_SECONDS, SHORTEST_SECONDS

from .common import AR_FORMATS, KV_FORMATS, OutputOpt, _as_json, app, guarded, one_of, writable_file


@app.command()
def inventory(
    cluster: Annotated[Path | None, typer.Option(help="Show a profile's virtual cards instead of this host's.")]
    = None,
) -> None:
    """The cards the farm can place stages on: this host's GPUs (NVML), or a cluster profile's."""
    from ..inventory import show_inventory

    guarded(show_inventory, cluster)


AlbumOpt = Annotated[Path | None, typer.Option(help="Plan for this album's tracks (their token budgets).")]
TracksOpt = Annotated[int | None, typer.Option(help="Plan for N songs of seeded lengths instead (default 12).",
                                              min=1)]
ClusterOpt = Annotated[Path | None, typer.Option(help="Cluster profile (configs/clusters/*.toml); default: this "
                                                      "host's GPUs.")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the song-length draw (--tracks).")]
MeanSecondsOpt = Annotated[float, typer.Option(help="Mean song length for --tracks, in seconds.",
                                               min=SHORTEST_SECONDS, max=LONGEST_SECONDS)]
PlanArFormatOpt = Annotated[one_of(*AR_FORMATS, "auto") | None, typer.Option(
    "--ar-format", help="The AR weights to plan for: bf16, fp8, nvfp4 or auto (the planner picks the fastest for these "
                        "cards; a render runs the one it is given). Default: the album's ar_format, else bf16.")]
PlanKvOpt = Annotated[one_of(*KV_FORMATS, "auto") | None, typer.Option(
    "--kv-cache", help="The AR KV cache to plan for: bf16, fp8 or auto (the planner picks the faster for these cards, "
                       "with the weights; a render runs the one it is given). Default: the album's kv_cache, else "
                       "bf16.")]


@app.command()
def plan(
    cluster: ClusterOpt = None,
    album: AlbumOpt = None,
    tracks: TracksOpt = None,
    seed: SeedOpt = 0,
    mean_seconds: MeanSecondsOpt = REFERENCE_SECONDS,
    output: OutputOpt = "table",
    ar_format: PlanArFormatOpt = None,
    kv_cache: PlanKvOpt = None,
) -> None:
    """Which stage runs on which card, how many replicas and batches, the bottleneck and the ETA — with reasons."""
    from ..plan_commands import plan_command

    typer.echo(guarded(plan_command, cluster, album, tracks, seed, mean_seconds, _as_json(output), ar_format,
                       kv_cache))


@app.command()
def simulate(
    cluster: ClusterOpt = None,
    album: AlbumOpt = None,
    tracks: TracksOpt = None,
    seed: SeedOpt = 0,
    mean_seconds: MeanSecondsOpt = REFERENCE_SECONDS,
    output: OutputOpt = "table",
    ar_format: PlanArFormatOpt = None,
    kv_cache: PlanKvOpt = None,
) -> None:
    """Run the planner's plan through a discrete-event simulation of the farm's dispatch: makespan, use, queues."""
    from ..plan_commands import simulate_command

    typer.echo(guarded(simulate_command, cluster, album, tracks, seed, mean_seconds, _as_json(output), ar_format,
                       kv_cache))


@app.command()
def calibrate(
    bench_json: Annotated[Path, typer.Argument(help="A `farm bench song --json` report measured on a GPU.")],
    out: Annotated[Path | None, typer.Option(help="Calibration file (default configs/calibration/<gpu>.toml).",
                                             callback=writable_file)] = None,
    album: Annotated[list[Path] | None, typer.Option(help="`farm bench album --json` reports: AR batching points.")]
    = None,
) -> None:
    """Fit the cost model's efficiency factors to a measured bench report and write the calibration file."""
    from ..plan_commands import calibrate_command

    typer.echo(guarded(calibrate_command, bench_json, out, tuple(album or ())))
