"""The AR engine: continuous batching of plan and semantic requests over a paged KV cache, one step for all slots.

A request takes one slot, or two with CFG (its unconditional branch). Every step runs all `slots` rows with fixed
shapes — a row of an idle slot reads no keys and writes into a trash page — so one CUDA graph replays every step and
a row's numbers never depend on which other requests share the step or which slot it sits in (batch invariance).
Each slot reads only its own keys (paged_attention.py).

Two samplers (docs/ar-engine.md):
- "fast" (default): the whole step — sampling of every slot (fast_sampling.py), bookkeeping of windows and stops,
  feeding the drawn ids back, the forward — stays on the device; `block` steps are captured as one graph and the
  host reads the drawn ids once per block. A request that ends inside a block stops on the device at once; the
  host notices at the block's end.
- "exact": the reference sampler, one request at a time in the host loop with its own torch.Generator re-seeded
  per stage, so draws follow torch.multinomial's stream bit for bit. Needs one host round trip per step.
Hardware choices (device, dtype, graphs, torch.compile) are made by whoever builds the engine.
"""
from __future__ import annotations

import functools
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from . import fast_sampling, layer_chain, layer_chain_w8a8, quant, sampling, skinny_gemm, step_weights, vocab_spans
from .compiled import shared
from .config import Sampling, TokenLayout
from .kv_cache import PagedKV
from .laps import Laps, sync_stream
from .paged_attention import decode_attention
from .protocol import check_context
from .transformer import AR, YuE2, attend, branch_weights, dims, layer_head, layer_tail, logits, rms_norm, rope_table

STEP_SLOTS = 32      # rows of every step: one shape everywhere, so the sequential path and the farm agree
SAMPLERS = ("fast", "exact")


def step_inputs(tokens: torch.Tensor, positions: torch.Tensor, go: torch.Tensor, embed: torch.Tensor,
                rope: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """A step's inputs from its slots' tokens and positions [S]: the embeddings [S, 1, H], the RoPE rows (cos, sin
    [S, D]) and each slot's key count (0 where it does not go on; int32). Compiled, a kernel or two in place of the
    six small ones eager PyTorch launches between the draw and the first layer."""
    seq_lens = torch.where(go, positions + 1, torch.zeros_like(positions)).to(torch.int32)
    cos, sin = rope[:, positions]
    return F.embedding(tokens, embed)[:, None], cos, sin, seq_lens


def follow(go: torch.Tensor, drawn: torch.Tensor, owner: torch.Tensor, active: torch.Tensor,
           tokens: torch.Tensor) -> None:
    """After a draw each slot goes on, and is fed, as its owner does (an unconditional slot follows its conditional
    one): `active` and `tokens`, in place. Compiled, one kernel in place of two."""
    fast_sampling.advance(go, owner, active)
    torch.index_select(drawn, 0, owner, out=tokens)


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
    slots: list[int]                       # [conditional] or [conditional, unconditional]
    end: int
    history: list[int] = field(default_factory=list)
    started: float = 0.0
    prefill_seconds: float = 0.0
    batch_sum: int = 0
    steps: int = 0
    generator: torch.Generator | None = None       # exact sampler only
    window: sampling.RecentWindow | None = None    # exact sampler only
    bias: torch.Tensor | None = None               # exact sampler only


class AREngine:
    def __init__(self, model: YuE2, layout: TokenLayout, *, slots: int = STEP_SLOTS, kv_tokens: int | None = None,
                 sampler: str = "fast", cuda_graphs: bool = False, compile: bool = False, block: int = 16,
                 weight_format: str = "bf16", kv_format: str = "bf16", chain: bool | None = None):
        """`kv_tokens`: the KV pool, in tokens over all requests (default: two full contexts). `block`: steps per
        graph replay and per host read in the fast mode. `weight_format`: how the AR linear layers are read
        (quant.FORMATS; "fp8" quantises the model's weights once when the engine starts). `kv_format`: how the
        KV cache stores keys and values (kv_cache.KV_FORMATS; "fp8" halves what a step reads of them). `chain`:
        the step runs each layer's products after attention as one op: with BF16 weights layer_chain.py, one
        persistent kernel on Hopper (9 % faster per one-row step on an H200). None (the default): that chain
        wherever its kernel runs (elsewhere the separate products are the faster path, and the maths is the same).
        With FP8 weights, True runs the published W8A8 checkpoints' numerics instead (layer_chain_w8a8.py:
        activations quantised per row, in torch): for measuring their quality, not a fast path."""
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {sampler!r}")
        if weight_format not in quant.FORMATS:
            raise ValueError(f"weight_format must be one of {quant.FORMATS}, got {weight_format!r}")
        cfg = model.cfg
        self.model, self.layout, self.cfg, self.sampler = model, layout, cfg, sampler
        self.device, self.dtype = model.model.embed_tokens.weight.device, model.model.embed_tokens.weight.dtype
        # where building the engine goes, phase → seconds (a farm worker reports it: its start is mostly this)
        self.build_seconds: dict[str, float] = {}
        lap = Laps(self.device, self.build_seconds)
        self.slots, self.block = slots, block
        self.kv = PagedKV(cfg, slots=slots, tokens=kv_tokens or 2 * cfg.context, device=self.device,
                          dtype=self.dtype, kv_format=kv_format)
        self.table = fast_sampling.SlotTable.empty(slots, cfg.vocab_size, self.device)
        self.tokens = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.lengths = torch.zeros(slots, dtype=torch.long, device=self.device)
        self.next_logits = torch.zeros(slots, cfg.vocab_size, dtype=self.dtype, device=self.device)
        self.drawn = torch.full((block, slots), -1, dtype=torch.long, device=self.device)
        # cos and sin of every position a slot can reach, computed once: a step gathers its rows (one kernel where
        # computing them took ~10 small ones)
        self.rope = rope_table(cfg, self.dtype, self.device)
        pinned = self.device.type == "cuda"
        self.drawn_host = torch.full((block, slots), -1, dtype=torch.long, pin_memory=pinned)
        self.free_slots = deque(range(slots))
        lap("kv cache and tables")
        self.live: list[_Live] = []
        self.weight_format, self.dims = weight_format, dims(cfg)
        self.folded = weight_format == "bf16"
        if chain is None:
            q_rows = (cfg.num_attention_heads + 2 * cfg.num_key_value_heads) * cfg.head_dim
            chain = self.folded and layer_chain.supported(self.device, cfg.hidden_size, cfg.intermediate_size,
                                                          q_rows)
        self.chain = bool(chain) and weight_format in ("bf16", "fp8")
        self.w8a8 = self.chain and weight_format == "fp8"
        self.step_weights = (step_weights.for_chain_fp8(model) if self.w8a8
                             else step_weights.for_chain(model) if self.chain
                             else step_weights.for_format(model, weight_format))
        self.chain_state = layer_chain.words(self.device) if self.chain and not self.w8a8 else None
        # prefill runs the same weights as the step when they are quantised (one model, not two; unpaired)
        self.weights = (branch_weights(model, AR) if self.folded
                        else step_weights.for_format(model, weight_format))
        self._linear = skinny_gemm.reference if self.folded else skinny_gemm.linear
        lap("step weights")
        self._head, self._tail = step_weights.layer_halves(self.folded)
        self._best, self._norm, self._inputs, self._follow = fast_sampling.best, rms_norm, step_inputs, follow
        if compile:   # compiled once per process and shape, shared by every engine; the attention op stays opaque
            self._norm, self._head, self._tail = shared(rms_norm), shared(self._head), shared(self._tail)
            self._inputs, self._follow = shared(step_inputs), shared(follow)
            if self.device.type != "cuda":     # on CUDA `best` is two Triton kernels already
                self._best = shared(fast_sampling.reference_best)
        self.variants = vocab_spans.for_phases(layout, cfg.vocab_size)
        # each span's logits in a buffer of its own (the lm_head's product lands there; the draw reads it)
        self.span_logits = {span: self.next_logits if span == (0, cfg.vocab_size) else
                            torch.zeros(slots, span[1] - span[0], dtype=self.dtype, device=self.device)
                            for v in self.variants.values() for span in v.spans}
        self.graphs: dict[str, torch.cuda.CUDAGraph] = {}
        if cuda_graphs:
            self._capture(lap)

    # ---- admission and prefill ------------------------------------------------------------------------------
    def branches(self, request: ARRequest) -> list[tuple[int, ...]]:
        return [request.prefix] + ([request.negative] if _uses_cfg(request) else [])

    def can_admit(self, request: ARRequest) -> bool:
        branches = self.branches(request)
        pages = sum(self.kv.pages_for(len(p) + request.sampling.max_tokens + 1) for p in branches)
        return len(self.free_slots) >= len(branches) and pages <= len(self.kv.free)

    @torch.inference_mode()
    def admit(self, request: ARRequest) -> None:
        """Prefill the request's branch(es) into free slots; its first token is drawn at the next step."""
        branches = self.branches(request)
        for prefix in branches:
            check_context(len(prefix), request.sampling.max_tokens, self.cfg.context, f"{request.key} {request.phase}")
        if self.sampler == "fast":
            fast_sampling.check(request.sampling, f"{request.key} {request.phase} sampling")
        if not self.can_admit(request):
            raise RuntimeError(f"no room for {request.key}: {len(self.free_slots)} free slots, "
                               f"{len(self.kv.free)} free KV pages")
        start = time.perf_counter()
        slots = [self.free_slots.popleft() for _ in branches]
        for slot, prefix in zip(slots, branches):
            self.kv.reserve(slot, len(prefix) + request.sampling.max_tokens + 1)
            self.prefill(slot, prefix)
        end = sampling.end_id(request.phase, self.layout)
        live = _Live(request, slots, end)
        self._set_slots(live)
        if self.sampler == "exact":
            live.generator = torch.Generator(device=self.device).manual_seed(request.seed)  # re-seeded per stage
            live.window = sampling.RecentWindow(request.sampling.penalty_window, self.cfg.vocab_size, self.device)
            live.bias = sampling.allowed_bias(request.phase, self.layout, self.cfg.vocab_size, torch.float32,
                                              self.device)
        sync_stream(self.device)
        live.started = time.perf_counter()
        live.prefill_seconds = live.started - start
        self.live.append(live)

    def _set_slots(self, live: _Live) -> None:
        r, (cond, *rest) = live.request, live.slots
        uncond = rest[0] if rest else cond
        lo, hi = sampling.allowed_range(r.phase, self.layout)
        values = fast_sampling.slot_values(r.sampling, phase=r.phase, seed=r.seed, lo=lo, hi=hi, end=live.end,
                                           legacy=r.legacy)
        self.table.set_slot(cond, {**values, "cfg_scale": r.cfg_scale, "use_cfg": bool(rest), "partner": uncond,
                                   "owner": cond, "is_cond": True, "active": True})
        if rest:
            self.table.set_slot(uncond, {"use_cfg": False, "partner": uncond, "owner": cond, "is_cond": False,
                                         "active": True, "count": 0})

    def prefill(self, slot: int, ids, chunk: int | None = None) -> torch.Tensor:
        """Write ids into `slot` from its start, `chunk` tokens per pass (all at once by default) → last logits [V].

        A slot with no pages yet gets room for a whole context (tests and teacher forcing)."""
        ids = torch.as_tensor(list(ids), dtype=torch.long, device=self.device)
        if slot not in self.kv.owned:
            self.kv.reserve(slot, self.cfg.context)
        chunk = chunk or ids.shape[0]
        for a in range(0, ids.shape[0], chunk):
            hidden = self._extend(slot, ids[a:a + chunk], a)
        self.lengths[slot] = ids.shape[0]
        last = logits(self.model, hidden[:, -1])[0]
        self.next_logits[slot] = last
        for (a, b), buffer in self.span_logits.items():
            buffer[slot] = last[a:b]
        return last

    def _extend(self, slot: int, ids: torch.Tensor, start: int) -> torch.Tensor:
        """Append ids at positions start… of `slot`: causal attention over its keys and the new ones → [1, T, H]."""
        end = start + ids.shape[0]
        x = self.model.model.embed_tokens(ids)[None]
        cos, sin = self.rope[:, start:end]
        pages, offsets = self.kv.where(slot, start, end)
        mask = None
        if start:
            keys = torch.arange(end, device=self.device)
            mask = keys[None, :] <= torch.arange(start, end, device=self.device)[:, None]
        for i, w in enumerate(self.weights):
            q, k, v = layer_head(x, w, cos, sin, self.dims, self._linear)
            self.kv.write(i, pages, offsets, k[0].transpose(0, 1), v[0].transpose(0, 1))
            if start:
                out = attend(q, *self.kv.read(i, slot, end), mask=mask)
            elif self.kv.kv_format != "bf16":    # the keys as every later step will read them back
                out = attend(q, self.kv.stored(k), self.kv.stored(v), causal=True)
            else:
                out = attend(q, k, v, causal=True)
            x = layer_tail(x, out, w, self.dims, self._linear)
        return x

    # ---- the device step ------------------------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, positions: torch.Tensor, go: torch.Tensor) -> torch.Tensor:
        """One token per slot at its position; slots with `go` false read and write nothing.
        tokens, positions [S] int64, go [S] bool → the last hidden state after the final norm [S, H]."""
        kv = self.kv
        x, cos, sin, seq_lens = self._inputs(tokens, positions, go, self.model.model.embed_tokens.weight, self.rope)
        if self.chain:
            return self._chained(x, cos, sin, seq_lens)
        for i, w in enumerate(self.step_weights):
            qkv = self._head(x, w.in_norm, w.qkv, self.dims)[:, 0]
            out = decode_attention(qkv, w.q_norm, w.k_norm, cos, sin, kv.k[i], kv.v[i], kv.block_table, seq_lens,
                                   self.dims.eps)
            x = self._tail(x, out[:, :, None], w.o, w.post_norm, w.gate_up, w.down, self.dims)
        return self._norm(x[:, 0], self.model.model.norm.weight, self.dims.eps)

    def _chained(self, x, cos, sin, seq_lens) -> torch.Tensor:
        """`forward` with each layer's products after attention, and the next layer's q/k/v, in one op."""
        kv, layers, eps = self.kv, self.step_weights, self.dims.eps
        qkv = self._head(x, layers[0].in_norm, layers[0].qkv, self.dims)[:, 0]
        h = x[:, 0]
        for i, w in enumerate(layers):
            out = decode_attention(qkv, w.q_norm, w.k_norm, cos, sin, kv.k[i], kv.v[i], kv.block_table, seq_lens, eps)
            nxt = layers[i + 1] if i + 1 < len(layers) else None
            if self.w8a8:
                h, qkv = layer_chain_w8a8.reference(out.reshape(len(h), -1), h, w.o, w.gate_up, w.down,
                                                    nxt and nxt.qkv, w.post_norm, nxt and nxt.in_norm, eps)
            else:
                h, qkv = layer_chain.chain(out.reshape(len(h), -1), h, w.o, w.gate_up, w.down, nxt and nxt.qkv, eps,
                                           self.chain_state)
        return self._norm(h, self.model.model.norm.weight, eps)

    def _feed(self, variant: vocab_spans.StepSpans | None = None) -> None:
        """Forward the tokens in `self.tokens` for the active slots; their next logits land in `next_logits` (the
        whole vocabulary), or with a `variant` in the buffers of its spans (`span_logits`) only."""
        go = self.table.active
        hidden = self.forward(self.tokens, self.lengths, go)
        weight = self.model.lm_head.weight
        if variant is None:
            self.next_logits.copy_(F.linear(hidden, weight))
        else:
            for a, b in variant.spans:
                torch.mm(hidden, weight[a:b].t(), out=self.span_logits[(a, b)])
        self.lengths.add_(go)

    def _device_step(self, j: int, variant: vocab_spans.StepSpans) -> None:
        """Draw for every slot, record the draws in row j of `drawn`, book them, feed them back (an unconditional
        slot is fed, and goes on or stops with, its conditional slot's draw). `variant`: the spans of the
        vocabulary the live phases need."""
        t = self.table
        values, ids = vocab_spans.candidates(self._best, self.span_logits, variant, t)
        drawn, go = fast_sampling.pick(values, ids, t, self.drawn[j])
        self._follow(go, drawn, t.owner, t.active, self.tokens)
        self._feed(variant)

    def _capture(self, lap: Laps) -> None:
        """Graphs, captured while no request lives: `block` fast steps, and one plain feed (exact / teacher forcing).
        Warm-up runs first on a side stream (torch.compile compiles there, and the Triton kernels compile or load on
        their first launch): `lap` times each graph's warm-up and capture apart."""
        pool = torch.cuda.graph_pool_handle()
        runs = {"feed": self._feed}
        if self.sampler == "fast":
            runs.update({v.name: functools.partial(self._block, v) for v in set(self.variants.values())})
        with torch.inference_mode():
            for name, fn in runs.items():
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    fn()
                    fn()
                torch.cuda.current_stream().wait_stream(stream)
                lap(f"{name} warm-up")
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool):
                    fn()
                self.graphs[name] = graph
                lap(f"{name} capture")
            self.lengths.zero_()
            self.drawn.fill_(-1)

    def _block(self, variant: vocab_spans.StepSpans) -> None:
        for j in range(self.block):
            self._device_step(j, variant)

    def _run(self, name: str, variant: vocab_spans.StepSpans | None = None) -> None:
        if name in self.graphs:
            self.graphs[name].replay()
        elif name == "feed":
            self._feed()
        else:
            self._block(variant)

    # ---- decoding -------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[ARResult]:
        """Advance every live request (a block of steps in the fast mode, one step in the exact mode) and return
        the requests that finished."""
        if not self.live:
            return []
        return self._fast_block() if self.sampler == "fast" else self._exact_step()

    def _fast_block(self) -> list[ARResult]:
        variant = self.variants[frozenset(live.request.phase for live in self.live)]
        self._run(variant.name, variant)
        self.drawn_host.copy_(self.drawn, non_blocking=True)
        sync_stream(self.device)
        if self.chain_state is not None and layer_chain.timed_out(self.chain_state):
            raise RuntimeError("the layer-chain kernel's grid barrier timed out: this block's tokens are wrong")
        rows = self.drawn_host.tolist()
        n, finished, going_on = len(self.live), [], []
        for live in self.live:
            slot, outcome = live.slots[0], None
            for row in rows:
                token = row[slot]
                if token < 0:
                    continue
                live.steps += 1
                live.batch_sum += n
                if token == live.end:
                    outcome = False
                    break
                live.history.append(token)
                if len(live.history) >= live.request.sampling.max_tokens:
                    outcome = True
                    break
            if outcome is None:
                going_on.append(live)
            else:
                finished.append(self._retire(live, truncated=outcome))
        self.live = going_on
        return finished

    def _exact_step(self) -> list[ARResult]:
        drawn = []
        for live in self.live:
            token = self._draw_exact(live)                                  # [1] on the device
            live.window.push(token)
            for slot in live.slots:
                self.tokens[slot] = token[0]
            drawn.append(token)
        n = len(drawn)
        self.drawn_host[0, :n].copy_(torch.cat(drawn), non_blocking=True)
        self._run("feed")                                                  # queued before the host reads back
        sync_stream(self.device)
        finished, going_on = [], []
        for live, token in zip(self.live, self.drawn_host[0, :n].tolist()):
            live.batch_sum += n
            live.steps += 1
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

    def _draw_exact(self, live: _Live) -> torch.Tensor:
        r = live.request
        conditional = self.next_logits[live.slots[0]:live.slots[0] + 1]
        unconditional = self.next_logits[live.slots[1]:live.slots[1] + 1] if len(live.slots) > 1 else None
        combined = sampling.cfg_combine(conditional, unconditional, r.cfg_scale)
        scores = sampling.step_scores(combined, r.sampling, live.bias, live.end, live.window, len(live.history),
                                      r.legacy)
        return sampling.draw(scores, r.sampling, live.generator).reshape(1)

    def _retire(self, live: _Live, truncated: bool) -> ARResult:
        for slot in live.slots:
            self.table.active[slot] = False
            self.kv.release(slot)
            self.free_slots.append(slot)
        sync_stream(self.device)
        return ARResult(live.request.key, live.request.phase, np.asarray(live.history, dtype=np.int32), truncated,
                        live.prefill_seconds, time.perf_counter() - live.started,
                        live.batch_sum / max(1, live.steps))

    @torch.inference_mode()
    def decode(self, slot_tokens: dict[int, int]) -> torch.Tensor:
        """Teacher forcing: feed one given token to each given slot → logits [slots, V] (other slots: garbage).
        Uses the captured feed graph when there is one. Not for use while requests are live."""
        go = torch.zeros(self.slots, dtype=torch.bool)
        go[list(slot_tokens)] = True
        self.table.active.copy_(go)
        self.tokens.copy_(torch.tensor([slot_tokens.get(s, 0) for s in range(self.slots)]))
        self._run("feed")
        return self.next_logits.clone()

    # ---- driving ------------------------------------------------------------------------------------------
    def generate(self, requests) -> list[ARResult]:
        """Run requests to completion with continuous batching; results in the order they finish."""
        waiting, results = deque(requests), []
        while waiting or self.live:
            while waiting and self.can_admit(waiting[0]):
                self.admit(waiting.popleft())
            if not self.live and waiting:
                raise RuntimeError(f"{waiting[0].key}: does not fit this engine's KV cache")
            results.extend(self.step())
        return results


def _uses_cfg(request: ARRequest) -> bool:
    return request.negative is not None and request.cfg_scale != 1.0
