"""The VAE decoder with its convolutions on tensor cores at FP32 accuracy: decode precision "tf32x3".

cuDNN's FP32 convolutions run on the CUDA cores (~25–30 TFLOP/s on an H200) and bound the FP32 decode; TF32 is
2.6× faster but ~3e-4 from FP32. Here every convolution of `vae.OobleckDecoder` is one launch of our Triton kernel
(`_conv_tf32x3_triton.py`): channels-last activations, time as the MMA's M, each FP32 operand split into a TF32
head and tail, three products, so the result is within FP32 rounding noise of an FP32 convolution.

A transposed convolution (kernel 2s, stride s, padding p) is a two-tap convolution with s·C_out outputs: output
sample o = q·s + r − p is x[q]·W[:, :, r] + x[q − 1]·W[:, :, r + s], so with the s phases side by side as output
channels, rows q = 0 … L of [B, L + 1, s·C_out] are, read as [B, (L + 1)·s, C_out], the output shifted by p —
a view, no shuffle. The snakes stay the module's own compiled kernel, run on channels-last views.

On the CPU `gemm` runs `reference_gemm` (the same sums in PyTorch), which keeps this layout arithmetic under test;
the kernel itself is checked under Triton's interpreter (tests) and on the GPU against FP64.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


_PLAN_LOCK = threading.Lock()


@dataclass(frozen=True)
class Tiling:
    bm: int = 128       # time rows
    bn: int = 128       # output channels
    bk: int = 32        # input channels per step
    warps: int = 8
    stages: int = 3


@dataclass(frozen=True)
class ConvGemm:
    """One convolution as the kernel's GEMM: y[t] = bias + Σ_j x[t + off0 + j·dil] · W_j (channels-last)."""
    taps: int
    off0: int
    dil: int
    n: int                  # output channels of the GEMM (s·C_out for a transposed conv)
    w_hi: torch.Tensor      # [taps · n_pad, C_in], tap-major, output channels padded with zeros to n_pad, split;
    w_lo: torch.Tensor      # w_hi + w_lo is the FP32 weight exactly
    bias: torch.Tensor      # [n_pad]
    tiling: Tiling
    stride: int = 0         # a transposed conv's s (0: a plain conv): the GEMM's rows hold s outputs each
    pad: int = 0            # … shifted by its padding

    @property
    def n_pad(self) -> int:
        return self.bias.numel()


def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FP32 x = hi + lo exactly, hi with TF32's 11 significant bits rounded to nearest: the kernel's `_split`."""
    bits = x.contiguous().view(torch.int32)
    hi = ((bits + 0x1000) & -0x2000).view(torch.float32)
    return hi, x - hi


def default_tiling(c_in: int, n: int) -> Tiling:
    bk = next((k for k in (32, 16, 8) if c_in % k == 0), 0)
    bn = 128 if n >= 128 else max(16, 1 << (n - 1).bit_length())
    return Tiling(bn=bn, bk=bk, warps=8 if bn >= 128 else 4)


def supported(c_in: int) -> bool:
    """The kernel walks whole channel blocks of at least 8 (TF32's MMA depth): a default tiling has one."""
    return default_tiling(c_in, 1).bk > 0


def _gemm_of(w_taps: torch.Tensor, bias: torch.Tensor | None, off0: int, dil: int, tiling: Tiling | None,
             stride: int = 0, pad: int = 0) -> ConvGemm:
    """w_taps [taps, n, C_in] → a ConvGemm with padded, split, tap-major weights."""
    taps, n, c_in = w_taps.shape
    t = tiling or default_tiling(c_in, n)
    if not t.bk or c_in % t.bk:       # the kernel walks whole channel blocks: a remainder would be left out
        raise ValueError(f"a tiling's channel block ({t.bk}) must divide the conv's input channels ({c_in})")
    n_pad = -(-n // t.bn) * t.bn
    w = torch.zeros(taps, n_pad, c_in, dtype=torch.float32, device=w_taps.device)
    w[:, :n] = w_taps
    b = torch.zeros(n_pad, dtype=torch.float32, device=w_taps.device)
    if bias is not None:
        b[:n] = bias
    w = w.reshape(taps * n_pad, c_in)
    hi, lo = split(w)
    return ConvGemm(taps, off0, dil, n, hi, lo, b, t, stride, pad)


def from_conv(m: nn.Conv1d, tiling: Tiling | None = None) -> ConvGemm:
    (d,), (p,) = m.dilation, m.padding
    return _gemm_of(m.weight.permute(2, 0, 1), m.bias, -p, d, tiling)


def from_conv_transpose(m: nn.ConvTranspose1d, tiling: Tiling | None = None) -> ConvGemm:
    (k,), (s,), (p,) = m.kernel_size, m.stride, m.padding
    if k != 2 * s:
        raise ValueError(f"only kernel = 2·stride transposed convs are planned, got kernel {k}, stride {s}")
    w = m.weight.permute(2, 1, 0)                        # [2s, C_out, C_in]
    c_out = w.shape[1]
    taps = torch.stack([w[s:].reshape(s * c_out, -1), w[:s].reshape(s * c_out, -1)])   # x[q − 1], then x[q]
    bias = None if m.bias is None else m.bias.repeat(s)
    return _gemm_of(taps, bias, -1, 1, tiling, stride=s, pad=p)


def reference_gemm(x: torch.Tensor, g: ConvGemm, residual: torch.Tensor | None = None,
                   rows: int | None = None) -> torch.Tensor:
    """The kernel's sums in PyTorch (FP32): x [B, L, C_in] → [B, rows, n] (rows defaults to L)."""
    rows = x.shape[1] if rows is None else rows
    lo = g.off0
    hi = g.off0 + (g.taps - 1) * g.dil + rows - x.shape[1]
    xp = F.pad(x, (0, 0, max(0, -lo), max(0, hi)))        # zeros where the kernel's loads fall outside [0, L)
    base = max(0, lo)                                      # tap 0's first row in xp
    w = (g.w_hi + g.w_lo).view(g.taps, g.n_pad, -1)[:, :g.n]
    y = g.bias[:g.n].expand(x.shape[0], rows, g.n).clone()
    for j in range(g.taps):
        s = base + j * g.dil
        y += xp[:, s:s + rows] @ w[j].T
    return y if residual is None else y + residual


def _strides(t: torch.Tensor) -> list[int]:
    """t's strides with each size-1 dimension's set as if t were packed: PyTorch calls [1, L, C] contiguous whatever
    its batch stride (a transposed latent tile has (C, C, 1)), and TMA wants strides that are 16-byte multiples
    and cover the next dimension. The kernel never moves along a size-1 dimension, so the value is free."""
    s = list(t.stride())
    for i in range(t.dim() - 2, -1, -1):
        if t.shape[i] == 1:
            s[i] = t.shape[i + 1] * s[i + 1]
    return s


def _launch(x: torch.Tensor, g: ConvGemm, residual: torch.Tensor | None, rows: int) -> torch.Tensor:
    from triton.tools.tensor_descriptor import TensorDescriptor

    from ._conv_tf32x3_triton import conv_cl
    t = g.tiling
    b = x.shape[0]
    width = -(-g.n // 4) * 4                               # TMA: 16-byte rows; the store clips the padding
    y = torch.empty(b, rows, width, dtype=torch.float32, device=x.device)
    xd = TensorDescriptor(x, list(x.shape), _strides(x), [1, t.bm, t.bk])
    wd = [TensorDescriptor.from_tensor(w, [t.bn, t.bk]) for w in (g.w_hi, g.w_lo)]
    yd = TensorDescriptor.from_tensor(y, [1, t.bm, t.bn])
    rd = yd if residual is None else TensorDescriptor(residual, list(residual.shape), _strides(residual),
                                                      [1, t.bm, t.bn])
    grid = (-(-rows // t.bm), g.n_pad // t.bn, b)
    conv_cl[grid](xd, *wd, yd, rd, g.bias, g.n_pad, x.shape[2], g.off0, g.dil, TAPS=g.taps,
                  HAS_RES=residual is not None, BM=t.bm, BN=t.bn, BK=t.bk, STAGES=t.stages, num_warps=t.warps)
    return y[..., :g.n]


def gemm(x: torch.Tensor, g: ConvGemm, residual: torch.Tensor | None = None, rows: int | None = None) -> torch.Tensor:
    """x [B, L, C_in] channels-last FP32 → [B, rows, n]: the kernel on CUDA, `reference_gemm` elsewhere."""
    rows = x.shape[1] if rows is None else rows
    if x.is_cuda:
        return _launch(x, g, residual, rows)
    return reference_gemm(x, g, residual, rows)


def apply(g: ConvGemm, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """The convolution `g` stands for, channels-last: [B, L, C_in] → [B, L_out, C_out]."""
    if not g.stride:
        return gemm(x, g, residual)
    b, length, _ = x.shape
    s, p = g.stride, g.pad
    z = gemm(x, g, rows=length + 1)                        # [B, L + 1, s·C_out]
    c_out = g.n // s
    out = (length + 1) * s - 2 * p                         # = (L − 1)·s − 2p + 2s
    return z.reshape(b, (length + 1) * s, c_out)[:, p:p + out]


def _snake_cl(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return m(x.transpose(1, 2)).transpose(1, 2).contiguous()


@dataclass(frozen=True)
class Plan:
    """A decoder's convolutions as GEMMs, in forward order, beside the snakes that stay modules."""
    stem: ConvGemm
    blocks: tuple            # per block: (snake, up ConvGemm, ((snake, conv7, snake, conv1), …))
    snake: nn.Module
    out: ConvGemm


def prepare(decoder: nn.Module, tilings: dict | None = None) -> Plan:
    """`decoder`'s weights as ConvGemms (tilings: optional {(C_in, n, taps): Tiling} overrides)."""
    tilings = tilings or {}

    def conv(m):
        k = m.kernel_size[0]
        return from_conv(m, tilings.get((m.in_channels, m.out_channels, k)))

    def up(m):
        s = m.stride[0]
        return from_conv_transpose(m, tilings.get((m.in_channels, s * m.out_channels, 2)))

    layers = list(decoder.layers)
    blocks = []
    for block in layers[1:-2]:
        sn, ct, *units = block.layers
        blocks.append((sn, up(ct), tuple((u.layers[0], conv(u.layers[1]), u.layers[2], conv(u.layers[3]))
                                         for u in units)))
    return Plan(conv(layers[0]), tuple(blocks), layers[-2], conv(layers[-1]))


def usable(decoder: nn.Module) -> bool:
    """The decoder sits on a card with TMA (Hopper on) and every conv's input width suits the kernel (the released
    decoder's do; the tiny test model's do not)."""
    w = next(decoder.parameters())
    if w.is_cuda and torch.cuda.get_device_capability(w.device) < (9, 0):
        return False
    return all(supported(m.in_channels) for m in decoder.modules()
               if isinstance(m, (nn.Conv1d, nn.ConvTranspose1d)))


def forward(plan: Plan, z: torch.Tensor) -> torch.Tensor:
    """z [B, latent_dim, T] FP32 → raw audio [B, audio_channels, samples], as `OobleckDecoder.forward`."""
    x = apply(plan.stem, z.transpose(1, 2).contiguous())
    for sn, ct, units in plan.blocks:
        x = apply(ct, _snake_cl(sn, x))
        for s1, c7, s2, c1 in units:
            h = apply(c7, _snake_cl(s1, x))
            x = apply(c1, _snake_cl(s2, h), residual=x)
    y = apply(plan.out, _snake_cl(plan.snake, x))
    return y.transpose(1, 2)


def plan_for(decoder: nn.Module, tilings: dict | None = None) -> Plan:
    """The decoder's plan, built on first use and kept on the decoder (split weights: twice its 0.25 GiB); built
    again if the decoder's weights have moved since (`.to`, a copy), or with `tilings` (as `prepare`'s), which the
    plan then keeps."""
    where = next(decoder.parameters()).data_ptr()
    with _PLAN_LOCK:        # a farm worker's threads share one decoder: build its plan once
        held = getattr(decoder, "_tf32x3_plan", None)
        if held is None or held[0] != where or tilings is not None:
            held = (where, prepare(decoder, tilings))
            decoder._tf32x3_plan = held
    return held[1]
