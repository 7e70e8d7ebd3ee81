"""`farm song`: one song through the sequential path, into a song folder. Validates everything before any compute.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from stages.config import DEFAULT_DECODE_PRECISION

from . import artifacts, scores, tags
from .errors import UserError, read_user_text
from .identity import checkpoint_identity, stage_keys
from .models import resolve_model
from .quantized import check_ar_checkpoint, check_ar_format, check_kv_cache
from .store import open_store


@dataclass(frozen=True)
class SongJob:
    model: str
    style: str
    lyrics_file: Path
    out: str
    seed: int
    cot: str
    abc_file: Path | None = None
    max_semantic_tokens: int | None = None
    vae: str | None = None
    device: str = "auto"
    force: bool = False
    sampler: str = "fast"
    decode_precision: str = DEFAULT_DECODE_PRECISION
    ar_checkpoint: Path | None = None     # a quantised AR checkpoint for plan and semantic (`farm quantize`)
    kv_cache: str = "bf16"                # the AR engine's KV format (stages/kv_cache.py KV_FORMATS)
    ar_format: str | None = None          # the AR step's weights (stages/quant.py FORMATS); None: bf16, or the
                                          # ar_checkpoint's


def read_lyrics(path: Path) -> str:
    text = read_user_text(path, "--lyrics-file")
    if not text.strip():
        raise UserError(f"--lyrics-file {path}: empty")
    return text


def read_abc(path: Path) -> dict:
    """An ABC score: text (.abc, …) or exact token ids (.npy, 1-D integers, e.g. a previous run's plan.npy)."""
    path = Path(path)
    if path.suffix != ".npy":
        from .scores import check_abc

        text = read_user_text(path, "--abc-file")
        check_abc(text, f"--abc-file {path}")
        return {"abc": text}
    if not path.is_file():
        raise UserError(f"--abc-file {path}: " + ("file not found" if not path.exists() else "not a regular file"))
    try:
        ids = np.load(path, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise UserError(f"--abc-file {path}: not a plain .npy array ({exc})") from None
    if ids.ndim != 1 or ids.dtype.kind not in "iu":
        raise UserError(f"--abc-file {path}: expected a 1-D integer array, got {ids.dtype} {list(ids.shape)}")
    return {"abc_ids": tuple(int(i) for i in ids)}


def render_song_folder(job: SongJob) -> dict:
    """Check inputs, render, write the folder. Returns settings.json's content."""
    from stages.protocol import COT_MODES, ProtocolError, SongRequest
    from stages.requests import default_settings, open_checkpoint, validate
    from stages.song import SongEngines, render_song
    from stages.vae import PRECISIONS
    from stages.weights import verify_checkpoint

    from .devices import pick_device

    if job.cot not in COT_MODES:
        raise UserError(f"--cot must be one of {', '.join(COT_MODES)}, got {job.cot!r}")
    lyrics = read_lyrics(job.lyrics_file)
    abc = read_abc(job.abc_file) if job.abc_file else {}
    device = pick_device(job.device)
    paths = resolve_model(job.model, job.vae)
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    verify_checkpoint(paths.model_dir, paths.vae_dir, ckpt.cfg)
    request = SongRequest(style=job.style, lyrics=lyrics, cot=job.cot, seed=job.seed, **abc)
    if job.decode_precision not in PRECISIONS:
        raise UserError(f"--decode-precision must be one of {', '.join(PRECISIONS)}, got {job.decode_precision!r}")
    settings = default_settings(ckpt.cfg, max_semantic_tokens=job.max_semantic_tokens, sampler=job.sampler,
                                decode_precision=job.decode_precision)
    try:
        validate(ckpt, request, settings)
    except ProtocolError as exc:     # the semantic budget is the user's flag when given: name it
        if job.max_semantic_tokens is not None and str(exc).startswith("semantic"):
            raise UserError(f"--max-semantic-tokens {job.max_semantic_tokens}: {exc}") from None
        raise
    ar_format = check_ar_checkpoint(job.ar_checkpoint, ckpt.cfg) if job.ar_checkpoint else None
    ar_format = check_ar_format(job.ar_format, ar_format)
    check_kv_cache(job.kv_cache)
    store = open_store(job.out)               # last: a probe write, once everything else is known to be right
    if not job.force and not store.is_empty():
        raise UserError(f"--out {job.out} is not empty; pass --force to overwrite it")

    engines = SongEngines(ckpt, device=device, fast=device.startswith("cuda"), sampler=job.sampler,
                          ar_checkpoint=job.ar_checkpoint, kv_cache=job.kv_cache, ar_format=ar_format)
    song = render_song(engines, request, settings)
    identity = checkpoint_identity(paths, job.ar_checkpoint, ar_format, job.kv_cache)
    keys = stage_keys(identity, request, settings)
    record = artifacts.settings_record(
        request=request, settings=settings, identity=identity, keys=keys, device=device, dtype=ckpt.cfg.dtype,
        timings=timings_record(song.timings), truncated=song.truncated, frames=len(song.latents),
        samples=len(song.audio), kernels={"acoustic_attention": engines.acoustic.attention.name})
    files = artifacts.song_files(song)
    own = tags.render_tags(request, identity, keys["decode"])       # a lone song has no title or album
    files[artifacts.AUDIO] = tags.with_tags(files[artifacts.AUDIO], own)
    artifacts.write_song(store, "", files, record)
    record["score_midi"] = scores.write_midi(store, "")
    return record


def timings_record(timings) -> dict:
    return {stage: {"seconds": t.seconds, "units": t.units, "units_per_second": t.units / t.seconds if t.seconds else
                    None, "peak_bytes": t.peak_bytes} for stage, t in timings.items()}
