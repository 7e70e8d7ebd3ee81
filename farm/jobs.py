"""Album tracks → the typed jobs that cross the object store, and the payloads each stage hands to the next.

Everything that crosses a process boundary is a frozen dataclass carrying the track key (its folder name); payloads
are numpy arrays. `FromStore` stands in for a payload a previous run already persisted: the worker that needs it
reads it from the store instead of receiving it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from cluster.workload import FRAMES_PER_SECOND, STAGES, TrackShape
from stages.config import Sampling
from stages.protocol import SongRequest
from stages.requests import SongSettings, default_settings

from .album import AlbumSpec, TrackSpec


@dataclass(frozen=True)
class TrackJob:
    key: str                      # the track's folder, NN-slug
    number: int
    title: str
    request: SongRequest
    settings: SongSettings
    stage_keys: dict              # stage → content hash of its inputs and settings (identity.stage_keys)

    @property
    def stages(self) -> tuple[str, ...]:
        return STAGES if self.request.has_plan_stage else STAGES[1:]


@dataclass(frozen=True)
class PlanOutput:
    key: str
    abc_ids: np.ndarray           # int32 score ids (empty for cot off)


@dataclass(frozen=True)
class SemanticOutput:
    key: str
    codes: np.ndarray             # int32 [N]


@dataclass(frozen=True)
class AcousticOutput:
    key: str
    latents: np.ndarray           # float32 [N, latent_dim]


@dataclass(frozen=True)
class FromStore:
    """'Read my input from the store': the stage that made it finished in an earlier run."""
    key: str


@dataclass(frozen=True, kw_only=True)
class StageEvent:
    """What one stage call did, where and when: the farm's unit of accounting (metrics.parquet rows)."""
    track: str
    stage: str
    worker: str
    host: str
    pid: int
    gpu: str                      # card name ("cpu" for CPU workers)
    gpu_uuid: str
    start: float                  # wall clock, seconds since the epoch
    end: float
    units: int                    # tokens (plan, semantic) or latent frames (acoustic, decode)
    batch: float                  # mean requests sharing the worker's batch during this call
    batch_shape: str              # e.g. "ar rows=16 kv_buckets=on" or "chunks=1"
    peak_bytes: int               # peak device memory of the worker during the call (0 on CPU)
    ok: bool = True
    error: str = ""
    queue_wait: float = 0.0       # seconds from ready (its previous stage done) to start: slot waits + worker queue


def track_shape(request: SongRequest, settings: SongSettings, title: str, prompt_tokens: int):
    """The planner's view of one track (cluster.workload.TrackShape): its token budgets, its real plan prompt, and
    its CFG branches by the request's own guidance rule. The one builder for `farm render` and `farm plan`."""
    return TrackShape(settings.semantic.max_tokens / FRAMES_PER_SECOND,
                      settings.plan.max_tokens if request.has_plan_stage else 0, settings.semantic.max_tokens,
                      prompt_tokens=prompt_tokens, title=title, cfg_branches=2 if request.cfg_scale != 1.0 else 1)


def track_settings(track: TrackSpec, cfg, sampler: str = "fast") -> SongSettings:
    """The checkpoint's defaults, then the album's and the track's overrides (validated)."""
    base = default_settings(cfg, max_semantic_tokens=track.max_semantic_tokens, sampler=sampler)
    plan = _override(base.plan, track.sampling.get("plan", {}))
    semantic = _override(base.semantic, track.sampling.get("semantic", {}))
    plan.validate(f"track {track.number} sampling.plan")
    semantic.validate(f"track {track.number} sampling.semantic")
    return replace(base, plan=plan, semantic=semantic, decode_precision=track.decode_precision)


def _override(s: Sampling, values: dict) -> Sampling:
    typed = {k: (float(v) if isinstance(getattr(s, k), float) else v) for k, v in values.items()}
    return replace(s, **typed)


def track_request(track: TrackSpec) -> SongRequest:
    return SongRequest(style=track.style, lyrics=track.lyrics, cot=track.cot, seed=track.seed,
                       guidance=track.guidance, abc=track.abc, abc_ids=track.abc_ids)


def album_jobs(album: AlbumSpec, ckpt, identity: dict, sampler: str = "fast") -> list[TrackJob]:
    """Every track as a job, each validated against the checkpoint (context and all); problems collected."""
    from stages.requests import validate

    from .album import AlbumError
    from .errors import user_error_types
    from .identity import stage_keys

    jobs, problems = [], []
    for track in album.tracks:
        try:
            request, settings = track_request(track), track_settings(track, ckpt.cfg, sampler)
            validate(ckpt, request, settings)
        except user_error_types() as exc:
            problems.append(f"{album.path}: {track.label}: {exc}")
            continue
        jobs.append(TrackJob(track.folder, track.number, track.title, request, settings,
                             stage_keys(identity, request, settings)))
    if problems:
        raise AlbumError(problems)
    return jobs
