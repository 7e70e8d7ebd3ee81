"""The sequential one-song path: request → plan → semantic → acoustic → decode, in one process.

It is the reference the farm's output must equal and the baseline every benchmark compares against; the farm's
workers build their stage requests with the same functions (requests.py). Returns arrays; writing them anywhere is
the caller's business.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from .acoustic import AcousticEngine
from .ar import AREngine
from .protocol import ProtocolError, SongRequest, given_abc_ids
from .requests import (Checkpoint, SongSettings, acoustic_request, codes_from, plan_request, semantic_request,
                       validate)
from .vae import OobleckDecoder, decode_audio, load_decoder
from .weights import ALL_PARTS, load_model

STAGES = ("plan", "semantic", "acoustic", "decode")


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
                 sampler: str = "fast", ar_checkpoint=None, kv_cache: str = "bf16", ar_format: str = "bf16"):
        """`ar_checkpoint`: a quantised AR checkpoint (ar_checkpoint.py) for the plan and semantic stages; the
        MoT's own AR half still serves the acoustic stage's prefix. Without one, `ar_format` (quant.FORMATS)
        quantises the model's own AR weights when the engine starts. `kv_cache`: the AR engine's KV format."""
        self.ckpt, self.device = ckpt, torch.device(device)
        model = load_model(ckpt.model_dir, ckpt.cfg, ALL_PARTS, device=device, dtype=dtype)
        ar_model = model
        if ar_checkpoint is not None:
            from .ar_checkpoint import load_quantized_ar

            ar_model, ar_format = load_quantized_ar(ar_checkpoint, ckpt.cfg, device=device)
        self.ar = AREngine(ar_model, ckpt.cfg.tokens, sampler=sampler, cuda_graphs=fast, compile=fast,
                           weight_format=ar_format, kv_format=kv_cache)
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
        audio = decode_audio(engines.decoder, latents, settings.vae_core_frames, settings.vae_halo_frames,
                             settings.decode_precision)
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
