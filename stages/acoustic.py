"""The acoustic stage: semantic codes → VAE latents by 32-step midpoint flow matching on the NAR branch.

Per chunk: one causal AR prefill of prefix + codes + MUSIC_END (its K/V do not depend on the latents or t, so they
are computed once), then the ODE from noise (t = 1) to data (t = 0) with two velocity evaluations per step (the
cached form of the MoT forward: transformer.velocity). Noise is one CPU FP32 draw per song, so results do not
depend on how the song is chunked or on which device runs it. Knows nothing about scheduling or storage.

Speed (docs/benchmarks.md): an evaluation is two large GEMM groups and flash attention over ~16k keys (FlashAttention-4
where installed on a Hopper or Blackwell card, SDPA elsewhere: nar_attention.py); the rest was ~60 small eager
kernels per layer (a third of the time on an H200). On CUDA the layer's elementwise work is
compiled with `torch.compile` (the chunk length dynamic: one compile serves every chunk), each layer's prefix keys sit
in a buffer filled once per chunk (`transformer.nar_kv_buffers`) instead of being concatenated anew on each of the
64 evaluations, and a chunk's evaluations after the first replay one CUDA graph of it (`_Graphed`: ~550 launches
an evaluation, 2–3 % of its time on an H200). The chunk's AR prefill runs through the same compiled layer (SDPA's
causal kernel; FA4's measured level): 115 → 75 ms a reference chunk on an H100 (docs/benchmarks.md, 2026-12-07,
thirtieth session). Both passes run the layer cut as `transformer.layer_head_into` / `layer_tail_open`: the head
stores the rows' K/V straight into the attention's buffers and adds the down product's residual inside its norm's
kernel, where the plain cut copied K/V after the head and added the residual in a kernel of its own (H100: 3.85 →
3.80 s a reference chunk, 1.7 GiB less at the peak; docs/benchmarks.md, 2026-12-07, thirty-second session).
Compiling and graphs are properties of the device, like a kernel choice: every CUDA engine uses them; a graph replays
exactly the kernels of an eager call, so the latents are the same bits.

Measured on an H100 and not built (docs/benchmarks.md, 2026-12-06, twenty-fifth session):
- several songs' chunks in one evaluation: 0.98–0.99× the time a song (at 1,500 rows the products already run at
  the card's rate);
- FP8 products: 0.89× the time, latents 16× further from FP32 than BF16's;
- the layer compiled with max-autotune: cuBLAS kept every product; 0.99× the time, after a 14 s tune.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from . import nar_attention
from .compiled import compiled
from .config import TokenLayout
from .protocol import ProtocolError, chunk_ranges
from .transformer import (BranchWeights, YuE2, ar_prefill, layer_head_into, layer_tail_open, nar_kv_buffers,
                          timestep_tau, velocity_at)


@dataclass(frozen=True)
class AcousticRequest:
    key: str
    prefix: tuple[int, ...]      # the semantic-stage prefix (ends with MUSIC_START)
    codes: np.ndarray            # int32 [N] codec codes, 0 ≤ c < codebook
    seed: int
    ode_steps: int = 32
    cond_end: int = 0            # nar_cond_end: 0 = NAR rows see the whole AR prefix


def song_noise(frames: int, latent_dim: int, seed: int) -> torch.Tensor:
    """The whole song's noise: one FP32 draw from a fresh CPU generator (the global RNG is untouched)."""
    generator = torch.Generator("cpu").manual_seed(seed)
    return torch.randn((frames, latent_dim), dtype=torch.float32, generator=generator)


def chunk_tokens(prefix, codes: np.ndarray, a: int, b: int, layout: TokenLayout) -> list[int]:
    """A = prefix + codec ids of codes[a:b] + MUSIC_END."""
    return list(prefix) + [layout.codec_offset + int(c) for c in codes[a:b]] + [layout.music_end]


def raw_time(t: float) -> float:
    """clamp(logit(t), −20, 20) in FP64; t = 1 → 20."""
    return torch.logit(torch.tensor(t, dtype=torch.float64)).clamp(-20, 20).item()


def midpoint_solve(v: Callable[[torch.Tensor, float], torch.Tensor], x: torch.Tensor, steps: int) -> torch.Tensor:
    """Integrate dx/dt = v from t = 1 to 0 with the midpoint rule; 2·steps calls of v(x, raw_time(t))."""
    dt = 1.0 / steps
    for k in range(steps):
        t = 1.0 - k * dt
        mid = x - v(x, raw_time(t)) * (dt / 2)
        x = x - v(mid, raw_time(t - dt / 2)) * dt
    return x


class AcousticEngine:
    """Holds a model with the AR and NAR branches (no lm_head) on one device."""

    def __init__(self, model: YuE2, layout: TokenLayout, attention: str | None = None):
        weight = model.model.norm.weight
        self.model, self.layout, self.cfg = model, layout, model.cfg
        self.device, self.dtype = weight.device, weight.dtype
        self.attention = nar_attention.pick(self.device, self.dtype, attention)
        self.head, self.tail = layer_head_into, layer_tail_open
        self.graphs = self.device.type == "cuda"
        if self.device.type == "cuda":
            self.head, self.tail = _compiled_layer()
            try:
                self._warm_up()
            except Exception as e:
                if not self.attention.name.startswith("fa4"):
                    raise
                raise RuntimeError(f"FlashAttention-4 failed on {self.device} ({type(e).__name__}: {e}); "
                                   "YUE2_FARM_NAR_ATTENTION=sdpa runs PyTorch's SDPA instead") from e

    @torch.inference_mode()
    def _warm_up(self) -> None:
        """Compile the layer and the attention's kernels now, on a small chunk, rather than inside the first song.
        Under inference mode like every chunk: Dynamo guards on the grad mode and would compile them again."""
        self.solve_chunk([self.layout.music_start] * 24, torch.zeros(6, self.cfg.latent_dim), steps=1)
        if self.attention.warm is not None:
            m = self.cfg
            self.attention.warm(m.num_attention_heads, m.num_key_value_heads, m.head_dim, self.dtype, self.device)

    def check(self, request: AcousticRequest) -> list[tuple[int, int]]:
        codes = np.asarray(request.codes)
        if codes.ndim != 1 or codes.size == 0:
            raise ProtocolError(f"{request.key}: semantic codes must be a non-empty 1-D array")
        if codes.min() < 0 or codes.max() >= self.layout.codebook:
            raise ProtocolError(f"{request.key}: semantic codes must lie in [0, {self.layout.codebook})")
        if request.ode_steps < 1:
            raise ProtocolError(f"{request.key}: ode_steps must be >= 1")
        return chunk_ranges(codes.size, len(request.prefix), self.cfg.context)

    @torch.inference_mode()
    def synthesize(self, request: AcousticRequest) -> np.ndarray:
        """→ latents float32 [N, latent_dim] on the CPU."""
        ranges = self.check(request)
        noise = song_noise(len(request.codes), self.cfg.latent_dim, request.seed)
        pieces = []
        for a, b in ranges:
            ids = chunk_tokens(request.prefix, request.codes, a, b, self.layout)
            pieces.append(self.solve_chunk(ids, noise[a:b], request.ode_steps, request.cond_end))
        return torch.cat(pieces).numpy()

    @torch.inference_mode()
    def solve_chunk(self, ids: list[int], noise: torch.Tensor, steps: int, cond_end: int = 0) -> torch.Tensor:
        """One chunk: AR prefill once, then the ODE in the model dtype; → FP32 CPU latents [b − a, latent_dim]."""
        v = self.chunk_velocity(ids, len(noise), cond_end)
        x = midpoint_solve(v, noise.to(device=self.device, dtype=self.dtype), steps)
        return x.float().cpu()

    def chunk_velocity(self, ids: list[int], frames: int,
                       cond_end: int = 0) -> Callable[[torch.Tensor, float], torch.Tensor]:
        """The chunk's AR prefill, its K/V in buffers with room for `frames` NAR rows, and → its v(x, raw)."""
        tokens = torch.tensor(ids, dtype=torch.long, device=self.device)
        _, prefix_kv = ar_prefill(self.model, tokens, self.head, self.tail, self.attention.seq_major)
        end = cond_end if cond_end > 0 else len(ids)
        return self.evaluator(len(ids), nar_kv_buffers(prefix_kv, end, frames + 2, self.attention.seq_major))

    def evaluator(self, prefix_len: int, buffers) -> Callable[[torch.Tensor, float], torch.Tensor]:
        """One chunk's velocity v(x, raw) as the engine evaluates it (transformer.velocity's maths over filled
        prefix buffers, laid out for `self.attention`; on CUDA a replayed graph after the first call). The chunk's
        shapes stay fixed."""
        def at(x, tau):
            return velocity_at(self.model, prefix_len, x, tau, buffers, self.head, self.tail, self.attention.attend)

        f = _Graphed(at) if self.graphs else at

        def v(x, raw):
            return f(x, timestep_tau(raw, x.dtype, self.cfg.timestep_shift, x.device))
        return v


class _Graphed:
    """fn(x, tau) of one chunk (fixed shapes, fixed buffers) as a CUDA graph: the first call runs eagerly and is
    then captured; later calls copy their inputs into the graph's and replay it. The capture is thread-local on a
    stream of its own: a farm worker's other engines run on other threads meanwhile."""

    def __init__(self, fn):
        self.fn, self.graph = fn, None

    def __call__(self, x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
        if self.graph is None:
            out = self.fn(x, tau)
            self.x, self.tau = x.clone(), tau.clone()
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=torch.cuda.Stream(), capture_error_mode="thread_local"):
                self.out = self.fn(self.x, self.tau)
            return out
        self.x.copy_(x)
        self.tau.copy_(tau)
        self.graph.replay()
        return self.out.clone()


def _nar_head(x, delta, in_norm, qkv, q_norm, k_norm, cos, sin, kb, vb, d):
    return layer_head_into(x, delta, BranchWeights(in_norm, qkv, q_norm, k_norm, None, None, None, None), cos, sin,
                           kb, vb, d)


def _nar_tail(x, attn, o, post_norm, gate_up, down, d):
    return layer_tail_open(x, attn, BranchWeights(None, None, None, None, o, post_norm, gate_up, down), d)


_COMPILED: list = []


def _compiled_layer():
    """layer_head / layer_tail compiled once per process over explicit tensors (a dataclass argument would make
    torch.compile specialise on each layer's weights). Only the chunk-length dimensions are dynamic, so one compile
    serves every chunk while the hidden and head sizes stay fixed in the kernels: with every dimension symbolic
    (`dynamic=True`, before 2026-12-04) Inductor's SiLU·up, norm and RoPE kernels took 7.9 ms of an H200
    evaluation, with these 3.9 (docs/benchmarks.md, 2026-12-04)."""
    if not _COMPILED:
        head = compiled(_nar_head, fullgraph=True, dynamic=False)
        tail = compiled(_nar_tail, fullgraph=True, dynamic=False)

        def run_head(h, delta, w, cos, sin, kb, vb, d):
            _length_dynamic((h, 1), (delta, 1), (cos, 0), (sin, 0), (kb, 1), (vb, 1))
            return head(h, delta, w.in_norm, w.qkv, w.q_norm, w.k_norm, cos, sin, kb, vb, d)

        def run_tail(h, attn, w, d):
            _length_dynamic((h, 1), (attn, 2))
            return tail(h, attn, w.o, w.post_norm, w.gate_up, w.down, d)
        _COMPILED.extend([run_head, run_tail])
    return tuple(_COMPILED)


def _length_dynamic(*dims: tuple[torch.Tensor, int]) -> None:
    for t, dim in dims:
        torch._dynamo.mark_dynamic(t, dim)
