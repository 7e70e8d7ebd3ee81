"""Album-level outputs, rebuilt from the stage markers after every render: each track's settings.json and score.mid
(farm/scores.py), manifest.parquet / manifest.json (one row per track) and playlist.m3u8.

Built from what is in the store, not from what this run did, so a resumed album's manifest covers the stages that
earlier runs finished too.
"""
from __future__ import annotations

import pyarrow as pa

from cluster.workload import STAGES
from stages.vae import audio_samples

from . import artifacts, scores, takes, trackstore
from .jobs import TrackJob
from .eventlog import parquet_bytes
from .store import Store
from .takes import AWAITING

def track_record(job: TrackJob, markers: dict[str, dict], identity: dict, cfg) -> dict:
    """settings.json of a finished track, by the same builder as `farm song`'s (artifacts.settings_record), from
    its stage markers: per-stage timings with the worker and card of each, the device, the AR stages' caps hit,
    the acoustic attention kernel (None in markers written before it was recorded)."""
    frames = markers["decode"]["units"]
    timings = {stage: {"seconds": m["end"] - m["start"], "units": m["units"], "worker": m["worker"],
                       "gpu": m["gpu"], "gpu_uuid": m["gpu_uuid"]} for stage, m in markers.items()}
    devices = {m.get("device") for m in markers.values()} - {None}
    record = artifacts.settings_record(
        request=job.request, settings=job.settings, identity=identity, keys=job.stage_keys,
        device=devices.pop() if len(devices) == 1 else "mixed (see timings)", dtype=cfg.dtype, timings=timings,
        truncated={s: m["truncated"] for s, m in markers.items() if "truncated" in m}, frames=frames,
        samples=audio_samples(cfg.vae, frames),
        kernels={"acoustic_attention": markers["acoustic"].get("attention")} if "acoustic" in markers else {})
    return {"track": {"number": job.number, "title": job.title, "folder": job.key}, **record}


def manifest_row(job: TrackJob, markers: dict[str, dict], status: str, error: str, cfg) -> dict:
    row = {"number": job.number, "title": job.title, "folder": job.key, "status": status, "error": error,
           "seed": job.request.seed, "cot": job.request.cot}
    frames = markers.get("decode", {}).get("units")
    row["audio_seconds"] = audio_samples(cfg.vae, frames) / artifacts.SAMPLE_RATE if frames else None
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


MANIFEST_COLUMNS = ["number", "title", "folder", "status", "error", "seed", "cot", "audio_seconds", "score_midi",
                    "take", "score", "score_sha256"] + [
    f"{s}_{f}" for s in STAGES for f in ("seconds", "worker", "gpu", "gpu_uuid")] + [
    f"sha256_{n.replace('.', '_')}" for n in (artifacts.SCORE, artifacts.PLAN, artifacts.SEMANTIC,
                                               artifacts.LATENTS, artifacts.AUDIO)]


def write_album(store: Store, album, jobs: list[TrackJob], failures: dict[str, str], identity: dict,
                cfg) -> list[dict]:
    """Per-track settings.json for finished tracks, then manifest.parquet, manifest.json and playlist.m3u8.
    `cfg`: the checkpoint's config (its dtype, and the VAE's audio length rule)."""
    rows = []
    for job in jobs:
        markers = trackstore.finished_stages(store, job)
        done = len(markers) == len(job.stages)
        if done and trackstore.tag_render(store, job, album, len(jobs), identity):
            markers = trackstore.finished_stages(store, job)
        held = job.hold_after is not None and len(markers) == len(job.to_run)
        status = "done" if done else ("failed" if job.key in failures else AWAITING if held else "incomplete")
        if done:
            store.write_bytes(f"{job.key}/{artifacts.SETTINGS}", artifacts.json_bytes(
                track_record(job, markers, identity, cfg)))
        rows.append(manifest_row(job, markers, status, failures.get(job.key, ""), cfg))
        rows[-1]["score_midi"] = scores.write_midi(store, job.key) if done else None
        rows[-1].update(take_columns(store, job, markers))
    columns = {c: [r.get(c) for r in rows] for c in MANIFEST_COLUMNS}
    store.write_bytes("manifest.parquet", parquet_bytes(pa.table(columns)))
    kept = [{**row, "takes_kept": takes.history(store, row["folder"])} for row in rows]
    store.write_bytes("manifest.json", artifacts.json_bytes({"album": album.title, "checkpoint": identity,
                                                             "tracks": kept}))
    store.write_bytes("playlist.m3u8", playlist(rows).encode("utf-8"))
    return rows


def take_columns(store: Store, job: TrackJob, markers: dict[str, dict]) -> dict:
    """Which take the top of the folder holds, the score it used (in words), and that score's sha256."""
    import hashlib

    take = takes.read_take(store, job.key)
    score = f"{job.key}/{artifacts.SCORE}"
    plan = markers.get("plan") or trackstore.read_marker(store, job.key, "plan")
    given = job.request.cot != "off" and not job.request.has_plan_stage and take is None
    return {"take": take["take"] if take else 1,
            "score": "none (cot off)" if job.request.cot == "off" else takes.describe(take, plan, given),
            "score_sha256": hashlib.sha256(store.read_bytes(score)).hexdigest() if store.exists(score) else None}


def playlist(rows: list[dict]) -> str:
    lines = ["#EXTM3U"]
    for r in rows:
        if r["status"] == "done":
            lines += [f"#EXTINF:{round(r['audio_seconds'])},{r['title']}", f"{r['folder']}/{artifacts.AUDIO}"]
    return "\n".join(lines) + "\n"
