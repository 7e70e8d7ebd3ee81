"""The sequential one-song path: request → plan → semantic → acoustic → decode, in one process.

It is the reference the farm's output must equal and the baseline every benchmark compares against, so the farm's
workers build their stage requests with the same functions (`plan_request`, `semantic_request`, …). Returns arrays;
writing them anywhere is the caller's business.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch

from .acoustic import AcousticEngine, AcousticRequest
from . import fast_sampling
from .ar import SAMPLERS, AREngine, ARRequest, ARResult
from .config import Sampling, Yue2Config, from_checkpoint
from .protocol import (ProtocolError, SongRequest, check_context, chunk_ranges, given_abc_ids, negative_prefix,
                       plan_prefix, semantic_prefix)
from .tokenizer import Tokenizer, load_tokenizer
from .vae import OobleckDecoder, decode_audio, load_decoder
from .weights import ALL_PARTS, load_model

STAGES = ("plan", "semantic", "acoustic", "decode")


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


def default_settings(cfg: Yue2Config, *, max_semantic_tokens: int | None = None, ode_steps: int | None = None,
                     plan_tokens: int | None = None, semantic_tokens: int | None = None,
                     sampler: str = "fast") -> SongSettings:
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
                        cfg.vae.decode_core_frames, cfg.vae.decode_halo_frames, sampler)


# ---- stage requests (shared with the farm) ---------------------------------------------------------------------

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
    if settings.sampler == "fast":
        if request.has_plan_stage:
            fast_sampling.check(settings.plan, "plan sampling")
        fast_sampling.check(settings.semantic, "semantic sampling")
    if "plan" in need:
        check_context(need["plan"] - settings.plan.max_tokens, settings.plan.max_tokens, context, "plan")
    check_context(need["semantic_prefix"], settings.semantic.max_tokens, context, "semantic")
    chunk_ranges(1, need["semantic_prefix"], context)


# ---- the sequential path ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class StageTiming:
    seconds: float
    units: int                 # tokens (plan, semantic) or latent frames (acoustic, decode)
    peak_bytes: int | None     # peak device memory during the stage (CUDA only)


@dataclass(frozen=True)
class Song:
    abc_text: str
    abc_ids: np.ndarray        # int32 score tokens (empty for cot off)
    codes: np.ndarray          # int32 [N]
    latents: np.ndarray        # float32 [N, latent_dim]
    audio: np.ndarray          # float32 [1920·N − 64, 2] in [−1, 1]
    truncated: dict[str, bool]
    timings: dict[str, StageTiming]


class SongEngines:
    """All four stages' engines for one checkpoint on one device: the model is loaded once and shared.
    `fast` (CUDA graphs + torch.compile for the AR step) is a hardware choice and never changes a song."""

    def __init__(self, ckpt: Checkpoint, device="cpu", dtype: torch.dtype | None = None, fast=False,
                 sampler: str = "fast"):
        self.ckpt, self.device = ckpt, torch.device(device)
        model = load_model(ckpt.model_dir, ckpt.cfg, ALL_PARTS, device=device, dtype=dtype)
        self.ar = AREngine(model, ckpt.cfg.tokens, sampler=sampler, cuda_graphs=fast, compile=fast)
        self.acoustic = AcousticEngine(model, ckpt.cfg.tokens)
        self.decoder: OobleckDecoder = load_decoder(ckpt.vae_dir, ckpt.cfg.vae, device=device)


def render_song(engines: SongEngines, request: SongRequest, settings: SongSettings, key: str = "song") -> Song:
    ckpt, meter = engines.ckpt, _Meter(engines.device)
    validate(ckpt, request, settings)
    if settings.sampler != engines.ar.sampler:
        raise ValueError(f"settings ask for the {settings.sampler} sampler, the engines run {engines.ar.sampler}")
    abc_ids, truncated = given_abc_ids(request, ckpt.tokenizer, ckpt.cfg.tokens), {}
    if request.has_plan_stage:
        with meter("plan") as m:
            (result,) = engines.ar.generate([plan_request(ckpt, key, request, settings)])
            m.units = len(result.ids)
        abc_ids, truncated["plan"] = result.ids.tolist(), result.truncated
    abc_ids = abc_ids or []
    abc_text = request.abc if request.abc is not None else ckpt.tokenizer.decode(abc_ids)
    with meter("semantic") as m:
        (result,) = engines.ar.generate([semantic_request(ckpt, key, request, abc_ids, settings)])
        m.units = len(result.ids)
    codes, truncated["semantic"] = codes_from(result, ckpt), result.truncated
    if codes.size == 0:
        raise ProtocolError("the semantic stage produced no codes")
    with meter("acoustic") as m:
        latents = engines.acoustic.synthesize(acoustic_request(ckpt, key, request, abc_ids, codes, settings))
        m.units = len(latents)
    with meter("decode") as m:
        audio = decode_audio(engines.decoder, latents, settings.vae_core_frames, settings.vae_halo_frames)
        m.units = len(latents)
    return Song(abc_text, np.asarray(abc_ids, dtype=np.int32), codes, latents, audio, truncated, meter.timings)


class _Meter:
    """Times a stage (device synchronised) and records its peak device memory."""

    def __init__(self, device: torch.device):
        self.device, self.timings, self.units = device, {}, 0

    def __call__(self, stage: str):
        self.stage = stage
        return self

    def __enter__(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        self.units, self.start = 0, time.perf_counter()
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        peak = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = torch.cuda.max_memory_allocated(self.device)
        self.timings[self.stage] = StageTiming(time.perf_counter() - self.start, self.units, peak)
        return False
