"""The stage workers: Ray actors around the stage engines, each pinned to one card and loading only its tensors.

- `ARWorker` (plan + semantic, one engine): an async actor whose engine thread runs continuous batching across
  every song it has been handed; calls just enqueue and await their result.
- `AcousticWorker` and `DecodeWorker`: one call at a time (Ray queues the rest).
Each call persists its stage's artifacts to the store before returning, and returns a `StageEvent` saying where
it ran. A worker on a real card sets CUDA_VISIBLE_DEVICES to that card's UUID before CUDA starts; Ray is asked for
the card's own custom resource (`farm_gpu_<uuid>`), so placement is card by card even on hosts of mixed models.
"""
from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
import ray

from . import artifacts, trackstore
from .jobs import AcousticOutput, FromStore, PlanOutput, SemanticOutput, StageEvent, TrackJob
from .store import Store


@dataclass(frozen=True)
class CardRef:
    """The card a worker is pinned to (from the inventory), or the node's CPU."""
    node: str
    name: str
    uuid: str
    virtual: bool
    is_cpu: bool

    @property
    def resource(self) -> str:
        return f"farm_gpu_{self.uuid}"


@dataclass(frozen=True)
class WorkerSpec:
    stage: str                    # "ar", "acoustic" or "decode"
    model_dir: str
    vae_dir: str
    store_url: str
    card: CardRef
    threads: int = 1              # torch CPU threads (equal counts on both sides give equal bytes)
    rows: int = 2                 # AR: KV-cache rows (a CFG request takes two)
    capacity: int | None = None   # AR: tokens per row (prefix + generation budget); None = the model context
    exact: bool = False           # one request at a time: the sequential path's numerics
    name: str = ""


def actor_options(spec: WorkerSpec, share: float) -> dict:
    """Ray options that put the actor on its card: the card's own resource, a fraction when cards are shared."""
    opts = {"num_cpus": 0, "max_restarts": 2, "max_task_retries": 2,
            "runtime_env": {"env_vars": forwarded_env()}}
    if not spec.card.is_cpu:
        opts["resources"] = {spec.card.resource: share}
    else:
        opts["resources"] = {f"farm_cpu_{spec.card.node}": share}
    return opts


def forwarded_env() -> dict[str, str]:
    """Storage credentials and endpoints the workers need to reach the same store as the driver."""
    prefixes = ("AWS_", "FSSPEC_", "GOOGLE_", "GCS", "AZURE_", "YUE2_FARM_")
    return {k: v for k, v in os.environ.items() if k.startswith(prefixes)}


class _Stage:
    """What every worker does at start: threads, the card, the checkpoint, the store."""

    def __init__(self, spec: WorkerSpec):
        if not spec.card.is_cpu and not spec.card.virtual:
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            os.environ["CUDA_VISIBLE_DEVICES"] = spec.card.uuid
        import torch

        from stages.song import open_checkpoint

        torch.set_num_threads(spec.threads)
        self.spec, self.torch = spec, torch
        self.device = "cuda" if torch.cuda.is_available() and not spec.card.is_cpu and not spec.card.virtual \
            else "cpu"
        self.ckpt = open_checkpoint(spec.model_dir, spec.vae_dir)
        self.store = Store(spec.store_url)
        self.where = self._where()

    def _where(self) -> dict:
        ctx = ray.get_runtime_context()
        gpu, uuid = self.spec.card.name, self.spec.card.uuid
        if self.device == "cuda":
            props = self.torch.cuda.get_device_properties(0)
            gpu, uuid = props.name, f"GPU-{props.uuid}"
        return {"worker": self.spec.name or f"{self.spec.stage}-{os.getpid()}", "host": socket.gethostname(),
                "pid": os.getpid(), "gpu": gpu, "gpu_uuid": uuid, "node_id": ctx.get_node_id(),
                "resources": {k: v for k, v in ctx.get_assigned_resources().items()}}

    def report(self) -> dict:
        """Where this worker runs, as it sees it (card name and UUID from CUDA itself on a real card)."""
        return self.where

    def event(self, job: TrackJob, stage: str, start: float, units: int, batch: float, shape: str) -> StageEvent:
        peak = 0
        if self.device == "cuda":
            peak = self.torch.cuda.max_memory_allocated()
            self.torch.cuda.reset_peak_memory_stats()
        w = self.where
        return StageEvent(job.key, stage, w["worker"], w["host"], w["pid"], w["gpu"], w["gpu_uuid"], start,
                          time.time(), units, batch, shape, peak)

    def persist(self, job: TrackJob, stage: str, files: dict[str, bytes], start: float, units: int) -> None:
        trackstore.write_stage(self.store, job.key, stage, job.stage_keys[stage], files,
                               {"worker": self.where["worker"], "gpu": self.where["gpu"],
                                "gpu_uuid": self.where["gpu_uuid"], "start": start, "end": time.time(),
                                "units": units})

    def abc_ids(self, job: TrackJob, plan: PlanOutput | FromStore | None) -> list[int]:
        from stages.protocol import given_abc_ids

        if not job.request.has_plan_stage:
            return given_abc_ids(job.request, self.ckpt.tokenizer, self.ckpt.cfg.tokens) or []
        if isinstance(plan, FromStore):
            plan = trackstore.load_plan(self.store, job.key)
        return plan.abc_ids.tolist()


@ray.remote
class ARWorker(_Stage):
    """Plan and semantic on one AR engine; songs join and leave its batch as they come (continuous batching)."""

    def __init__(self, spec: WorkerSpec):
        super().__init__(spec)
        from stages.ar import AREngine
        from stages.transformer import AR, HEAD
        from stages.weights import load_model

        model = load_model(self.ckpt.model_dir, self.ckpt.cfg, {AR, HEAD}, device=self.device)
        cuda = self.device == "cuda"
        # On the CPU rows span the whole context, as in the sequential path, so batching never changes a number.
        self.engine = AREngine(model, self.ckpt.cfg.tokens, rows=max(2, spec.rows),
                               capacity=spec.capacity if cuda else None, cuda_graphs=cuda, kv_buckets=cuda)
        self.shape = f"ar rows={self.engine.rows} kv_buckets={'on' if cuda else 'off'}"
        self.waiting: deque = deque()
        self.wake = threading.Condition()
        self.loop = None
        threading.Thread(target=self._run, daemon=True, name="ar-engine").start()

    @ray.method(num_returns=2)
    async def plan(self, job: TrackJob):
        from stages.song import plan_request

        start = time.time()
        result = await self._generate(plan_request(self.ckpt, job.key, job.request, job.settings))
        ids = result.ids
        text = self.ckpt.tokenizer.decode(ids)
        self.persist(job, "plan", {artifacts.SCORE: text.encode("utf-8"), artifacts.PLAN: artifacts.npy_bytes(ids)},
                     start, len(ids))
        return PlanOutput(job.key, ids), self.event(job, "plan", start, len(ids), result.mean_batch, self.shape)

    @ray.method(num_returns=2)
    async def semantic(self, job: TrackJob, plan):
        from stages.song import codes_from, semantic_request

        start = time.time()
        abc_ids = self.abc_ids(job, plan)
        result = await self._generate(semantic_request(self.ckpt, job.key, job.request, abc_ids, job.settings))
        codes = codes_from(result, self.ckpt)
        if codes.size == 0:
            raise ValueError(f"{job.key}: the semantic stage produced no codes")
        files = {artifacts.SEMANTIC: artifacts.npy_bytes(codes)}
        if not job.request.has_plan_stage:   # the given score (or none, cot off) is this track's score
            text = job.request.abc if job.request.abc is not None else self.ckpt.tokenizer.decode(abc_ids)
            files = {artifacts.SCORE: text.encode("utf-8"),
                     artifacts.PLAN: artifacts.npy_bytes(np.asarray(abc_ids, dtype=np.int32)), **files}
        self.persist(job, "semantic", files, start, len(codes))
        return SemanticOutput(job.key, codes), self.event(job, "semantic", start, len(codes), result.mean_batch,
                                                          self.shape)

    async def _generate(self, request):
        self.loop = asyncio.get_running_loop()
        future = self.loop.create_future()
        with self.wake:
            self.waiting.append((request, future))
            self.wake.notify()
        return await future

    def _run(self) -> None:
        """The engine thread: admit what fits, step, hand finished results back to their awaiting calls."""
        pending: dict[str, asyncio.Future] = {}
        while True:
            with self.wake:
                while not self.waiting and not self.engine.live:
                    self.wake.wait()
                while self.waiting and self.engine.can_admit(self.waiting[0][0]) and not (
                        self.spec.exact and self.engine.live):
                    request, future = self.waiting.popleft()
                    try:
                        self.engine.admit(request)
                        pending[request.key + request.phase] = future
                    except Exception as exc:  # a bad request fails its own call, not the worker
                        self.loop.call_soon_threadsafe(future.set_exception, exc)
            try:
                finished = self.engine.step()
            except BaseException:
                # The engine's state (a CUDA context, half a batch) cannot be trusted any more: end the process so
                # Ray restarts the actor and retries its calls.
                os._exit(1)
            for result in finished:
                future = pending.pop(result.key + result.phase)
                self.loop.call_soon_threadsafe(future.set_result, result)


@ray.remote
class AcousticWorker(_Stage):
    def __init__(self, spec: WorkerSpec):
        super().__init__(spec)
        from stages.acoustic import AcousticEngine
        from stages.transformer import AR, NAR
        from stages.weights import load_model

        model = load_model(self.ckpt.model_dir, self.ckpt.cfg, {AR, NAR}, device=self.device)
        self.engine = AcousticEngine(model, self.ckpt.cfg.tokens)

    @ray.method(num_returns=2)
    def synthesize(self, job: TrackJob, plan, semantic):
        from stages.song import acoustic_request

        start = time.time()
        if isinstance(semantic, FromStore):
            semantic = trackstore.load_semantic(self.store, job.key)
        request = acoustic_request(self.ckpt, job.key, job.request, self.abc_ids(job, plan), semantic.codes,
                                   job.settings)
        latents = self.engine.synthesize(request)
        self.persist(job, "acoustic", {artifacts.LATENTS: artifacts.npy_bytes(latents)}, start, len(latents))
        chunks = len(self.engine.check(request))
        return AcousticOutput(job.key, latents), self.event(job, "acoustic", start, len(latents), 1.0,
                                                            f"chunks={chunks}")


@ray.remote
class DecodeWorker(_Stage):
    def __init__(self, spec: WorkerSpec):
        super().__init__(spec)
        from stages.vae import load_decoder

        self.decoder = load_decoder(self.ckpt.vae_dir, self.ckpt.cfg.vae, device=self.device)

    def decode(self, job: TrackJob, acoustic) -> StageEvent:
        from stages.vae import decode_audio

        start = time.time()
        if isinstance(acoustic, FromStore):
            acoustic = trackstore.load_latents(self.store, job.key)
        s = job.settings
        audio = decode_audio(self.decoder, acoustic.latents, s.vae_core_frames, s.vae_halo_frames)
        self.persist(job, "decode", {artifacts.AUDIO: artifacts.flac_bytes(audio)}, start, len(acoustic.latents))
        tiles = -(-len(acoustic.latents) // s.vae_core_frames)
        return self.event(job, "decode", start, len(acoustic.latents), 1.0, f"tiles={tiles}")
