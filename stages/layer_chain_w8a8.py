"""The layer chain with FP8 weights and FP8 activations (W8A8): `chain(attn, x, o, gate_up, down, qkv, gamma_post,
gamma_in, eps, state)`.

The same four products as `layer_chain` — o (+ residual), gate/up (RMSNorm, SiLU·up), down (+ residual), the next
layer's q/k/v (RMSNorm) — over e4m3 weights with an FP32 scale per output row (`quant.quantize_fp8`; gate/up with
its rows paired, `layer_chain.pair_rows`, scales paired alike), with each product's input quantised per row,
dynamically, as the published FP8 W8A8 checkpoints run (compressed-tensors' FP8_DYNAMIC scheme):
    u = input · norm weight (where a norm comes before), q = e4m3(clamp(u · (448 / amax(u)))), and
    out = (q · Wqᵀ) · ((amax(u) / 448) · norm factor) · w_scale,
then the rounding of the BF16 chain (the products rounded to BF16 before the residual add, SiLU·up as the unfused
ops round it). The norm's per-row factor rsqrt(mean(x²) + eps) cancels in q, so it is applied in the epilogue.
A row's scale is the maximum over its own values only: a row's numbers do not depend on the other rows (batch
invariance), on the CPU and in the kernel.

On Hopper the op is one persistent Gluon kernel (`_layer_chain_w8a8_gluon.py`: the BF16 chain's structure plus a
converter warpgroup that quantises the activations); elsewhere `reference`, the same maths in torch.
Status (docs/ar-engine.md, "FP8 in the layer chain"): the kernel is compiled for sm_90 but not yet run on a GPU, so
an engine uses the chain with FP8 weights only when asked (`AREngine(weight_format="fp8", chain=True)`).
"""
from __future__ import annotations

import functools

import torch

from . import layer_chain
from .layer_chain import ChainTiling

FP8_MAX = 448.0
TILING = ChainTiling(bk=256, stages=10, xstages=4)     # 256 e4m3 values: a BF16 k-tile's bytes and MMA count
STAGING = 3                                             # BF16 activation k-tiles copied ahead of the converter


def quantize_rows(u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """u [M, K] FP32 → (e4m3 values [M, K], the rows' scales amax / 448 [M]); a row of zeros gets scale 0."""
    amax = u.abs().amax(1)
    inv = torch.where(amax > 0, FP8_MAX / amax.clamp(min=1e-30), torch.zeros_like(amax))
    return (u * inv[:, None]).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn), amax / FP8_MAX


def _product(u: torch.Tensor, w: tuple[torch.Tensor, torch.Tensor], factor: torch.Tensor | None = None):
    """The FP32 product of u's quantised rows and the e4m3 weight, scaled as the kernel's epilogue scales it."""
    q, s = quantize_rows(u)
    values, w_scale = w
    rows = s if factor is None else s * factor
    return (q.float() @ values.float().T) * rows[:, None] * w_scale[None, :]


def _factor(x: torch.Tensor, eps: float) -> torch.Tensor:
    return torch.rsqrt(x.float().pow(2).mean(1) + eps)


def reference(attn: torch.Tensor, x: torch.Tensor, o, gate_up, down, qkv, gamma_post: torch.Tensor,
              gamma_in: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """attn [M, heads·head_dim], x (the residual) [M, H], both BF16; o, gate_up (rows paired), down, qkv: (e4m3
    values, FP32 scale) pairs, qkv None for the last layer → (the layer's output [M, H], the next layer's q/k/v
    [M, Q] or [M, 0])."""
    bf = x.dtype
    h = (_product(attn.float(), o).to(bf).float() + x.float()).to(bf)
    gu = _product(h.float() * gamma_post.float(), gate_up, _factor(h, eps))
    gate = gu[:, 0::2].to(bf).float()
    silu = (gate * (1.0 / (1.0 + torch.exp(-gate)))).to(bf).float()
    g = (silu * gu[:, 1::2].to(bf).float()).to(bf)
    out = (_product(g.float(), down).to(bf).float() + h.float()).to(bf)
    if qkv is None:
        return out, out.new_empty(len(out), 0)
    return out, _product(out.float() * gamma_in.float(), qkv, _factor(out, eps)).to(bf)


def supported(device: torch.device, hidden: int, intermediate: int, qkv_rows: int) -> bool:
    """The kernel runs where the BF16 chain does (Hopper, Gluon), for shapes its 256-value k-tiles divide."""
    t = TILING
    return (layer_chain.supported(device, hidden, intermediate, qkv_rows) and _gluon()
            and hidden % t.bk == 0 and intermediate % t.bk == 0)


@functools.cache
def _gluon() -> bool:
    try:
        from . import _layer_chain_w8a8_gluon  # noqa: F401
    except ImportError:
        return False
    return True


def chain(attn, x, o, gate_up, down, qkv, gamma_post, gamma_in, eps: float, state: torch.Tensor):
    """The op (`reference` says what it computes); `state` from `layer_chain.words`."""
    qv, qs = qkv if qkv is not None else (None, None)
    return torch.ops.yue2.layer_chain_w8a8(attn, x, o[0], o[1], gate_up[0], gate_up[1], down[0], down[1], qv, qs,
                                           gamma_post, gamma_in, eps, state)


# ---- the Gluon launch (imported only where Hopper is) ------------------------------------------------------------

def _launch(attn, x, o, o_s, gu, gu_s, d, d_s, qv, qs, gamma_post, gamma_in, eps, state):
    from . import _layer_chain_w8a8_gluon as kern

    t = TILING
    m, hidden = x.shape
    inter = d.shape[1]
    q_rows = qv.shape[0] if qv is not None else 0
    if m > layer_chain.ROWS or not supported(x.device, hidden, inter, q_rows or t.bn_q):
        return _reference_op(attn, x, o, o_s, gu, gu_s, d, d_s, qv, qs, gamma_post, gamma_in, eps)
    attn, x = attn.contiguous(), x.contiguous()
    am_a = torch.linalg.vector_norm(attn, float("inf"), dim=1)     # the attention rows' maxima (exact in BF16)
    h_out = torch.empty(m, hidden, dtype=x.dtype, device=x.device)
    g_out = torch.empty(m, inter, dtype=x.dtype, device=x.device)
    x_out = torch.empty(m, hidden, dtype=x.dtype, device=x.device)
    q_out = torch.empty(m, q_rows, dtype=x.dtype, device=x.device)
    f32 = dict(dtype=torch.float32, device=x.device)
    sq_h, sq_x = (torch.empty(hidden // bn, layer_chain.ROWS, **f32) for bn in (t.bn_o, t.bn_d))
    am_h, am_x = (torch.empty(hidden // bn, layer_chain.ROWS, **f32) for bn in (t.bn_o, t.bn_d))
    am_g = torch.empty(inter // t.bn_gu, layer_chain.ROWS, **f32)
    desc = layer_chain._descriptor
    wo, wgu, wd = desc(o, t.bn_o, t.bk, True), desc(gu, 2 * t.bn_gu, t.bk, True), desc(d, t.bn_d, t.bk, True)
    wq = desc(qv, t.bn_q, t.bk, True) if qv is not None else wo
    xa, xh, xg, xn = (desc(v, layer_chain.ROWS, t.bk) for v in (attn, h_out, g_out, x_out))
    programs = min(t.programs or layer_chain._programs(x.device), layer_chain._programs(x.device))
    kern.w8a8_chain[(programs,)](
        wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out if q_rows else h_out, o_s, gu_s, d_s,
        qs if qv is not None else o_s, gamma_post, gamma_in if gamma_in is not None else gamma_post, sq_h, sq_x,
        am_a, am_h, am_g, am_x, state[1:6], state[0:1], m, eps, H=hidden, I=inter, Q=q_rows or t.bn_q,
        BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d, BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, SSTAGES=STAGING,
        XSTAGES=t.xstages, G=programs, NEXT=q_rows > 0, num_warps=4, launch_pdl=t.pdl)
    return x_out, q_out


def _reference_op(attn, x, o, o_s, gu, gu_s, d, d_s, qv, qs, gamma_post, gamma_in, eps):
    return reference(attn, x, (o, o_s), (gu, gu_s), (d, d_s), (qv, qs) if qv is not None else None, gamma_post,
                     gamma_in, eps)


def _register() -> None:
    @torch.library.custom_op("yue2::layer_chain_w8a8", mutates_args=("state",))
    def _op(attn: torch.Tensor, x: torch.Tensor, o: torch.Tensor, o_s: torch.Tensor, gu: torch.Tensor,
            gu_s: torch.Tensor, d: torch.Tensor, d_s: torch.Tensor, qv: torch.Tensor | None, qs: torch.Tensor | None,
            gamma_post: torch.Tensor, gamma_in: torch.Tensor | None, eps: float,
            state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, nxt = _reference_op(attn, x, o, o_s, gu, gu_s, d, d_s, qv, qs, gamma_post, gamma_in, eps)
        return out, nxt

    _op.register_kernel("cuda")(_launch)

    @_op.register_fake
    def _(attn, x, o, o_s, gu, gu_s, d, d_s, qv, qs, gamma_post, gamma_in, eps, state):
        return x.new_empty(x.shape), x.new_empty(len(x), qv.shape[0] if qv is not None else 0)


_register()
