"""The AR engine: a static KV cache of `rows` sequences, continuous batching across requests, optional CUDA graphs.

Serves both AR stages (plan and semantic). A request takes one row, or two with CFG (its unconditional branch);
every row keeps its own length and RoPE position, so prompts of different lengths share one batch. Requests join
whenever rows are free (`admit`) and leave when they finish; each `step` samples every live request once and then
runs one batched decode forward for all rows. Shapes stay fixed (rows × capacity), so one CUDA graph per key-length
bucket replays every step. Hardware choices (device, dtype, graphs) are made by whoever builds the engine.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from . import sampling
from .config import Sampling, TokenLayout
from .protocol import check_context
from .transformer import YuE2, attend, logits, rope_tables


@dataclass(frozen=True)
class ARRequest:
    key: str                               # the caller's id for this request (a track id)
    phase: str                             # "plan" or "semantic"
    prefix: tuple[int, ...]
    sampling: Sampling
    seed: int
    negative: tuple[int, ...] | None = None  # CFG unconditional prefix
    cfg_scale: float = 1.0
    legacy: bool = False                   # cot off: sampler stays in the logits' dtype, top-p keeps 3


@dataclass(frozen=True)
class ARResult:
    key: str
    phase: str
    ids: np.ndarray                        # int32 [n]: generated ids, the end id excluded
    truncated: bool                        # max_tokens reached without the end id
    prefill_seconds: float
    decode_seconds: float
    mean_batch: float                      # live requests per step, averaged over this request's steps


@dataclass
class _Live:
    request: ARRequest
    rows: list[int]
    generator: torch.Generator
    end: int
    bias: torch.Tensor
    next_logits: torch.Tensor              # [branches, vocab] for the coming draw
    window: sampling.RecentWindow
    history: list[int] = field(default_factory=list)
    started: float = 0.0
    prefill_seconds: float = 0.0
    batch_sum: int = 0


class AREngine:
    def __init__(self, model: YuE2, layout: TokenLayout, *, rows: int = 2, capacity: int | None = None,
                 cuda_graphs: bool = False, kv_buckets: bool = False, min_bucket: int = 256):
        """`kv_buckets` lets a step attend to only the smallest power-of-two key range that covers every live row
        (faster on long caches); without it every row always attends over the whole capacity, so a row's numbers
        never depend on which other requests share the batch."""
        cfg = model.cfg
        weight = model.model.embed_tokens.weight
        self.model, self.layout, self.cfg = model, layout, cfg
        self.device, self.dtype = weight.device, weight.dtype
        self.rows, self.capacity = rows, capacity or cfg.context
        shape = (rows, cfg.num_key_value_heads, self.capacity, cfg.head_dim)
        self.k_cache = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in model.model.layers]
        self.v_cache = [torch.zeros(shape, dtype=self.dtype, device=self.device) for _ in model.model.layers]
        self.tokens = torch.zeros(rows, dtype=torch.long, device=self.device)   # static decode inputs
        self.positions = torch.zeros(rows, dtype=torch.long, device=self.device)
        self.host_positions = [0] * rows
        self.free_rows = deque(range(rows))
        self.live: list[_Live] = []
        self.buckets = _buckets(min_bucket, self.capacity) if kv_buckets else [self.capacity]
        pinned = self.device.type == "cuda"
        self.drawn_host = torch.zeros(rows, dtype=torch.long, pin_memory=pinned)   # drawn ids land here
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        if cuda_graphs:
            self._capture_graphs()

    # ---- admission and prefill ------------------------------------------------------------------------------
    def can_admit(self, request: ARRequest) -> bool:
        return len(self.free_rows) >= (2 if _uses_cfg(request) else 1)

    @torch.inference_mode()
    def admit(self, request: ARRequest) -> None:
        """Prefill the request's branch(es) into free rows; its first token is drawn at the next `step`."""
        branches = [request.prefix] + ([request.negative] if _uses_cfg(request) else [])
        for prefix in branches:
            check_context(len(prefix), request.sampling.max_tokens, min(self.capacity, self.cfg.context),
                          f"{request.key} {request.phase}")
        if len(self.free_rows) < len(branches):
            raise RuntimeError(f"no free rows for {request.key}: {len(self.free_rows)} free")
        start = time.perf_counter()
        rows = [self.free_rows.popleft() for _ in branches]
        first = torch.stack([self.prefill(row, prefix) for row, prefix in zip(rows, branches)])
        generator = torch.Generator(device=self.device).manual_seed(request.seed)  # re-seeded for every stage
        end = sampling.end_id(request.phase, self.layout)
        bias = sampling.allowed_bias(request.phase, self.layout, self.cfg.vocab_size, torch.float32, self.device)
        _sync(self.device)
        now = time.perf_counter()
        window = sampling.RecentWindow(request.sampling.penalty_window, self.cfg.vocab_size, self.device)
        self.live.append(_Live(request, rows, generator, end, bias, first, window, started=now,
                               prefill_seconds=now - start))

    def prefill(self, row: int, ids, chunk: int | None = None) -> torch.Tensor:
        """Write ids into `row` from its start, `chunk` tokens per pass (all at once by default) → last logits [V]."""
        ids = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        self.host_positions[row] = 0
        chunk = chunk or ids.shape[0]
        for a in range(0, ids.shape[0], chunk):
            hidden = self._extend(row, ids[a:a + chunk])
        return logits(self.model, hidden[:, -1])[0]

    def _extend(self, row: int, ids: torch.Tensor) -> torch.Tensor:
        """Append ids to `row`: causal attention over the row's cache plus the new tokens. → hidden [1, T, H]."""
        start, t = self.host_positions[row], ids.shape[0]
        end = start + t
        x = self.model.model.embed_tokens(ids)[None]
        cos, sin = rope_tables(torch.arange(start, end, device=self.device), self.cfg, self.dtype)
        mask = None
        if start:
            keys = torch.arange(end, device=self.device)
            mask = keys[None, :] <= torch.arange(start, end, device=self.device)[:, None]
        for i, layer in enumerate(self.model.model.layers):
            q, k, v = layer.self_attn.project(layer.input_layernorm(x), cos, sin)
            self.k_cache[i][row, :, start:end] = k[0]
            self.v_cache[i][row, :, start:end] = v[0]
            if start:
                out = attend(q, self.k_cache[i][row:row + 1, :, :end], self.v_cache[i][row:row + 1, :, :end],
                             mask=mask)
            else:
                out = attend(q, k, v, causal=True)
            x = x + layer.self_attn.output(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        self.host_positions[row] = end
        return x

    # ---- decoding -------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[ARResult]:
        """Draw one token for every live request, feed them all in one batched forward, then retire the finished.

        The drawn ids stay on the device: they are written into the decode inputs and the forward is queued
        before the host reads them back, so the host's bookkeeping overlaps the GPU's forward. A request that
        just finished was fed once more for nothing; its rows are simply freed.
        """
        if not self.live:
            return []
        drawn = []
        for live in self.live:
            token = self._draw(live)                                   # [1] on the device
            live.window.push(token)
            for row in live.rows:
                self.tokens[row] = token[0]
            drawn.append(token)
        n = len(drawn)
        self.drawn_host[:n].copy_(torch.cat(drawn), non_blocking=True)
        ready = _event(self.device)
        out = self._run_decode([row for live in self.live for row in live.rows])
        for live in self.live:
            live.next_logits = out[live.rows]                          # gathered before the next replay
        if ready is not None:
            ready.synchronize()
        finished, going_on = [], []
        for live, token in zip(self.live, self.drawn_host[:n].tolist()):
            live.batch_sum += n
            if token == live.end:
                finished.append(self._retire(live, truncated=False))
                continue
            live.history.append(token)
            if len(live.history) >= live.request.sampling.max_tokens:
                finished.append(self._retire(live, truncated=True))
            else:
                going_on.append(live)
        self.live = going_on
        return finished

    def _draw(self, live: _Live) -> torch.Tensor:
        r = live.request
        conditional = live.next_logits[0:1]
        unconditional = live.next_logits[1:2] if len(live.rows) > 1 else None
        combined = sampling.cfg_combine(conditional, unconditional, r.cfg_scale)
        scores = sampling.step_scores(combined, r.sampling, live.bias, live.end, live.window,
                                      len(live.history), r.legacy)
        return sampling.draw(scores, r.sampling, live.generator).reshape(1)

    def _retire(self, live: _Live, truncated: bool) -> ARResult:
        self.free_rows.extend(live.rows)
        for row in live.rows:
            self.host_positions[row] = 0
        _sync(self.device)
        steps = max(1, len(live.history) + (0 if truncated else 1))
        return ARResult(live.request.key, live.request.phase, np.asarray(live.history, dtype=np.int32), truncated,
                        live.prefill_seconds, time.perf_counter() - live.started, live.batch_sum / steps)

    def decode(self, row_tokens: dict[int, int]) -> torch.Tensor:
        """Feed one token to each given row at its current position → logits [rows, V] (other rows: garbage)."""
        self.tokens.copy_(torch.tensor([row_tokens.get(r, 0) for r in range(self.rows)]))
        return self._run_decode(list(row_tokens))

    def _run_decode(self, fed: list[int]) -> torch.Tensor:
        """One forward of all rows with the tokens already in `self.tokens`; advances the fed rows.

        Rows not fed still compute (fixed shapes); they write a dummy entry at their own next position, which
        lies beyond what they can see and is overwritten when they are fed there.
        """
        positions = [min(p, self.capacity - 1) for p in self.host_positions]
        self.positions.copy_(torch.tensor(positions), non_blocking=True)
        kv_len = next(b for b in self.buckets if b > max(positions[row] for row in fed))
        if kv_len in self.graphs:
            graph, out = self.graphs[kv_len]
            graph.replay()
        else:
            out = self._decode_forward(kv_len)
        for row in fed:
            self.host_positions[row] += 1
        return out

    def _decode_forward(self, kv_len: int) -> torch.Tensor:
        """One token per row at `self.positions`, attending to keys [0, kv_len) masked to each row's own length."""
        rows = torch.arange(self.rows, device=self.device)
        x = self.model.model.embed_tokens(self.tokens)[:, None]               # [S, 1, H]
        cos, sin = rope_tables(self.positions[:, None], self.cfg, self.dtype)  # [S, 1, D]
        visible = torch.arange(kv_len, device=self.device)[None] <= self.positions[:, None]  # [S, kv_len]
        kv_heads = torch.arange(self.cfg.num_key_value_heads, device=self.device)[None]
        for i, layer in enumerate(self.model.model.layers):
            q, k, v = layer.self_attn.project(layer.input_layernorm(x), cos, sin)
            index = (rows[:, None], kv_heads, self.positions[:, None])
            self.k_cache[i].index_put_(index, k[:, :, 0])
            self.v_cache[i].index_put_(index, v[:, :, 0])
            out = _decode_attention(q, self.k_cache[i][:, :, :kv_len], self.v_cache[i][:, :, :kv_len], visible)
            x = x + layer.self_attn.output(out)
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return logits(self.model, x[:, 0])

    def _capture_graphs(self) -> None:
        """One graph per key-length bucket, captured before any request lives (warm-up writes land in free rows)."""
        pool = torch.cuda.graph_pool_handle()
        with torch.inference_mode():
            for kv_len in self.buckets:
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    self._decode_forward(kv_len)
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    out = self._decode_forward(kv_len)
                self.graphs[kv_len] = (graph, out)

    # ---- driving ------------------------------------------------------------------------------------------
    def generate(self, requests) -> list[ARResult]:
        """Run requests to completion with continuous batching; results in the order they finish."""
        waiting, results = deque(requests), []
        while waiting or self.live:
            while waiting and self.can_admit(waiting[0]):
                self.admit(waiting.popleft())
            results.extend(self.step())
        return results


def _decode_attention(q, k, v, visible):
    """GQA attention of one query per row without repeating K/V. q [S, H, 1, D]; k, v [S, KV, L, D]."""
    s, h, _, d = q.shape
    groups = h // k.shape[1]
    scores = torch.matmul(q.reshape(s, k.shape[1], groups, d), k.transpose(-1, -2)) * d ** -0.5
    scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return torch.matmul(probs, v).reshape(s, h, 1, d)


def _buckets(smallest: int, capacity: int) -> list[int]:
    out, b = [], smallest
    while b < capacity:
        out.append(b)
        b *= 2
    return out + [capacity]


def _uses_cfg(request: ARRequest) -> bool:
    return request.negative is not None and request.cfg_scale != 1.0


def _event(device: torch.device):
    """A CUDA event recorded now (None on the CPU, where every op has already finished)."""
    if device.type != "cuda":
        return None
    event = torch.cuda.Event()
    event.record()
    return event


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
