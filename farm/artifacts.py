"""A song folder's files and their bytes: score.abc, plan.npy, semantic.npy, latents.npy, audio.flac, settings.json.

Encoding is deterministic (same arrays → same bytes), so reruns and the farm can be compared byte for byte. Files
are written through the Store, each atomically; settings.json goes last and marks the folder complete.
"""
from __future__ import annotations

import io
import json
import platform

import numpy as np

from . import __version__
from .store import Store

SCORE, PLAN, SEMANTIC, LATENTS, AUDIO, SETTINGS = (
    "score.abc", "plan.npy", "semantic.npy", "latents.npy", "audio.flac", "settings.json")
SAMPLE_RATE = 48000


def npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def read_npy(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def flac_bytes(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> bytes:
    """48 kHz stereo 24-bit FLAC, encoded in memory (libsndfile needs a seekable file; object stores are not)."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, audio, sample_rate, format="FLAC", subtype="PCM_24")
    return buf.getvalue()


def json_bytes(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, default=_plain) + "\n").encode("utf-8")


def _plain(obj):
    if isinstance(obj, (np.integer, np.floating)):
        return obj.item()
    if isinstance(obj, (tuple, set, frozenset)):
        return list(obj)
    raise TypeError(f"not JSON: {type(obj).__name__}")


def song_files(song) -> dict[str, bytes]:
    """Every artifact of a finished stages.song.Song, in stage order (settings.json excluded)."""
    return {SCORE: song.abc_text.encode("utf-8"), PLAN: npy_bytes(song.abc_ids),
            SEMANTIC: npy_bytes(song.codes), LATENTS: npy_bytes(song.latents), AUDIO: flac_bytes(song.audio)}


def settings_record(*, request, settings, identity, keys, device, dtype, timings, truncated, frames,
                    samples, kernels: dict) -> dict:
    """settings.json: every effective setting, the seed, the checkpoint identity, per-stage timings, and the
    kernel choices that move a song's last bits on the same card (`kernels`: the acoustic attention)."""
    import dataclasses

    return {
        "request": {**dataclasses.asdict(request), "guidance": request.cfg_scale},
        "settings": dataclasses.asdict(settings),
        "checkpoint": identity,
        "stage_keys": keys,
        "device": device, "dtype": dtype, "kernels": kernels,
        "timings": timings,
        "truncated": truncated,
        "audio": {"sample_rate": SAMPLE_RATE, "channels": 2, "frames": frames, "samples": samples,
                  "seconds": samples / SAMPLE_RATE, "format": "FLAC PCM_24"},
        "versions": {"yue2-farm": __version__, "python": platform.python_version(), **_torch_version()},
    }


def _torch_version() -> dict:
    import torch

    return {"torch": torch.__version__}


def write_song(store: Store, folder: str, files: dict[str, bytes], settings: dict) -> None:
    for name, data in files.items():
        store.write_bytes(f"{folder}/{name}" if folder else name, data)
    store.write_bytes(f"{folder}/{SETTINGS}" if folder else SETTINGS, json_bytes(settings))
