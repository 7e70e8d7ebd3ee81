"""A track's folder in the store: its artifacts, the stage markers that make resume safe, and loading inputs back.

Each stage writes its files, then `.stages/<stage>.json` (the stage key, each file's sha256, who made it). A stage
counts as finished only when its marker's key matches the current key and its files are there, so a rerun starts a
track at its first missing stage, a changed setting redoes exactly the stages it touches, and a crash between file
and marker just redoes that stage. `tag_render` keeps a finished raw render's Vorbis comments current (farm/tags.py).
"""
from __future__ import annotations

import hashlib
import json

from . import artifacts, tags
from .jobs import AcousticOutput, PlanOutput, SemanticOutput, TrackJob
from .logs import LOG_FILE, log
from .store import LOCK, Store

STAGE_FILES = {"plan": (artifacts.SCORE, artifacts.PLAN), "semantic": (artifacts.SEMANTIC,),
               "acoustic": (artifacts.LATENTS,), "decode": (artifacts.AUDIO,)}


ALBUM_MARKS = ("manifest.json", "spec.json", "live.json", "metrics", "metrics.parquet", LOCK, LOG_FILE)   # what a render leaves


def is_album_folder(store: Store, keys: list[str]) -> bool:
    """Empty, or an album folder already (a render's own files, or only this album's track folders): a render may
    write here without clobbering someone's unrelated files."""
    entries = set(store.listdir(""))
    return not entries or bool(entries & set(ALBUM_MARKS)) or entries <= set(keys)


def marker(key: str, stage: str) -> str:
    return f"{key}/.stages/{stage}.json"


def write_stage(store: Store, key: str, stage: str, stage_key: str, files: dict[str, bytes], record: dict) -> dict:
    """Persist a finished stage: files first, the marker last. Returns the marker's content."""
    for name, data in files.items():
        store.write_bytes(f"{key}/{name}", data)
    done = {"stage": stage, "key": stage_key, **record,
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}
    store.write_bytes(marker(key, stage), artifacts.json_bytes(done))
    return done


def read_marker(store: Store, key: str, stage: str) -> dict | None:
    """The stage's marker, or None when there is none to trust (missing, damaged, or its folder is not a folder:
    the stage then runs again, and fails on its own if its folder cannot be written)."""
    try:
        return json.loads(store.read_bytes(marker(key, stage)))
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None


def finished_stages(store: Store, job: TrackJob) -> dict[str, dict]:
    """The leading run of stages whose markers match this job's keys and whose files exist, with their markers."""
    done = {}
    for stage in job.stages:
        m = read_marker(store, job.key, stage)
        if m is None or m.get("key") != job.stage_keys[stage]:
            break
        if not all(store.exists(f"{job.key}/{name}") for name in STAGE_FILES[stage]):
            break
        done[stage] = m
    return done


def load_plan(store: Store, key: str) -> PlanOutput:
    return PlanOutput(key, artifacts.read_npy(store.read_bytes(f"{key}/{artifacts.PLAN}")))


def load_semantic(store: Store, key: str) -> SemanticOutput:
    return SemanticOutput(key, artifacts.read_npy(store.read_bytes(f"{key}/{artifacts.SEMANTIC}")))


def load_latents(store: Store, key: str) -> AcousticOutput:
    return AcousticOutput(key, artifacts.read_npy(store.read_bytes(f"{key}/{artifacts.LATENTS}")))


def tag_render(store: Store, job: TrackJob, album, total: int, identity: dict) -> bool:
    """Give a finished track's raw render its current tags (farm/tags.py says why). → whether its decode marker
    changed. The marker records the tags with the file's sha256, so a render that changes nothing reads no audio
    (a whole album from an object store, otherwise)."""
    want = tags.track_tags(job, album, total, identity)
    m = read_marker(store, job.key, "decode")
    if m is None or m.get("tags") == want:
        return False
    path = f"{job.key}/{artifacts.AUDIO}"
    data = store.read_bytes(path)
    if tags.read_tags(data) != want:
        data = tags.with_tags(data, want)
        store.write_bytes(path, data)
        log.info("%s: raw render tagged", job.key)
    m["files"][artifacts.AUDIO] = hashlib.sha256(data).hexdigest()
    m["tags"] = want                     # file first, marker last: a crash between is mended next time
    store.write_bytes(marker(job.key, "decode"), artifacts.json_bytes(m))
    return True
