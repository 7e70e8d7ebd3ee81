"""The YuE2 Mixture-of-Transformers backbone: an AR branch (a Qwen3 decoder) and a NAR branch of the same shape.

Module and parameter names mirror the released checkpoint (docs/model.md §8), so `state_dict()` keys are
checkpoint keys.
A model is built with only the parts a stage needs (`parts`): the AR stages never allocate a `nar_*` weight and the
acoustic stage never allocates `lm_head`. This module holds the maths of one forward pass; it knows nothing about
KV-cache policy, sampling, chunking or devices (see ar.py and acoustic.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from . import skinny_gemm
from .config import ModelConfig

AR, HEAD, NAR = "ar", "head", "nar"   # the weight groups a stage can ask for


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


class Attention(nn.Module):
    """Holds q/k/v/o and the per-head q/k norms; the maths is `layer_head` / `layer_tail`."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_proj = nn.Linear(h, cfg.num_attention_heads * d, bias=False)
        self.k_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.v_proj = nn.Linear(h, cfg.num_key_value_heads * d, bias=False)
        self.o_proj = nn.Linear(cfg.num_attention_heads * d, h, bias=False)
        self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(d, cfg.rms_norm_eps)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)


class DecoderLayer(nn.Module):
    """One layer: the AR copy and/or the NAR copy of every non-embedding weight (MoT)."""

    def __init__(self, cfg: ModelConfig, parts: frozenset[str]):
        super().__init__()
        eps = cfg.rms_norm_eps
        if AR in parts:
            self.input_layernorm = RMSNorm(cfg.hidden_size, eps)
            self.self_attn = Attention(cfg)
            self.post_attention_layernorm = RMSNorm(cfg.hidden_size, eps)
            self.mlp = MLP(cfg)
        if NAR in parts:
            self.nar_input_layernorm = RMSNorm(cfg.hidden_size, eps)
            self.nar_self_attn = Attention(cfg)
            self.nar_pre_mlp_layernorm = RMSNorm(cfg.hidden_size, eps)
            self.nar_mlp = MLP(cfg)


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig, parts: frozenset[str]):
        super().__init__()
        if AR in parts:
            # not initialised: the model is built on the meta device and every weight comes from a checkpoint; a
            # normal_ there (like an arange) imports torch's compiler stack, ~1.2 s of a driver that never compiles
            self.embed_tokens = nn.Embedding.from_pretrained(torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg, parts) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class TimeEmbedder(nn.Module):
    """τ ∈ [0, 1] (unscaled, unlike DiT) → FP32 sinusoid [cos ‖ sin] → MLP in the model dtype."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.freq_dim = cfg.time_freq_dim
        self.mlp = nn.Sequential(nn.Linear(cfg.time_freq_dim, cfg.hidden_size), nn.SiLU(),
                                 nn.Linear(cfg.hidden_size, cfg.hidden_size))

    def forward(self, tau: torch.Tensor) -> torch.Tensor:
        """tau [N] in the model dtype → [N, hidden]."""
        half = self.freq_dim // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=tau.device) / half)
        args = tau.float()[:, None] * freqs[None]
        features = torch.cat([torch.cos(args), torch.sin(args)], dim=-1)
        return self.mlp(features.to(self.mlp[0].weight.dtype))


class LatentPosEmbed(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        # its values come from the checkpoint, or from sinusoid_table where the file leaves it out (load_model)
        self.register_buffer("pe", torch.empty(cfg.max_latent_frames, cfg.hidden_size), persistent=True)


class YuE2(nn.Module):
    """The checkpoint's top level: `model.*`, `lm_head`, `llm2vae`, `vae2llm`, `time_embedder`, `latent_pos_embed`."""

    def __init__(self, cfg: ModelConfig, parts: frozenset[str] = frozenset({AR, HEAD, NAR})):
        super().__init__()
        self.cfg, self.parts = cfg, frozenset(parts)
        self.model = Backbone(cfg, self.parts)
        if HEAD in parts:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if NAR in parts:
            self.llm2vae = nn.Linear(cfg.hidden_size, cfg.latent_dim)
            self.vae2llm = nn.Linear(cfg.latent_dim, cfg.hidden_size)
            self.time_embedder = TimeEmbedder(cfg)
            self.latent_pos_embed = LatentPosEmbed(cfg)


# --------------------------------------------------------------------------------------------------------------
# Fixed tables

def sinusoid_table(rows: int, dim: int) -> torch.Tensor:
    """The latent position table: pe[p, 2i] = sin(p·ω_i), pe[p, 2i+1] = cos(p·ω_i), built in FP32."""
    position = torch.arange(rows, dtype=torch.float32)[:, None]
    omega = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(rows, dim)
    table[:, 0::2] = torch.sin(position * omega)
    table[:, 1::2] = torch.cos(position * omega)
    return table


def rope_tables(positions: torch.Tensor, cfg: ModelConfig, dtype: torch.dtype):
    """positions [..., T] (int) → cos, sin [..., T, head_dim]: angles in FP32, then cast to the activation dtype."""
    d = cfg.head_dim
    inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32, device=positions.device) / d)
    angles = positions.float()[..., None] * inv_freq
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_table(cfg: ModelConfig, dtype: torch.dtype, device=None) -> torch.Tensor:
    """`rope_tables` for every position 0 … context at once → [2 (cos, sin), context + 1, head_dim]. Elementwise
    the same ops, so a row of it has the bits `rope_tables` gives for that position alone."""
    return torch.stack(rope_tables(torch.arange(cfg.context + 1, device=device), cfg, dtype))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Non-interleaved (rotate-half) RoPE. x [B, T, heads, D]; cos/sin [T, D] or [B, T, D]."""
    if cos.dim() == 2:
        cos, sin = cos[None], sin[None]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def expected_shapes(cfg: ModelConfig, parts: frozenset[str] = frozenset({AR, HEAD, NAR})) -> dict[str, tuple]:
    """Checkpoint name → shape of every tensor a model with `parts` holds (docs/model.md §8), without allocating."""
    with torch.device("meta"):
        model = YuE2(cfg, parts)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


# --------------------------------------------------------------------------------------------------------------
# The decoder layer's maths, written once: every path (AR prefill, AR decode, NAR velocity, the dense reference)
# runs a layer as `layer_head` → its own attention → `layer_tail`, over one branch's fused weights.

@dataclass(frozen=True)
class Dims:
    heads: int
    kv_heads: int
    head_dim: int
    eps: float


@dataclass(frozen=True)
class BranchWeights:
    """One layer's weights of one branch (AR or NAR). q/k/v and gate/up are fused into one matrix each, so a step
    runs two GEMMs where it would run five; the module parameters are views into them (no second copy)."""
    in_norm: torch.Tensor
    qkv: torch.Tensor          # [(heads + 2·kv_heads)·head_dim, hidden]
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    o: torch.Tensor
    post_norm: torch.Tensor
    gate_up: torch.Tensor      # [2·intermediate, hidden]
    down: torch.Tensor

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.in_norm, self.qkv, self.q_norm, self.k_norm, self.o, self.post_norm, self.gate_up, self.down)


def dims(cfg: ModelConfig) -> Dims:
    return Dims(cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim, cfg.rms_norm_eps)


def branch_weights(model: YuE2, branch: str) -> list[BranchWeights]:
    """The fused weights of every layer of `branch` (AR or NAR), built on first use and kept on the model. Built
    outside inference mode whatever the caller's mode: Dynamo guards on whether a tensor is an inference tensor, so
    a branch fused under inference mode beside one fused outside it (an AR engine built before the acoustic stage's
    warm-up, on a model the two share) made the compiled acoustic layer compile twice."""
    cache = model.__dict__.setdefault("_branches", {})
    if branch not in cache:
        with torch.inference_mode(False):
            cache[branch] = [_fuse(layer, branch) for layer in model.model.layers]
    return cache[branch]


def _fuse(layer: DecoderLayer, branch: str) -> BranchWeights:
    nar = branch == NAR
    attn = layer.nar_self_attn if nar else layer.self_attn
    mlp = layer.nar_mlp if nar else layer.mlp
    qkv = _concat_in_place([attn.q_proj, attn.k_proj, attn.v_proj])
    gate_up = _concat_in_place([mlp.gate_proj, mlp.up_proj])
    return BranchWeights((layer.nar_input_layernorm if nar else layer.input_layernorm).weight, qkv,
                         attn.q_norm.weight, attn.k_norm.weight, attn.o_proj.weight,
                         (layer.nar_pre_mlp_layernorm if nar else layer.post_attention_layernorm).weight,
                         gate_up, mlp.down_proj.weight)


def _concat_in_place(linears) -> torch.Tensor:
    """One matrix holding the linears' weights stacked by rows; each linear's parameter becomes a view of it."""
    fused = torch.cat([lin.weight.detach() for lin in linears])
    row = 0
    for lin in linears:
        n = lin.weight.shape[0]
        lin.weight.data = fused[row:row + n]
        row += n
    return fused


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """YuE2's rounding order (the reference runtime's, for bitwise parity): the rsqrt factor in FP32, cast to x's
    dtype, then x·factor·weight (HF Qwen3 instead normalises in FP32 and casts afterwards)."""
    factor = torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return (x * factor.to(x.dtype)) * weight


def normed_linear(x: torch.Tensor, norm: torch.Tensor, w: torch.Tensor, d: Dims, linear, epilogue: str = "none",
                  folded: bool = False) -> torch.Tensor:
    """RMSNorm(x; norm) · wᵀ. `folded`: w already holds the norm's weight (skinny_gemm.fold_norm) and `linear`
    applies each row's RMS factor to its product (the decode step's op does, one launch instead of two)."""
    if folded:
        return linear(x, w, epilogue, None, d.eps)
    return linear(rms_norm(x, norm, d.eps), w, epilogue)


def layer_qkv(x: torch.Tensor, w: BranchWeights, d: Dims, linear=skinny_gemm.reference,
              folded: bool = False) -> torch.Tensor:
    """Input norm and the fused q/k/v product. x [B, T, H] → [B, T, (heads + 2·kv_heads)·D], q then k then v."""
    return normed_linear(x, w.in_norm, w.qkv, d, linear, folded=folded)


def split_heads(qkv: torch.Tensor, d: Dims):
    """[B, T, (heads + 2·kv_heads)·D] → q [B, T, heads, D], k, v [B, T, kv_heads, D] (views)."""
    b, t, _ = qkv.shape
    return qkv.view(b, t, d.heads + 2 * d.kv_heads, d.head_dim).split([d.heads, d.kv_heads, d.kv_heads], dim=2)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_norm, k_norm, cos, sin, eps: float):
    """Per-head RMSNorm of q and k, then RoPE. q [B, T, heads, D], k [B, T, kv_heads, D]."""
    return apply_rope(rms_norm(q, q_norm, eps), cos, sin), apply_rope(rms_norm(k, k_norm, eps), cos, sin)


def layer_head(x: torch.Tensor, w: BranchWeights, cos, sin, d: Dims, linear=skinny_gemm.reference):
    """Input norm, fused q/k/v, per-head q/k norm, RoPE. x [B, T, H] → q [B, heads, T, D], k, v [B, KV, T, D].
    `linear(x, w, epilogue, residual)` runs the matrix products: plain PyTorch by default, the skinny-GEMM op in
    the AR decode step (skinny_gemm.py; same maths and rounding order). The decode step stops after `layer_qkv`:
    its attention kernels do the q/k norm and RoPE themselves (paged_attention.py)."""
    q, k, v = split_heads(layer_qkv(x, w, d, linear), d)
    q, k = qk_norm_rope(q, k, w.q_norm, w.k_norm, cos, sin, d.eps)
    return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def layer_tail(x: torch.Tensor, attn: torch.Tensor, w: BranchWeights, d: Dims,
               linear=skinny_gemm.reference, folded: bool = False) -> torch.Tensor:
    """o_proj + residual, then the SwiGLU MLP (silu(gate)·up over the fused gate/up weight) + residual.
    attn [B, heads, T, D] → x [B, T, H]."""
    x, h = layer_mlp_input(x, attn, w, d, linear, folded)
    return linear(h, w.down, "add", x)


def layer_mlp_input(x: torch.Tensor, attn: torch.Tensor, w: BranchWeights, d: Dims,
                    linear=skinny_gemm.reference, folded: bool = False):
    """layer_tail up to the down product: → (x after o_proj + residual, silu(gate)·up [B, T, intermediate])."""
    b, _, t, _ = attn.shape
    x = linear(attn.transpose(1, 2).reshape(b, t, d.heads * d.head_dim), w.o, "add", x)
    return x, normed_linear(x, w.post_norm, w.gate_up, d, linear, "silu_mul", folded)


# The layer again, cut where the long passes (the AR prefill, the NAR velocity) can save memory traffic: the down
# product's residual add moves into the next layer's head, where it shares a kernel with the input norm once
# compiled, and the head stores its K/V straight into the attention's buffers. The same roundings in the same order
# as layer_head → layer_tail, so the eager path gives the same bits.

def layer_head_into(x: torch.Tensor, delta: torch.Tensor, w: BranchWeights, cos, sin, kb: torch.Tensor,
                    vb: torch.Tensor, d: Dims):
    """h = x + delta (the add `layer_tail_open` left), then layer_head(h); its k and v [1, KV, T, D] go into the
    last T rows of kb and vb [KV, S, D]. → (h, q)."""
    h = x + delta
    q, k, v = layer_head(h, w, cos, sin, d)
    rows = h.shape[1]
    kb[:, kb.shape[1] - rows:] = k[0]
    vb[:, vb.shape[1] - rows:] = v[0]
    return h, q


def layer_tail_open(x: torch.Tensor, attn: torch.Tensor, w: BranchWeights, d: Dims):
    """layer_tail without its last residual add: → (x, the down product); the layer's output is x + product."""
    x, h = layer_mlp_input(x, attn, w, d)
    return x, F.linear(h, w.down)


# --------------------------------------------------------------------------------------------------------------
# The passes over those layers: the AR prefill and the logits, the NAR velocity (over a cached prefix, and dense).

def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = False,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """SDPA with GQA: query head h reads KV head h // (heads / kv_heads). q [B, H, T, D], k/v [B, KV, S, D]."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=scale, enable_gqa=True)


def ar_prefill(model: YuE2, ids: torch.Tensor, head=layer_head_into, tail=layer_tail_open,
               seq_major: bool = False):
    """Causal AR pass over ids [T] at positions 0…T−1 → (hidden [1, T, H] before the final norm, [(k, v)] per
    layer, [1, KV, T, D] laid out as `kv_buffer` says). `head`/`tail` (layer_head_into / layer_tail_open, possibly
    compiled) are the acoustic engine's speed choice."""
    positions = torch.arange(ids.shape[0], device=ids.device)
    x = model.model.embed_tokens(ids)[None]
    delta = torch.zeros_like(x)
    cos, sin = rope_tables(positions, model.cfg, x.dtype)
    d, kv = dims(model.cfg), []
    for w in branch_weights(model, AR):
        kb, vb = (kv_buffer(x, ids.shape[0], d.kv_heads, d.head_dim, seq_major) for _ in "kv")
        x, q = head(x, delta, w, cos, sin, kb[0], vb[0], d)
        x, delta = tail(x, attend(q, kb, vb, causal=True), w, d)
        kv.append((kb, vb))
    return x + delta, kv


def logits(model: YuE2, hidden: torch.Tensor) -> torch.Tensor:
    """Final norm + lm_head, in the model dtype."""
    return F.linear(model.model.norm(hidden), model.lm_head.weight)


def timestep_tau(raw: float, dtype: torch.dtype, shift: float, device) -> torch.Tensor:
    """The clamped logit `raw` → τ = shift(sigmoid(raw in the model dtype)) as a 0-d tensor (docs/model.md §3.2.4).
    raw is rounded to the dtype on the host and the device tensor filled with that exact value: a copy from the host
    waited for the card to drain, which then idled while the next evaluation was launched (~0.27 ms of a 66 ms
    evaluation on an H100; docs/benchmarks.md, 2026-12-07, thirty-second session)."""
    exact = torch.tensor(raw, dtype=torch.float64).to(dtype).item()
    sigma = torch.sigmoid(torch.full((), exact, dtype=dtype, device=device))
    if shift == 1.0:
        return sigma
    return shift * sigma / (1 + (shift - 1) * sigma)


def nar_inputs(model: YuE2, x: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """Latents x [n, latent] (model dtype) → NAR slot inputs [n + 2, H]: START and END slots are zero latents."""
    x_pad = F.pad(x, (0, 0, 1, 1))
    rows = x_pad.shape[0]
    te = model.time_embedder(tau.reshape(1).expand(rows))
    index = torch.arange(rows, device=x.device).clamp(max=model.cfg.max_latent_frames - 1)
    return (model.vae2llm(x_pad) + te) + model.latent_pos_embed.pe[index]


def nar_kv_buffers(prefix_kv, end: int, rows: int,
                   seq_major: bool = False) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, K and V buffers [1, KV, end + rows, D] whose first `end` keys are the prefix's: `velocity` writes
    the NAR rows' keys and values after them on every call, so the prefix is copied once per chunk rather than
    concatenated on every one of the ODE's evaluations. `seq_major` stores them [1, end + rows, KV, D] (the layout
    of FlashAttention's kernels, nar_attention.py) behind the same [1, KV, S, D] view."""
    buffers = []
    for k, v in prefix_kv:
        kb, vb = (kv_buffer(k, end + rows, k.shape[1], k.shape[3], seq_major) for _ in "kv")
        kb[:, :, :end], vb[:, :, :end] = k[:, :, :end], v[:, :, :end]
        buffers.append((kb, vb))
    return buffers


def kv_buffer(like: torch.Tensor, keys: int, kv_heads: int, head_dim: int, seq_major: bool) -> torch.Tensor:
    """An empty K or V buffer [1, KV, keys, D] of like's dtype and device; `seq_major` stores it [1, keys, KV, D]."""
    if seq_major:
        return like.new_empty(1, keys, kv_heads, head_dim).transpose(1, 2)
    return like.new_empty(1, kv_heads, keys, head_dim)


def velocity(model: YuE2, prefix_kv, prefix_len: int, x: torch.Tensor, raw: float, cond_end: int = 0,
             buffers=None, head=layer_head_into, tail=layer_tail_open):
    """The NAR velocity for latents x [n, latent] given a prefilled AR prefix (docs/model.md §3.2 step 3).

    `prefix_kv` holds each layer's prefix (k, v) [1, KV, L_a, D]; `cond_end` k > 0 lets the NAR rows see only the
    first k prefix keys (their RoPE positions still start at L_a = prefix_len). NAR rows attend non-causally to the
    prefix keys and to each other. `buffers` (from `nar_kv_buffers`, reused across calls) and `head`/`tail` (the
    layer maths, possibly compiled) are the acoustic engine's speed choices; the maths is the same.
    """
    tau = timestep_tau(raw, x.dtype, model.cfg.timestep_shift, x.device)
    end = cond_end if cond_end > 0 else prefix_len
    buffers = buffers or nar_kv_buffers(prefix_kv, end, x.shape[0] + 2)
    return velocity_at(model, prefix_len, x, tau, buffers, head, tail)


def velocity_at(model: YuE2, prefix_len: int, x: torch.Tensor, tau: torch.Tensor, buffers,
                head=layer_head_into, tail=layer_tail_open, attention=attend):
    """`velocity` at a given τ (a 0-d device tensor, `timestep_tau`) over filled prefix buffers (`nar_kv_buffers`:
    the keys the NAR rows see, then room for the rows' own): device work only, so a CUDA graph can hold it (the
    acoustic engine replays one).
    `attention(q, k, v)` is `attend` or another kernel of the same maths (nar_attention.py)."""
    h = nar_inputs(model, x, tau)[None]
    delta = torch.zeros_like(h)
    positions = prefix_len + torch.arange(h.shape[1], device=x.device)
    cos, sin = rope_tables(positions, model.cfg, h.dtype)
    d = dims(model.cfg)
    for w, (kb, vb) in zip(branch_weights(model, NAR), buffers):
        h, q = head(h, delta, w, cos, sin, kb[0], vb[0], d)
        h, delta = tail(h, attention(q, kb, vb), w, d)
    return model.llm2vae(model.model.norm((h + delta)[0]))[1:-1]


def dense_velocity(model: YuE2, ids: torch.Tensor, x: torch.Tensor, raw: float, cond_end: int = 0):
    """Reference form (docs/model.md §3.1): one masked pass over [AR tokens ; NAR slots], each row in its own branch.

    Slow and memory-hungry; it exists so tests can prove the cached per-chunk form equals it.
    """
    la = ids.shape[0]
    tau = timestep_tau(raw, x.dtype, model.cfg.timestep_shift, x.device)
    h_ar, h_nar = model.model.embed_tokens(ids)[None], nar_inputs(model, x, tau)[None]
    ln = h_nar.shape[1]
    cos, sin = rope_tables(torch.arange(la + ln, device=x.device), model.cfg, x.dtype)
    allowed = torch.zeros(la + ln, la + ln, dtype=torch.bool, device=x.device)
    allowed[:la, :la] = torch.ones(la, la, dtype=torch.bool, device=x.device).tril()
    allowed[la:, :(cond_end if cond_end > 0 else la)] = True
    allowed[la:, la:] = True
    d = dims(model.cfg)
    for wa, wn in zip(branch_weights(model, AR), branch_weights(model, NAR)):
        qa, ka, va = layer_head(h_ar, wa, cos[:la], sin[:la], d)
        qn, kn, vn = layer_head(h_nar, wn, cos[la:], sin[la:], d)
        out = attend(torch.cat([qa, qn], 2), torch.cat([ka, kn], 2), torch.cat([va, vn], 2), mask=allowed)
        h_ar = layer_tail(h_ar, out[:, :, :la], wa, d)
        h_nar = layer_tail(h_nar, out[:, :, la:], wn, d)
    return model.llm2vae(model.model.norm(h_nar[0]))[1:-1]
