"""Album tracks → the typed jobs that cross the object store, and the payloads each stage hands to the next.

Everything that crosses a process boundary is a frozen dataclass carrying the track key (its folder name); payloads
are numpy arrays. `FromStore` stands in for a payload a previous run already persisted: the worker that needs it
reads it from the store instead of receiving it.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace

import numpy as np

from cluster.workload import FRAMES_PER_SECOND, STAGES, TrackShape
from stages.config import Sampling
from stages.protocol import SongRequest
from stages.requests import SongSettings, default_settings

from .album import AlbumSpec, TrackSpec


@dataclass(frozen=True)
class Candidates:
    """Best of N: how many scores the plan stage writes, and the rule that picks the one that goes on."""
    count: int = 1
    rule: str = "first"                      # scores.CHOOSE_RULES
    target_seconds: float | None = None      # the "length" rule's target


@dataclass(frozen=True)
class TrackJob:
    key: str                      # the track's folder, NN-slug
    number: int
    title: str
    request: SongRequest
    settings: SongSettings
    stage_keys: dict              # stage → content hash of its inputs and settings (identity.stage_keys)
    candidates: Candidates = field(default_factory=Candidates)
    hold_after: str | None = None     # "plan": this render stops the track there, its scores await `farm approve`

    @property
    def stages(self) -> tuple[str, ...]:
        return STAGES if self.request.has_plan_stage else STAGES[1:]

    @property
    def to_run(self) -> tuple[str, ...]:
        """The stages this render takes the track through: all of them, or up to the one it holds after."""
        if self.hold_after in self.stages:
            return self.stages[:self.stages.index(self.hold_after) + 1]
        return self.stages


def candidate_seed(seed: int, candidate: int) -> int:
    """The seed of plan candidate `candidate` (1-based): the track's own for the first, so `plans = 1` renders
    what it always did; derived by a hash for the others (never the seed of a neighbouring track, seed + 1)."""
    if candidate == 1:
        return seed
    return int.from_bytes(hashlib.sha256(f"{seed}/plan/{candidate}".encode()).digest()[:8], "big") >> 1


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


def track_shape(request: SongRequest, settings: SongSettings, title: str, prompt_tokens: int, candidates: int = 1):
    """The planner's view of one track (cluster.workload.TrackShape): its token budgets (every plan candidate's),
    its real plan prompt, and its CFG branches by the request's own guidance rule. The one builder for `farm
    render` and `farm plan`."""
    return TrackShape(settings.semantic.max_tokens / FRAMES_PER_SECOND,
                      settings.plan.max_tokens * candidates if request.has_plan_stage else 0,
                      settings.semantic.max_tokens,
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


def track_has_plan_stage(track: TrackSpec) -> bool:
    """Does the spec leave the track's score to its plan stage (not cot off, no score of the spec's own)?"""
    return track.cot != "off" and track.abc is None and track.abc_ids is None


def track_candidates(track: TrackSpec) -> Candidates:
    return Candidates(track.plans, track.choose, track.target_seconds)


def album_jobs(album: AlbumSpec, ckpt, identity: dict, sampler: str = "fast", hold: bool = False) -> list[TrackJob]:
    """Every track as a job, each validated against the checkpoint (context and all); problems collected. `hold`:
    tracks whose score the plan stage writes stop after it (`farm render --approve`)."""
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
        candidates = track_candidates(track)
        jobs.append(TrackJob(track.folder, track.number, track.title, request, settings,
                             stage_keys(identity, request, settings, candidates), candidates,
                             "plan" if hold and request.has_plan_stage else None))
    if problems:
        raise AlbumError(problems)
    return jobs
