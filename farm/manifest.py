"""Album-level outputs, rebuilt from the stage markers after every render: each track's settings.json,
manifest.parquet / manifest.json (one row per track) and playlist.m3u8.

Built from what is in the store, not from what this run did, so a resumed album's manifest covers the stages that
earlier runs finished too.
"""
from __future__ import annotations

import dataclasses

import pyarrow as pa

from cluster.workload import STAGES

from . import artifacts, trackstore
from .jobs import TrackJob
from .metrics import parquet_bytes
from .store import Store

HOP = 1920


def track_record(job: TrackJob, markers: dict[str, dict], identity: dict) -> dict:
    """settings.json of a finished track: every effective setting, the seed, the checkpoint, per-stage timings."""
    frames = markers["decode"]["units"]
    timings = {stage: {"seconds": m["end"] - m["start"], "units": m["units"], "worker": m["worker"],
                       "gpu": m["gpu"], "gpu_uuid": m["gpu_uuid"]} for stage, m in markers.items()}
    return {
        "track": {"number": job.number, "title": job.title, "folder": job.key},
        "request": {**dataclasses.asdict(job.request), "guidance": job.request.cfg_scale},
        "settings": dataclasses.asdict(job.settings), "checkpoint": identity, "stage_keys": job.stage_keys,
        "timings": timings,
        "audio": {"sample_rate": artifacts.SAMPLE_RATE, "channels": 2, "frames": frames,
                  "samples": HOP * frames - 64, "seconds": (HOP * frames - 64) / artifacts.SAMPLE_RATE,
                  "format": "FLAC PCM_24"},
    }


def manifest_row(job: TrackJob, markers: dict[str, dict], status: str, error: str) -> dict:
    row = {"number": job.number, "title": job.title, "folder": job.key, "status": status, "error": error,
           "seed": job.request.seed, "cot": job.request.cot}
    frames = markers.get("decode", {}).get("units")
    row["audio_seconds"] = (HOP * frames - 64) / artifacts.SAMPLE_RATE if frames else None
    for stage in STAGES:
        m = markers.get(stage, {})
        row[f"{stage}_seconds"] = m["end"] - m["start"] if m else None
        row[f"{stage}_worker"] = m.get("worker")
        row[f"{stage}_gpu"] = m.get("gpu")
        row[f"{stage}_gpu_uuid"] = m.get("gpu_uuid")
    for stage in STAGES:
        for name, digest in markers.get(stage, {}).get("files", {}).items():
            row[f"sha256_{name.replace('.', '_')}"] = digest
    return row


MANIFEST_COLUMNS = ["number", "title", "folder", "status", "error", "seed", "cot", "audio_seconds"] + [
    f"{s}_{f}" for s in STAGES for f in ("seconds", "worker", "gpu", "gpu_uuid")] + [
    f"sha256_{n.replace('.', '_')}" for n in (artifacts.SCORE, artifacts.PLAN, artifacts.SEMANTIC,
                                               artifacts.LATENTS, artifacts.AUDIO)]


def write_album(store: Store, album, jobs: list[TrackJob], failures: dict[str, str], identity: dict) -> list[dict]:
    """Per-track settings.json for finished tracks, then manifest.parquet, manifest.json and playlist.m3u8."""
    rows = []
    for job in jobs:
        markers = trackstore.finished_stages(store, job)
        done = len(markers) == len(job.stages)
        status = "done" if done else ("failed" if job.key in failures else "incomplete")
        if done:
            store.write_bytes(f"{job.key}/{artifacts.SETTINGS}", artifacts.json_bytes(
                track_record(job, markers, identity)))
        rows.append(manifest_row(job, markers, status, failures.get(job.key, "")))
    columns = {c: [r.get(c) for r in rows] for c in MANIFEST_COLUMNS}
    store.write_bytes("manifest.parquet", parquet_bytes(pa.table(columns)))
    store.write_bytes("manifest.json", artifacts.json_bytes({"album": album.title, "checkpoint": identity,
                                                             "tracks": rows}))
    store.write_bytes("playlist.m3u8", playlist(rows).encode("utf-8"))
    return rows


def playlist(rows: list[dict]) -> str:
    lines = ["#EXTM3U"]
    for r in rows:
        if r["status"] == "done":
            lines += [f"#EXTINF:{round(r['audio_seconds'])},{r['title']}", f"{r['folder']}/{artifacts.AUDIO}"]
    return "\n".join(lines) + "\n"
