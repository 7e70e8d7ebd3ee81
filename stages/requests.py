"""What a song asks of each stage: the checkpoint handle, every setting that changes a song's bytes, the stage
requests built from them, and the checks that fail before any compute.

The sequential path (song.py) and the farm's workers build their requests with these same functions, so both make
the same bytes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from . import fast_sampling
from .acoustic import AcousticRequest
from .ar import SAMPLERS, ARRequest, ARResult
from .config import DEFAULT_DECODE_PRECISION, Sampling, Yue2Config
from .config_json import from_checkpoint
from .protocol import (ProtocolError, SongRequest, check_context, chunk_ranges, given_abc_ids, negative_prefix,
                       plan_prefix, semantic_prefix)
from .tokenizer import Tokenizer, load_tokenizer
from .vae import PRECISIONS


@dataclass(frozen=True)
class Checkpoint:
    model_dir: Path
    vae_dir: Path
    cfg: Yue2Config
    tokenizer: Tokenizer


def open_checkpoint(model_dir: str | Path, vae_dir: str | Path) -> Checkpoint:
    cfg = from_checkpoint(model_dir, vae_dir)
    return Checkpoint(Path(model_dir), Path(vae_dir), cfg, load_tokenizer(Path(model_dir), cfg.tokens))


@dataclass(frozen=True)
class SongSettings:
    """Every setting that changes a song's bytes, besides the request itself."""
    plan: Sampling
    semantic: Sampling
    ode_steps: int
    cond_end: int
    vae_core_frames: int
    vae_halo_frames: int
    sampler: str = "fast"       # the AR sampler (ar.SAMPLERS): "fast" (batched, default) or "exact" (reference)
    decode_precision: str = DEFAULT_DECODE_PRECISION   # the VAE's convolutions (vae.PRECISIONS)


def default_settings(cfg: Yue2Config, *, max_semantic_tokens: int | None = None, ode_steps: int | None = None,
                     plan_tokens: int | None = None, semantic_tokens: int | None = None,
                     sampler: str = "fast", decode_precision: str = DEFAULT_DECODE_PRECISION) -> SongSettings:
    """The checkpoint's defaults with overrides. `plan_tokens`/`semantic_tokens` force exact lengths (benchmarks):
    the end id stays masked until that many ids, and generation stops there."""
    plan, semantic = cfg.generation.plan, cfg.generation.semantic
    if max_semantic_tokens is not None:
        semantic = replace(semantic, max_tokens=max_semantic_tokens,
                           min_tokens=min(semantic.min_tokens, max_semantic_tokens))
    if plan_tokens is not None:
        plan = replace(plan, min_tokens=plan_tokens, max_tokens=plan_tokens)
    if semantic_tokens is not None:
        semantic = replace(semantic, min_tokens=semantic_tokens, max_tokens=semantic_tokens)
    plan.validate("plan sampling")
    semantic.validate("semantic sampling")
    return SongSettings(plan, semantic, ode_steps or cfg.generation.ode_steps, 0,
                        cfg.vae.decode_core_frames, cfg.vae.decode_halo_frames, sampler, decode_precision)


# ---- stage requests ---------------------------------------------------------------------------------------------

def plan_request(ckpt: Checkpoint, key: str, request: SongRequest, settings: SongSettings) -> ARRequest:
    prefix = plan_prefix(request, ckpt.tokenizer, ckpt.cfg.tokens)
    return ARRequest(key, "plan", tuple(prefix), settings.plan, request.seed)


def semantic_request(ckpt: Checkpoint, key: str, request: SongRequest, abc_ids, settings: SongSettings) -> ARRequest:
    t, layout = ckpt.tokenizer, ckpt.cfg.tokens
    negative = negative_prefix(request, t, layout, abc_ids)
    return ARRequest(key, "semantic", tuple(semantic_prefix(request, t, layout, abc_ids)), settings.semantic,
                     request.seed, tuple(negative) if negative else None, request.cfg_scale, request.cot == "off")


def acoustic_request(ckpt: Checkpoint, key: str, request: SongRequest, abc_ids, codes,
                     settings: SongSettings) -> AcousticRequest:
    prefix = semantic_prefix(request, ckpt.tokenizer, ckpt.cfg.tokens, abc_ids)
    return AcousticRequest(key, tuple(prefix), np.asarray(codes, dtype=np.int32), request.seed,
                           settings.ode_steps, settings.cond_end)


def codes_from(result: ARResult, ckpt: Checkpoint) -> np.ndarray:
    return (result.ids - ckpt.cfg.tokens.codec_offset).astype(np.int32)


def ar_tokens_needed(ckpt: Checkpoint, request: SongRequest, settings: SongSettings) -> dict[str, int]:
    """Prefix + generation budget of each AR stage, assuming the longest score the plan may write: the KV rows a
    request can fill, and what must fit the context."""
    layout = ckpt.cfg.tokens
    given = given_abc_ids(request, ckpt.tokenizer, layout)
    out = {}
    if request.has_plan_stage:
        out["plan"] = len(plan_prefix(request, ckpt.tokenizer, layout)) + settings.plan.max_tokens
    longest_abc = given if given is not None else [0] * settings.plan.max_tokens
    prefix = semantic_prefix(request, ckpt.tokenizer, layout, longest_abc)
    out["semantic"] = len(prefix) + settings.semantic.max_tokens
    out["semantic_prefix"] = len(prefix)
    return out


def validate(ckpt: Checkpoint, request: SongRequest, settings: SongSettings) -> None:
    """Fail before any compute if a stage could overrun the context, assuming the longest score the plan may write."""
    context, need = ckpt.cfg.model.context, ar_tokens_needed(ckpt, request, settings)
    if settings.sampler not in SAMPLERS:
        raise ProtocolError(f"sampler must be one of {', '.join(SAMPLERS)}, got {settings.sampler!r}")
    if settings.decode_precision not in PRECISIONS:
        raise ProtocolError(f"decode_precision must be one of {', '.join(PRECISIONS)}, "
                            f"got {settings.decode_precision!r}")
    if settings.sampler == "fast":
        if request.has_plan_stage:
            fast_sampling.check(settings.plan, "plan sampling")
        fast_sampling.check(settings.semantic, "semantic sampling")
    if "plan" in need:
        check_context(need["plan"] - settings.plan.max_tokens, settings.plan.max_tokens, context, "plan")
    check_context(need["semantic_prefix"], settings.semantic.max_tokens, context, "semantic")
    chunk_ranges(1, need["semantic_prefix"], context)
