"""`farm bench album`: N forced-length tracks through the farm, then through the sequential path in the same run.

Prints the farm's stage table (calls, busy time, span, throughput, cards), the album's wall time next to the
sequential path's for the same tracks, and what NVML saw each worker process hold on each card — the evidence that
placement is real. Random weights never end a song by themselves, so lengths are forced: the end id is masked
until the target length and generation stops there.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from cluster.workload import FRAMES_PER_SECOND, STAGE_UNITS

from .song import BENCH_STYLE, bench_lyrics, check_forced_lengths, environment



# The mixed-length album: track i lasts MIXED_MINUTES[i % 12] minutes (a fixed list from 2.5 to 4.5, mean 3.51);
# its plan and semantic lengths are the reference track's (3.58 min: 4,540 + 5,371 tokens) scaled by that ratio.
MIXED_MINUTES = (2.5, 4.5, 3.0, 4.0, 3.5, 2.75, 4.25, 3.25, 3.75, 2.6, 4.4, 3.6)
REFERENCE_MINUTES = 5371 / FRAMES_PER_SECOND / 60


def track_lengths(n: int, plan_tokens: int, semantic_tokens: int, mixed: bool) -> list[tuple[int, int]]:
    """(plan, semantic) tokens of each track: all the given lengths, or the mixed list scaled from them."""
    if not mixed:
        return [(plan_tokens, semantic_tokens)] * n
    ratios = [MIXED_MINUTES[i % len(MIXED_MINUTES)] / REFERENCE_MINUTES for i in range(n)]
    return [(max(1, round(plan_tokens * r)), max(1, round(semantic_tokens * r))) for r in ratios]


def album_spec(lengths: list[tuple[int, int]], lyrics: str) -> str:
    """An album with one track per (plan, semantic) pair, its lengths forced through the sampling overrides; no
    mastering (the benchmark measures the render)."""
    head = (f'title = "Bench {len(lengths)} tracks"\nmaster = false\n[defaults]\n'
            f'style = "{BENCH_STYLE}"\ncot = "full"\nseed = 1\n')
    body = "".join(f'[[tracks]]\ntitle = "Bench {i:02d}"\nlyrics = """\n{lyrics}"""\n'
                   f"[tracks.sampling.plan]\nmin_tokens = {plan}\nmax_tokens = {plan}\n"
                   f"[tracks.sampling.semantic]\nmin_tokens = {semantic}\nmax_tokens = {semantic}\n"
                   for i, (plan, semantic) in enumerate(lengths, start=1))
    return head + body


def run_album_bench(**options) -> dict:
    """The bench's album is rendered in a temporary folder, removed after the run: its audio is not the point (and a
    12-track render leaves ~0.4 GB)."""
    with tempfile.TemporaryDirectory(prefix="farm-bench-", ignore_cleanup_errors=True) as work:
        return album_bench_in(Path(work), **options)


def album_bench_in(work: Path, *, model: str, vae: str | None, tracks: int, plan_tokens: int, semantic_tokens: int,
                   pins: tuple[str, ...], sequential: bool, json_out: Path | None, address: str | None = None,
                   cluster: Path | None = None, mixed: bool = False, ar_window: int | None = None,
                   gantt: Path | None = None, kv_cache: str = "bf16") -> dict:
    from stages.protocol import SongRequest
    from stages.requests import default_settings, open_checkpoint

    from ..driver import RenderOptions, render_album
    from ..gpumon import GpuMonitor
    from ..models import resolve_model

    from cluster.gpus import probe_nvml

    paths = resolve_model(model, vae)
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    spec = work / "album.toml"
    lengths = track_lengths(tracks, plan_tokens, semantic_tokens, mixed)
    longest = default_settings(ckpt.cfg, plan_tokens=max(p for p, _ in lengths),
                               semantic_tokens=max(s for _, s in lengths))
    request = SongRequest(BENCH_STYLE, bench_lyrics(ckpt.cfg.tokens), cot="full")     # each track's (album_spec)
    check_forced_lengths(ckpt, request, longest, plan_tokens, semantic_tokens)
    spec.write_text(album_spec(lengths, bench_lyrics(ckpt.cfg.tokens)))
    monitor = GpuMonitor([d.uuid for d in probe_nvml("local")], interval=0.5).start()
    started = time.time()
    result = render_album(spec, RenderOptions(out=str(work / "out"), model=model, vae=vae, pins=pins, force=True,
                                              progress=False, address=address, cluster=cluster,
                                              ar_window=ar_window, kv_cache=kv_cache))
    total = time.time() - started
    monitor.stop()
    ok = [e for e in result.events if e.ok]
    makespan = max(e.end for e in ok) - min(e.start for e in ok)
    from stages.protocol import plan_prefix

    prompt = plan_prefix(request, ckpt.tokenizer, ckpt.cfg.tokens)
    report = {"environment": environment("cuda" if monitor.available else "cpu"),
              "tracks": tracks, "plan_tokens": plan_tokens, "semantic_tokens": semantic_tokens, "mixed": mixed,
              "kv_cache": kv_cache,
              "lengths": lengths,
              "prompt_tokens": len(prompt),
              "placement": [vars_of(w) for w in result.plan.workers], "workers": result.workers,
              "failures": result.failures, "album_makespan_s": makespan, "render_wall_s": total,
              "first_stage_after_s": min(e.start for e in ok) - started,
              "load_began_after_s": {w["worker"]: w["load_began_at"] - started
                                     for w in result.workers.values() if w.get("load_began_at")},
              "simulated_makespan_s": result.forecast_s, "ar_window": result.plan.ar_window,
              "stages": stage_rows(ok), "events": [vars_of(e) for e in result.events],
              "nvml_peak_bytes": {u: {str(p): b for p, b in procs.items()}
                                  for u, procs in monitor.peak_by_process().items()},
              "nvml_available": monitor.available}
    # the farm's figures are printed and written before the sequential path starts: a run stopped during that
    # (long) part keeps them
    print_report(report)
    write_report(report, json_out)
    if gantt:
        write_gantt(report, gantt)
    if sequential:
        report["sequential"] = sequential_times(paths, spec, kv_cache)
        print_sequential(report)
        write_report(report, json_out)
    return report


def write_report(report: dict, path: Path | None) -> None:
    """Whole or not at all: the report is written twice in a run (before and after the sequential path)."""
    if path:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
        os.replace(tmp, path)


def write_gantt(report: dict, path: Path) -> None:
    """The album report's Gantt chart (one bar per track and stage) of a bench run, as a PNG."""
    from ..aggregate import album_stats
    from ..report import gantt_png

    stats = album_stats([e for e in report["events"] if e["ok"]])
    Path(path).write_bytes(gantt_png(stats))


def vars_of(obj) -> dict:
    import dataclasses

    return dataclasses.asdict(obj)


def stage_rows(events) -> list[dict]:
    rows = []
    for stage in STAGE_UNITS:
        mine = [e for e in events if e.stage == stage]
        if not mine:
            continue
        span = max(e.end for e in mine) - min(e.start for e in mine)
        units = sum(e.units for e in mine)
        rows.append({"stage": stage, "calls": len(mine), "units": units, "unit": STAGE_UNITS[stage],
                     "busy_s": sum(e.end - e.start for e in mine), "span_s": span,
                     "per_second": units / span if span else None, "max_batch": max(e.batch for e in mine),
                     "cards": sorted({f"{e.gpu} ({e.gpu_uuid[:12]})" for e in mine})})
    return rows


def sequential_times(paths, spec: Path, kv_cache: str = "bf16") -> dict:
    """The same tracks, one after another, through the in-process sequential path on one device."""
    import torch

    from stages.requests import default_settings, open_checkpoint
    from stages.song import SongEngines, render_song

    from ..album import load_album
    from ..devices import pick_device
    from ..jobs import track_request, track_settings

    device = pick_device("auto")
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    engines = SongEngines(ckpt, device=device, fast=device.startswith("cuda"), kv_cache=kv_cache)
    album = load_album(spec)
    warm = album.tracks[0]
    render_song(engines, track_request(warm), default_settings(ckpt.cfg, plan_tokens=32, semantic_tokens=64))
    per_track, start = [], time.perf_counter()
    for n, track in enumerate(album.tracks, start=1):
        song = render_song(engines, track_request(track), track_settings(track, ckpt.cfg), key=track.folder)
        per_track.append({s: t.seconds for s, t in song.timings.items()})
        # a line per track: a run cut short still shows how far the sequential path got and at what pace
        print(f"sequential path: track {n}/{len(album.tracks)} done, {time.perf_counter() - start:.2f} s so far",
              flush=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return {"device": device, "wall_s": time.perf_counter() - start, "per_track": per_track}


def print_report(r: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from ..workers import load_breakdown

    console = Console(width=170)
    env = r["environment"]
    if r.get("mixed"):
        semantic = [s for _, s in r["lengths"]]
        lengths = (f"MIXED lengths, semantic {min(semantic)}–{max(semantic)} tokens "
                   f"({sum(semantic)} in all; plan scaled alike)")
    else:
        lengths = f"FORCED lengths plan {r['plan_tokens']} + semantic {r['semantic_tokens']} tokens"
    title = (f"farm bench album — {r['tracks']} tracks, {lengths} (random weights); {env.get('gpu', env['device'])}, "
             f"torch {env['torch']}, {env['date']}")
    table = Table(title=title, title_justify="left")
    for col in ("stage", "calls", "units", "busy s", "span s", "rate (span)", "max batch", "cards"):
        table.add_column(col)
    for s in r["stages"]:
        table.add_row(s["stage"], str(s["calls"]), f"{s['units']} {s['unit']}", f"{s['busy_s']:.2f}",
                      f"{s['span_s']:.2f}", f"{s['per_second']:.1f} {s['unit']}/s" if s["per_second"] else "—",
                      f"{s['max_batch']:.1f}", ", ".join(s["cards"]))
    console.print(table)
    line = f"album makespan (first stage start → last stage end): {r['album_makespan_s']:.2f} s; " \
           f"render wall incl. Ray start and weight loading: {r['render_wall_s']:.2f} s"
    if r.get("simulated_makespan_s"):
        sim = r["simulated_makespan_s"]
        line += (f"\nsimulator's forecast for this plan: {sim:.2f} s ({(sim / r['album_makespan_s'] - 1):+.1%} of the "
                 f"measured makespan); AR window {r.get('ar_window') or 'none'}")
    console.print(line)
    if r.get("first_stage_after_s") is not None:
        console.print(f"the first stage began {r['first_stage_after_s']:.2f} s after the render did (Ray, the plan, "
                      f"the workers' start)")
    workers = {w["worker"]: w for w in r["workers"].values() if w.get("load_seconds")}
    for name, w in workers.items():
        began = r.get("load_began_after_s", {}).get(name)
        console.print(f"worker {name} loaded in {load_breakdown(w['load_seconds'])}"
                      + (f", from {began:.2f} s after the render began (Ray's start, the plan, the process's spawn "
                         f"and imports before that)" if began is not None else ""))
        if w.get("ar_build_seconds"):
            console.print("  its AR engine: " + ", ".join(f"{phase} {s:.2f}" for phase, s in
                                                          w["ar_build_seconds"].items()))
    failed = [e for e in r["events"] if not e["ok"]]
    if failed:
        console.print(f"{len(failed)} stage runs FAILED (first: {failed[0]['stage']} of {failed[0]['track']}: "
                      f"{failed[0].get('error') or 'see the album folder'}): the makespan above is not the album's, "
                      f"and the summary keeps only what the failures did not touch")
    pids = {w["pid"]: f"{w['worker']}" for w in r["workers"].values()}
    for uuid, procs in r["nvml_peak_bytes"].items():
        held = ", ".join(f"pid {p} [{pids.get(int(p), 'not a farm worker')}] {b / 2**30:.2f} GiB"
                         for p, b in procs.items()) or "no process"
        console.print(f"NVML {uuid}: {held}")
    if not r["nvml_available"]:
        console.print("NVML: no local GPU to sample (virtual or CPU cards report no memory).")


def print_sequential(r: dict) -> None:
    seq = r["sequential"]["wall_s"]
    print(f"sequential one-song path, same {r['tracks']} tracks, same run: {seq:.2f} s → farm speed-up "
          f"{seq / r['album_makespan_s']:.2f}x (makespan) / {seq / r['render_wall_s']:.2f}x (wall)")
