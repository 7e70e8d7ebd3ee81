"""Linear layers for the AR decode step, where a few rows meet a big weight: `linear(x, w, epilogue, residual)`.

At 32 rows a step's GEMMs only read weights, so their time is bytes over bandwidth; cuBLAS picks tiles for such
shapes that reach 1.4–2.3 TB/s on an H200 for the small matrices (q/k/v, o, down). On CUDA this op is our Triton
kernel (`_skinny_gemm_triton.py`): the weight tile is the MMA's tall side, the K range is split across programs
when the matrix is too small to fill the card, and the partials are summed in a fixed order by whichever program
finishes last — deterministic, and a row's numbers never depend on the other rows (batch invariance). Two
epilogues fold the step's glue into the GEMM: `add` (the residual) and `silu_mul` (SwiGLU over a fused gate/up
weight). Each rounds like the unfused ops: the GEMM result goes to the output dtype before the epilogue's maths.
The RMSNorm before q/k/v and before gate/up is folded in too (`norm_eps`): the weight given is the matrix times
the norm's weight (`fold_norm`, done once when the engine starts), the kernel sums the squares of the x tiles it
loads anyway and scales its FP32 product by each row's factor rsqrt(mean(x²) + eps). That is the same maths with
one rounding fewer (the normalised x is never rounded to BF16); `farm bench ar` prints the step's distance from an
FP32 forward beside the plain BF16 forward's. Multiplying x by the norm weight in registers instead was tried and
dropped: it took x off the asynchronous load path, and the step got 0.5 ms slower on an H200.
On the CPU the same op runs plain PyTorch. `farm bench ar` prints it against cuBLAS on the model's shapes.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from . import quant

EPILOGUES = ("none", "add", "silu_mul")
MAX_ROWS = 32        # the kernel's row tile: the AR step's slot count


@dataclass(frozen=True)
class Tiling:
    block_n: int
    block_k: int
    split: int
    warps: int = 4
    stages: int = 4
    fold: bool = False       # NVFP4: the 2¹⁴ of the code widening folded into the group and channel scales


def fold_norm(w: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    """The matrix that follows an RMSNorm with weight `norm`, that weight multiplied in: w · diag(norm)."""
    return w * norm


def reference(x: torch.Tensor, w: torch.Tensor, epilogue: str = "none", residual: torch.Tensor | None = None,
              norm_eps: float | None = None, scale: torch.Tensor | None = None,
              group: torch.Tensor | None = None) -> torch.Tensor:
    """x [M, K], w [N, K] ([2N, K] with gate rows first for silu_mul) → [M, N] in x's dtype. With norm_eps, x is
    RMS-normalised first and w already holds the norm's weight (fold_norm): the FP32 product is scaled by each
    row's factor before it is rounded. With scale ([N] FP32), w holds quantised values (quant.py) and the FP32
    product is scaled by each output channel's scale before it is rounded; with group as well, w holds packed
    NVFP4 codes and group their e4m3 group scales."""
    if group is not None:
        w = quant.dequantize(w, group, torch.ones_like(scale))
    if norm_eps is None and scale is None:
        y = F.linear(x, w)
    else:
        y = F.linear(x.float(), w.float())
        if norm_eps is not None:
            y = y * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + norm_eps)
        if scale is not None:
            y = y * scale
        y = y.to(x.dtype)
    if epilogue == "add":
        return residual + y
    if epilogue == "silu_mul":
        gate, up = y.chunk(2, dim=-1)
        return F.silu(gate) * up
    return y


def linear(x: torch.Tensor, w, epilogue: str = "none", residual: torch.Tensor | None = None,
           norm_eps: float | None = None) -> torch.Tensor:
    """The op: our kernel on CUDA for up to MAX_ROWS rows of a shape `tiling` covers, `reference` elsewhere.
    x [..., K]; w a matrix or a quantised tuple (quant.py: fp8 (values, scale), nvfp4 (packed, group, scale));
    residual (for "add") shaped like the output; norm_eps as in `reference`."""
    group = scale = None
    if isinstance(w, tuple):
        w, group, scale = w if len(w) == 3 else (w[0], None, w[1])
    lead = x.shape[:-1]
    flat = x.reshape(-1, x.shape[-1])
    res = residual.reshape(flat.shape[0], -1) if residual is not None else None
    out = torch.ops.yue2.skinny_linear(flat, w, epilogue, res, norm_eps, scale, group)
    return out.reshape(*lead, out.shape[-1])


# Measured on an H200 (a sweep over block sizes, splits, warps and stages at 32 rows, 28 weights in turn so
# nothing is served from L2; docs/measured/2026-11-30-h200-skinny-gemm-sweep.log, and for the folded norm
# docs/measured/2026-11-30-h200-norm-gemm-sweep.log): the best tiling of each yue2-3b shape, keyed by output width,
# depth, epilogue and whether the norm is folded in (the row factor's sum of squares changes the best tile).
MEASURED = {
    (4096, 2048, "none", False): Tiling(32, 256, 1, 4, 5),      # q/k/v   7.4 µs, 2.26 TB/s (cuBLAS 7.4 µs)
    (2048, 2048, "add", False): Tiling(16, 256, 1, 4, 5),       # o       6.0 µs (cuBLAS + add 7.7 µs)
    (6144, 2048, "silu_mul", False): Tiling(64, 128, 1, 4, 5),  # gate/up 16.0 µs, 3.14 TB/s (cuBLAS + SiLU·up 21.2)
    (2048, 6144, "add", False): Tiling(64, 128, 4, 4, 5),       # down    9.9 µs, 2.53 TB/s (cuBLAS + add 12.3 µs)
    (4096, 2048, "none", True): Tiling(64, 256, 1, 4, 4),       # q/k/v + norm   9.1 µs (16.0 with the plain tile)
    (6144, 2048, "silu_mul", True): Tiling(64, 256, 1, 4, 3),   # gate/up + norm 17.0 µs (20.4 with the plain tile)
    # FP8 weights (docs/measured/2026-12-01-h200-sweep-fp8-f16mma.log): half the bytes, barely less time — at these
    # sizes a kernel's few dependent memory round trips, not its bytes, set its time
    (4096, 2048, "none", False, "fp8"): Tiling(64, 512, 4, 4, 3),      # q/k/v    5.9 µs (BF16 7.2)
    (2048, 2048, "add", False, "fp8"): Tiling(64, 512, 4, 4, 3),       # o        4.4 µs (BF16 5.9)
    (6144, 2048, "silu_mul", False, "fp8"): Tiling(64, 256, 4, 4, 3),  # gate/up 16.3 µs (BF16 16.4)
    (2048, 6144, "add", False, "fp8"): Tiling(64, 256, 4, 4, 3),       # down     9.3 µs (BF16 9.6)
    # NVFP4 weights: a quarter of the bytes, more time — widening e2m1 and its group scale costs more ALU work per
    # byte than an H200 has. Swept by a session whose log was lost (its figures below); the whole step with these
    # tiles: docs/measured/2026-12-01-h200-s24-bench-ar-nvfp4.log (0.85x BF16 at one row)
    (4096, 2048, "none", False, "nvfp4"): Tiling(64, 256, 4, 4, 4),    # q/k/v    8.05 µs
    (2048, 2048, "add", False, "nvfp4"): Tiling(64, 256, 8, 4, 4),     # o        5.54 µs
    (6144, 2048, "silu_mul", False, "nvfp4"): Tiling(64, 256, 8, 4, 4),  # gate/up 21.8 µs
    (2048, 6144, "add", False, "nvfp4"): Tiling(64, 256, 8, 4, 4),     # down     (not swept: the call ran out)
}


def tiling(n: int, k: int, epilogue: str, norm: bool = False, fmt: str = "bf16") -> Tiling | None:
    """The tiles for an output width n and depth k: measured ones for the model's shapes, else a rule that gives
    about one program per SM; None when the shape does not divide into them (the op then runs the reference).
    A folded norm needs the whole of K in one program (no split). Quantised weights (fmt "fp8", "nvfp4") have
    tiles of their own; an NVFP4 tile spans whole pairs of 16-value groups."""
    key = (n, k, epilogue, norm) + ((fmt,) if fmt != "bf16" else ())
    if key in MEASURED:
        return MEASURED[key]
    block_n = 32 if n % 32 == 0 else 16
    sizes = (128, 64, 32) if fmt == "nvfp4" else (128, 64, 32, 16)
    block_k = next((b for b in sizes if k % b == 0), None)
    if n % block_n or block_k is None:
        return None
    split = 1
    while not norm and (n // block_n) * split < 128 and k % (block_k * split * 2) == 0 and split < 8:
        split *= 2
    return Tiling(block_n=block_n, block_k=block_k, split=split)


# ---- the Triton launch (imported only where CUDA is) -------------------------------------------------------------

_COUNTERS: dict = {}


@functools.cache
def pdl(device: torch.device) -> bool:
    """Programmatic dependent launch (a kernel starts while the one before it ends): on Hopper and later."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def _launch(x, w, epilogue, residual, norm_eps=None, scale=None, group=None, t: Tiling | None = None):
    from . import _skinny_gemm_triton as kern

    m, k = x.shape
    n = w.shape[0] // 2 if epilogue == "silu_mul" else w.shape[0]
    norm = norm_eps is not None
    fmt = "bf16" if scale is None else "fp8" if group is None else "nvfp4"
    t = t or tiling(n, k, epilogue, norm, fmt)
    if m > MAX_ROWS and scale is not None and norm_eps is None:
        # a prefill's many rows: compute-bound, so the quantised matrix is widened once and cuBLAS runs
        widened = quant.dequantize(w, scale) if group is None else quant.dequantize(w, group, scale)
        return reference(x, widened.to(x.dtype), epilogue, residual)
    if m > MAX_ROWS or t is None or (norm and (t.split > 1 or group is not None)) or x.stride(1) != 1 or (
            w.stride(1) != 1) or (residual is not None and residual.stride(1) != 1):
        return reference(x, w, epilogue, residual, norm_eps, scale, group)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)
    tiles = n // t.block_n
    part = count = out
    if t.split > 1:
        part = torch.empty(t.split, 2, n, MAX_ROWS, dtype=torch.float32, device=x.device)
        key = (x.device, w.data_ptr(), epilogue)       # one counter row per weight: calls never share counters
        if key not in _COUNTERS:
            _COUNTERS[key] = torch.zeros(tiles, dtype=torch.int32, device=x.device)
        count = _COUNTERS[key]
    res = residual if residual is not None else out
    g = group if group is not None else out
    kern.skinny_gemm[(tiles, t.split)](
        x, w, out, res, part, count, scale if scale is not None else out, g, m, n, x.stride(0), w.stride(0),
        out.stride(0), res.stride(0), g.stride(0), norm_eps or 0.0, K=k, BM=MAX_ROWS, BN=t.block_n, BK=t.block_k,
        SPLIT=t.split, EPI=EPILOGUES.index(epilogue), NORM=norm, SCALED=scale is not None, FP4=group is not None,
        STAGES=t.stages, PDL=pdl(x.device), FOLD=t.fold, num_warps=t.warps, launch_pdl=pdl(x.device))
    return out


def _register() -> None:
    @torch.library.custom_op("yue2::skinny_linear", mutates_args=())
    def _op(x: torch.Tensor, w: torch.Tensor, epilogue: str, residual: torch.Tensor | None,
            norm_eps: float | None, scale: torch.Tensor | None, group: torch.Tensor | None) -> torch.Tensor:
        return reference(x, w, epilogue, residual, norm_eps, scale, group)

    _op.register_kernel("cuda")(_launch)

    @_op.register_fake
    def _(x, w, epilogue, residual, norm_eps, scale, group):
        n = w.shape[0] // 2 if epilogue == "silu_mul" else w.shape[0]
        return x.new_empty(x.shape[0], n)


_register()
