"""The stage worker: one Ray actor per card, hosting the engines of the stages placed on that card.

One process per card means one CUDA context and one copy of shared weights: when the AR stages and the acoustic
stage share a card, the AR branch they both need is loaded once (the planner's memory model assumes this).
- plan + semantic run on one `AREngine` whose thread does continuous batching across every song handed to it (its
  KV pool sized by the plan and capped by the card's free memory);
- acoustic and decode each run one song at a time on a thread of their own, beside the AR thread.
On a real card each engine thread issues its work on a CUDA stream of its own, the AR stream at the highest
priority: the AR step is bound by memory bandwidth and the acoustic stage by tensor throughput, so the card runs
them side by side, and the AR thread's synchronisations wait for its own stream only (`stage_streams`).
Every call persists its stage's artifacts before returning and returns a `StageEvent` saying where it ran. On a
real card the actor sets CUDA_VISIBLE_DEVICES to that card's UUID before CUDA starts, and asks Ray for the card's
own resource (`farm_gpu_<uuid>`), so placement is card by card even on hosts with mixed models.
"""
from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import threading
import time
import traceback
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import ray

from . import artifacts, logs, trackstore
from .jobs import AcousticOutput, FromStore, PlanOutput, SemanticOutput, StageEvent, TrackJob
from .store import Store

ENGINE = {"plan": "ar", "semantic": "ar", "acoustic": "acoustic", "decode": "decode"}


@dataclass(frozen=True)
class CardRef:
    """The card a worker is pinned to (from the inventory), or a node's CPU."""
    node: str
    name: str
    uuid: str
    virtual: bool
    is_cpu: bool

    @property
    def resource(self) -> str:
        from .raycluster import resource_name

        return resource_name(self.node, self.uuid, self.is_cpu)

    @property
    def real_gpu(self) -> bool:
        return not self.is_cpu and not self.virtual


@dataclass(frozen=True)
class WorkerSpec:
    engines: tuple[str, ...]      # of "ar", "acoustic", "decode"
    model_dir: str
    vae_dir: str
    store_url: str
    card: CardRef
    threads: int = 1              # torch CPU threads (the bytes do not depend on it)
    rows: int = 2                 # AR: concurrent KV rows the plan wants (a CFG request takes two)
    capacity: int | None = None   # AR: tokens per row (prefix + generation budget); None = the context
    exact: bool = False           # the reference sampler, one request at a time
    name: str = ""
    ar_checkpoint: str | None = None   # AR: a quantised AR checkpoint instead of the MoT's AR half
    kv_cache: str = "bf16"             # AR: the KV cache's format
    ar_format: str = "bf16"            # AR: the step's weights (the checkpoint's format when there is one)


def stage_streams(torch) -> dict:
    """One CUDA stream per engine thread; AR's at the highest priority (a lower number is a higher priority; one
    beyond the device's range is clamped to it), so the GPU's block scheduler starts its small step kernels ahead of
    waiting acoustic and decode blocks. Priorities never pre-empt a running block: how much the AR step still
    slows down beside the acoustic stage is for `farm bench album` on the card to say."""
    return {"ar": torch.cuda.Stream(priority=-100), "acoustic": torch.cuda.Stream(priority=0),
            "decode": torch.cuda.Stream(priority=0)}


def load_breakdown(seconds: dict[str, float]) -> str:
    """A worker's load_seconds as "23.4 s (weights 3.1, ar 9.8, acoustic 6.2, decode 2.9)"."""
    parts = ", ".join(f"{phase} {s:.1f}" for phase, s in seconds.items() if phase != "total")
    return f"{seconds['total']:.1f} s ({parts})"


def actor_options(spec: WorkerSpec) -> dict:
    """The card's own resource, whole; restarts and retries on (every call is idempotent: keyed, atomic writes).
    No runtime_env: Ray's state API shows every actor's runtime_env to whoever can reach the cluster, so storage
    credentials travel as a constructor argument instead (`Secrets`)."""
    return {"num_cpus": 0, "max_restarts": 2, "max_task_retries": 2, "resources": {spec.card.resource: 1.0}}


class Secrets:
    """The driver's storage credentials and endpoints, for the workers to reach the same store. Its repr names the
    variables, never their values (it may end up in a log or an error message)."""
    PREFIXES = ("AWS_", "FSSPEC_", "GOOGLE_", "GCS", "AZURE_", "YUE2_FARM_")

    def __init__(self, values: dict[str, str]):
        self.values = dict(values)

    @classmethod
    def from_environment(cls) -> "Secrets":
        return cls({k: v for k, v in os.environ.items() if k.startswith(cls.PREFIXES)})

    def __repr__(self) -> str:
        return f"Secrets({', '.join(sorted(self.values))})"


@ray.remote
class CardWorker:
    def __init__(self, spec: WorkerSpec, secrets: Secrets):
        began, began_at = time.perf_counter(), time.time()
        os.environ.update(secrets.values)          # before the store is opened: fsspec reads them there
        if spec.card.real_gpu:
            os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            os.environ["CUDA_VISIBLE_DEVICES"] = spec.card.uuid
        import torch

        from stages.requests import open_checkpoint

        torch.set_num_threads(spec.threads)
        self.spec, self.torch = spec, torch
        self.device = "cuda" if spec.card.real_gpu and torch.cuda.is_available() else "cpu"
        self.ckpt = open_checkpoint(spec.model_dir, spec.vae_dir)
        self.store = Store(spec.store_url)
        self.where = self._where()
        self.log_lines = logs.worker_logging(self.where["worker"])
        self.threads = {e: ThreadPoolExecutor(1, thread_name_prefix=e) for e in ("acoustic", "decode")}
        self.streams = stage_streams(torch) if self.device == "cuda" else {}
        phases = self._load(spec)
        if self.device == "cuda":
            torch.cuda.synchronize()       # the weights and graphs are ready before any stage stream uses them
        # where a worker's start goes (imports, the checkpoint's layout, the weights, each engine's graphs and
        # compiles): `farm bench album` prints it beside the makespan
        self.where["load_seconds"] = {**phases, "total": time.perf_counter() - began}
        self.where["load_began_at"] = began_at       # wall clock: the driver tells Ray's and the spawn's share
        if "ar" in spec.engines:
            self.where["ar_build_seconds"] = dict(self.ar.build_seconds)
        logs.log.info("pid %d on %s (%s): engines %s loaded in %s%s", os.getpid(), self.where["gpu"],
                      self.where["host"], ", ".join(spec.engines), load_breakdown(self.where["load_seconds"]),
                      f"; {self.ar_shape}" if "ar" in spec.engines else "")

    def _load(self, spec: WorkerSpec) -> dict[str, float]:
        """The engines this card hosts, sharing one model for the AR branch; seconds per phase."""
        from stages.laps import Laps
        from stages.transformer import AR, HEAD, NAR
        from stages.weights import load_model

        own_ar = "ar" in spec.engines and spec.ar_checkpoint is None
        parts = ({AR, HEAD} if own_ar else set()) | ({AR, NAR} if "acoustic" in spec.engines else set())
        phases: dict[str, float] = {}
        lap = Laps(self.device, phases)
        # the stages' custom ops import torch's compiler stack on their first call (~1.2 s): paid here, not by the
        # first stage a worker runs (its time would count as the stage's in the metrics and the calibration)
        import torch._dynamo  # noqa: F401
        lap("imports")
        model = load_model(self.ckpt.model_dir, self.ckpt.cfg, parts, device=self.device) if parts else None
        lap("weights")
        cuda = self.device == "cuda"
        if "ar" in spec.engines:
            from stages.ar import AREngine

            ar_model, ar_format = model, spec.ar_format
            if spec.ar_checkpoint is not None:
                from stages.ar_checkpoint import load_quantized_ar

                ar_model, ar_format = load_quantized_ar(spec.ar_checkpoint, self.ckpt.cfg, device=self.device)
            sampler = "exact" if spec.exact else "fast"
            self.ar = AREngine(ar_model, self.ckpt.cfg.tokens, kv_tokens=self._kv_tokens(spec, ar_model),
                               sampler=sampler, cuda_graphs=cuda, compile=cuda, weight_format=ar_format,
                               kv_format=spec.kv_cache)
            self.ar_shape = (f"ar slots={self.ar.slots} kv_pages={self.ar.kv.pages} sampler={sampler} "
                             f"weights={ar_format} kv={spec.kv_cache}")
            self.waiting: deque = deque()
            self.wake = threading.Condition()
            self.loop = None
            threading.Thread(target=self._ar_loop, daemon=True, name="ar-engine").start()
            lap("ar")
        if "acoustic" in spec.engines:
            from stages.acoustic import AcousticEngine

            self.acoustic = AcousticEngine(model, self.ckpt.cfg.tokens)
            lap("acoustic")
        if "decode" in spec.engines:
            from stages.vae import load_decoder

            self.decoder = load_decoder(self.ckpt.vae_dir, self.ckpt.cfg.vae, device=self.device)
            lap("decode")
        return phases

    def _kv_tokens(self, spec: WorkerSpec, model) -> int:
        """The planner's KV budget (rows × tokens per row), capped on a real card by what its memory holds after
        the weights, with room kept for the acoustic stage's working set when it shares the card."""
        from stages.kv_cache import storage_dtype, tokens_for_memory

        cfg = self.ckpt.cfg.model
        want = max(2, spec.rows) * (spec.capacity or cfg.context)
        if self.device != "cuda":
            return want
        free, _ = self.torch.cuda.mem_get_info()
        keep = (12 << 30) if "acoustic" in spec.engines else (4 << 30)
        dtype = storage_dtype(spec.kv_cache, model.model.embed_tokens.weight.dtype)
        return max(cfg.context, min(want, tokens_for_memory(cfg, dtype, free, keep_free=keep)))

    # ---- where, and what a call leaves behind ---------------------------------------------------------------
    def _where(self) -> dict:
        ctx = ray.get_runtime_context()
        gpu, uuid = self.spec.card.name, self.spec.card.uuid
        if self.device == "cuda":
            props = self.torch.cuda.get_device_properties(0)
            gpu, uuid = props.name, f"GPU-{props.uuid}"
        return {"worker": self.spec.name or f"worker-{os.getpid()}", "host": socket.gethostname(),
                "pid": os.getpid(), "gpu": gpu, "gpu_uuid": uuid, "node_id": ctx.get_node_id(),
                "engines": list(self.spec.engines), "resources": dict(ctx.get_assigned_resources())}

    def drain_logs(self) -> list[str]:
        """This worker's log lines since the last call (the driver writes them into render.log)."""
        return self.log_lines.drain()

    def report(self) -> dict:
        """Where this worker runs, as it sees it (card name and UUID from CUDA itself on a real card)."""
        return self.where

    def _event(self, job: TrackJob, stage: str, start: float, units: int, batch: float, shape: str) -> StageEvent:
        peak = self.torch.cuda.max_memory_allocated() if self.device == "cuda" else 0
        w = self.where
        return StageEvent(track=job.key, stage=stage, worker=w["worker"], host=w["host"], pid=w["pid"], gpu=w["gpu"],
                          gpu_uuid=w["gpu_uuid"], start=start, end=time.time(), units=units, batch=batch,
                          batch_shape=shape, peak_bytes=peak)

    def _persist(self, job: TrackJob, files: dict[str, bytes], event: StageEvent, **facts) -> StageEvent:
        """Write the stage's files and marker; the marker keeps the call's event, so metrics can be rebuilt from it
        when the driver dies before it logs the call, and `facts` for the track's settings.json (the device,
        whether an AR stage hit its token cap, the acoustic attention kernel)."""
        trackstore.write_stage(self.store, job.key, event.stage, job.stage_keys[event.stage], files,
                               {"worker": event.worker, "gpu": event.gpu, "gpu_uuid": event.gpu_uuid,
                                "start": event.start, "end": event.end, "units": event.units,
                                "device": self.device, **facts, "event": dataclasses.asdict(event)})
        return event

    def _abc_ids(self, job: TrackJob, plan: PlanOutput | FromStore | None) -> list[int]:
        from stages.protocol import given_abc_ids

        if not job.request.has_plan_stage:
            return given_abc_ids(job.request, self.ckpt.tokenizer, self.ckpt.cfg.tokens) or []
        if isinstance(plan, FromStore):
            plan = trackstore.load_plan(self.store, job.key)
        return plan.abc_ids.tolist()

    # ---- plan and semantic: continuous batching on the AR engine ----------------------------------------------
    @ray.method(num_returns=2)
    async def plan(self, job: TrackJob):
        """The track's score; with best of N, N candidates (seeds from the track's: jobs.candidate_seed) generated
        side by side, all kept in plans/<k>/, and the one the album's rule picks at the top of the folder."""
        from stages.requests import plan_request

        from .jobs import candidate_seed
        from .scores import pick_candidate
        from .takes import candidate_files

        start, n = time.time(), job.candidates.count
        requests = [plan_request(self.ckpt, job.key if n == 1 else f"{job.key}#{k}",
                                 dataclasses.replace(job.request, seed=candidate_seed(job.request.seed, k)),
                                 job.settings) for k in range(1, n + 1)]
        results = await asyncio.gather(*(self._generate(r) for r in requests))
        texts = [self.ckpt.tokenizer.decode(r.ids) for r in results]
        chosen = pick_candidate(texts, job.candidates.rule, job.candidates.target_seconds) if n > 1 else 0
        ids = results[chosen].ids
        files = {artifacts.SCORE: texts[chosen].encode("utf-8"), artifacts.PLAN: artifacts.npy_bytes(ids)}
        if n > 1:
            files.update(candidate_files([(t, artifacts.npy_bytes(r.ids)) for t, r in zip(texts, results)]))
        best_of = {"candidates": n, "chosen": chosen + 1, "rule": job.candidates.rule} if n > 1 else {}
        event = self._event(job, "plan", start, sum(len(r.ids) for r in results),
                            sum(r.mean_batch for r in results) / n, self.ar_shape)
        event = self._persist(job, files, event, truncated=any(r.truncated for r in results), **best_of)
        return PlanOutput(job.key, ids), event

    @ray.method(num_returns=2)
    async def semantic(self, job: TrackJob, plan):
        from stages.requests import codes_from, semantic_request

        start = time.time()
        abc_ids = self._abc_ids(job, plan)
        result = await self._generate(semantic_request(self.ckpt, job.key, job.request, abc_ids, job.settings))
        codes = codes_from(result, self.ckpt)
        if codes.size == 0:
            raise ValueError(f"{job.key}: the semantic stage produced no codes")
        files = {artifacts.SEMANTIC: artifacts.npy_bytes(codes)}
        if not job.request.has_plan_stage:   # the given score (or none, cot off) is this track's score
            text = job.request.abc if job.request.abc is not None else self.ckpt.tokenizer.decode(abc_ids)
            files = {artifacts.SCORE: text.encode("utf-8"),
                     artifacts.PLAN: artifacts.npy_bytes(np.asarray(abc_ids, dtype=np.int32)), **files}
        event = self._event(job, "semantic", start, len(codes), result.mean_batch, self.ar_shape)
        return SemanticOutput(job.key, codes), self._persist(job, files, event, truncated=result.truncated)

    async def _generate(self, request):
        self.loop = asyncio.get_running_loop()
        future = self.loop.create_future()
        with self.wake:
            self.waiting.append((request, future))
            self.wake.notify()
        return await future

    def _on_stream(self, engine: str):
        return self.torch.cuda.stream(self.streams[engine]) if engine in self.streams else contextlib.nullcontext()

    def _ar_loop(self) -> None:
        with self._on_stream("ar"):
            self._ar_steps()

    def _ar_steps(self) -> None:
        """The engine thread: admit what fits, step, hand finished results back to their awaiting calls."""
        pending: dict[tuple[str, str], asyncio.Future] = {}
        while True:
            with self.wake:
                while not self.waiting and not self.ar.live:
                    self.wake.wait()
                while self.waiting and not (self.spec.exact and self.ar.live):
                    request, future = self.waiting[0]
                    if not self.ar.can_admit(request) and self.ar.live:
                        break                    # it waits for a live request to give its slots and pages back
                    self.waiting.popleft()
                    try:                         # alone and still too big: admit says why, and only it fails
                        self.ar.admit(request)
                        pending[(request.key, request.phase)] = future
                    except Exception as exc:  # a bad request fails its own call, not the worker
                        self.loop.call_soon_threadsafe(future.set_exception, exc)
            try:
                finished = self.ar.step()
            except BaseException:
                # The engine's state (a CUDA context, half a batch) cannot be trusted any more: end the process so
                # Ray restarts the actor and retries its calls. Said on stderr too (Ray's worker log on the node):
                # the buffered lines die with the process.
                logs.log.critical("the AR engine's step failed; ending the worker so Ray restarts it", exc_info=True)
                traceback.print_exc()
                os._exit(1)
            for result in finished:
                future = pending.pop((result.key, result.phase))
                self.loop.call_soon_threadsafe(future.set_result, result)

    # ---- acoustic and decode: one song at a time each, on their own threads ----------------------------------
    @ray.method(num_returns=2)
    async def synthesize(self, job: TrackJob, plan, semantic):
        return await asyncio.get_running_loop().run_in_executor(
            self.threads["acoustic"], self._synthesize, job, plan, semantic)

    def _synthesize(self, job: TrackJob, plan, semantic):
        from stages.requests import acoustic_request

        start = time.time()
        if isinstance(semantic, FromStore):
            semantic = trackstore.load_semantic(self.store, job.key)
        request = acoustic_request(self.ckpt, job.key, job.request, self._abc_ids(job, plan), semantic.codes,
                                   job.settings)
        with self._on_stream("acoustic"):
            latents = self.acoustic.synthesize(request)
        event = self._event(job, "acoustic", start, len(latents), 1.0, f"chunks={len(self.acoustic.check(request))}")
        return AcousticOutput(job.key, latents), self._persist(job, {artifacts.LATENTS: artifacts.npy_bytes(latents)},
                                                               event, attention=self.acoustic.attention.name)

    async def decode(self, job: TrackJob, acoustic) -> StageEvent:
        return await asyncio.get_running_loop().run_in_executor(self.threads["decode"], self._decode, job, acoustic)

    def _decode(self, job: TrackJob, acoustic) -> StageEvent:
        from stages.vae import decode_audio

        start = time.time()
        if isinstance(acoustic, FromStore):
            acoustic = trackstore.load_latents(self.store, job.key)
        s = job.settings
        with self._on_stream("decode"):
            audio = decode_audio(self.decoder, acoustic.latents, s.vae_core_frames, s.vae_halo_frames,
                                 s.decode_precision)
        flac = artifacts.flac_bytes(audio)
        tiles = -(-len(acoustic.latents) // s.vae_core_frames)
        event = self._event(job, "decode", start, len(acoustic.latents), 1.0, f"tiles={tiles}")
        return self._persist(job, {artifacts.AUDIO: flac}, event)
