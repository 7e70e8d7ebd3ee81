"""The AR decode step's layer tail and the next layer's q/k/v in one op: `chain(attn, x, o, gate_up, down, qkv)`.

After a layer's attention the step runs four matrix products, each the input of the next: o (+ the residual),
gate/up (with the RMSNorm before it folded in, then SiLU(gate)·up), down (+ the residual) and the next layer's
q/k/v (its input norm folded in). At the step's 32 rows each only reads its weight; as four kernels each pays a
start and a drain that no bytes cover. On Hopper this op is one persistent Gluon kernel
(`_layer_chain_gluon.py`): a warp per SM streams the weights of all four products through a ring of TMA copies
without waiting between products, so the next product's weights arrive while the grid waits for the one before.
Elsewhere, and on the CPU, it is `reference`: the same products through `skinny_gemm.reference`, the maths and
rounding the separate ops have (`step_weights.folded_tail` and `folded_head`), so an engine with the chain gives
the same ids on the CPU as one without. On the GPU the kernels differ from the skinny GEMMs in summation order
only; every tile spans all of K and a row depends only on its own inputs (batch invariance).
Weights are the step's folded ones with the gate/up rows paired (`step_weights.for_chain`, `pair_rows`): gate row n
then up row n, so that a kernel tile's gate and up values come in one copy and one MMA.

Status (docs/ar-engine.md, "The layer chain"): on by default where the kernel runs (`AREngine(chain=None)`).
Session s30's kernel was 6 % faster per one-row step on an H200 but not batch-invariant in the engine: one counter
served all four products and the q/k/v product could start before the last down tiles were stored. Each product
has its own counter now.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from . import skinny_gemm


@dataclass(frozen=True)
class ChainTiling:
    """Rows of weight per tile for each product (gate/up: outputs per tile, so twice as many paired rows), the
    depth of a weight k-tile, and the two rings' slots. A ring slot holds 32 weight rows (a tile of 16 rows fills
    it with two k-tiles) and an activation slot 64 rows (the MMA's M), so STAGES · 8 KB + XSTAGES · 16 KB of shared
    memory at BK 128. `pdl`: launched to overlap the kernel before (programmatic dependent launch);
    `early_weights`: its weight stream starts then, before that kernel has finished (both are what made the
    engine's step faster; docs/ar-engine.md); `programs`: how many programs (at most one per SM) share the tiles.
    o/down tiles of 16 rows: 128 tiles on an H200's 132 programs (37.6 against 39.1 µs per layer at 32 rows,
    docs/benchmarks.md).

    The rings and the register cap are sized so that a program of the decode attention's split kernel fits on an
    SM beside a chain program: the chain lets the kernel after it launch at its start, so that program is resident
    and waiting when the chain ends, instead of landing only as the chain's programs leave. 8 weight and 5
    activation slots take 145 KB of shared memory and `maxnreg` 168 keeps 8 warps x 168 registers inside the
    register file beside the split kernel's 4 warps x 151 and 71.7 KB (the compiler's default for a
    warp-specialised kernel, 256, would fill the file alone; tests/test_gpu_products.py checks the fit). Neither
    changes a sum; measured on an H200 (docs/benchmarks.md, 2026-12-04, thirteenth session): a one-row step 2-6 %
    faster than with 12 and 6 slots at 256 registers, level at 12 and 24 rows."""
    bn_o: int = 16
    bn_gu: int = 16
    bn_d: int = 16
    bn_q: int = 32
    bk: int = 128
    stages: int = 8
    xstages: int = 5
    pdl: bool = True
    early_weights: bool = True
    programs: int | None = None     # None: one per SM; fewer draw the same bits (a tile's result is its own)
    maxnreg: int | None = 168       # registers per thread (None: the compiler's choice, 256 here)


TILING = ChainTiling()
ROWS = skinny_gemm.MAX_ROWS      # the step's slots: the activation tiles' rows


def pair_rows(gate_up: torch.Tensor) -> torch.Tensor:
    """[gate; up] ([2I, H], gate rows then up rows) → rows paired: gate 0, up 0, gate 1, up 1, …"""
    return gate_up.unflatten(0, (2, -1)).transpose(0, 1).flatten(0, 1).contiguous()


def unpair_rows(paired: torch.Tensor) -> torch.Tensor:
    """The inverse of `pair_rows`."""
    return paired.unflatten(0, (-1, 2)).transpose(0, 1).flatten(0, 1)


def reference(attn: torch.Tensor, x: torch.Tensor, o: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
              qkv: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """attn [M, heads·head_dim], x (the residual) [M, H] → (the layer's output [M, H], the next layer's q/k/v
    [M, Q], or [M, 0] without `qkv`). gate_up's rows are paired (`pair_rows`)."""
    h = skinny_gemm.reference(attn, o, "add", x)
    g = skinny_gemm.reference(h, unpair_rows(gate_up), "silu_mul", None, eps)
    out = skinny_gemm.reference(g, down, "add", h)
    nxt = skinny_gemm.reference(out, qkv, "none", None, eps) if qkv is not None else out.new_empty(len(out), 0)
    return out, nxt


def supported(device: torch.device, hidden: int, intermediate: int, qkv_rows: int, t: ChainTiling = TILING) -> bool:
    """The kernel runs on Hopper (sm_90: warpgroup MMA and TMA) with Gluon, for shapes its tiles divide."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device) != (9, 0) or not _gluon():
        return False
    # the norms' partial sums: a power of two each, and at least 16 (the signal warp adds them 16 at a time; with
    # fewer it would add none and scale by rsqrt(eps))
    partial_sums = (hidden // t.bn_o, hidden // t.bn_d)
    # a 32-row weight slot holds 32 / (a tile's rows) consecutive k-tiles: a tile's k-tiles must fill whole slots
    # (else the kernel's slot count rounds down and its two rings fall out of step)
    whole_slots = ((hidden, t.bn_o), (hidden, 2 * t.bn_gu), (intermediate, t.bn_d), (hidden, t.bn_q))
    return (hidden % t.bk == 0 and intermediate % t.bk == 0 and hidden % t.bn_o == 0 and hidden % t.bn_d == 0
            and intermediate % t.bn_gu == 0 and qkv_rows % t.bn_q == 0 and max(t.bn_o, t.bn_d, t.bn_q) <= 32
            and 2 * t.bn_gu <= 32 and all(n >= 16 and n & (n - 1) == 0 for n in partial_sums)
            and all(k // t.bk % (32 // rows) == 0 for k, rows in whole_slots))


@functools.cache
def _gluon() -> bool:
    try:
        from . import _layer_chain_gluon  # noqa: F401
    except ImportError:
        return False
    return True


def words(device: torch.device) -> torch.Tensor:
    """The int32 words a chain kernel needs: [0] counts grid-barrier spins that gave up, [1:5] one counter per
    product, [5] the programs that have left (the kernel sets [1:6] back to zero as it ends). One set per engine."""
    return torch.zeros(6, dtype=torch.int32, device=device)


def timed_out(state: torch.Tensor) -> bool:
    """A grid barrier of some chain that used `state` gave up waiting: those steps' numbers are wrong."""
    return bool(int(state[0]))


def chain(attn: torch.Tensor, x: torch.Tensor, o: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
          qkv: torch.Tensor | None, eps: float, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The op (`reference` says what it computes); `state` from `words`."""
    return torch.ops.yue2.layer_chain(attn, x, o, gate_up, down, qkv, eps, state)


# ---- the Gluon launch (imported only where Hopper is) ------------------------------------------------------------

_DESCRIPTORS: dict = {}


def _descriptor(t: torch.Tensor, rows: int, bk: int, cache: bool = False):
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, rows, bk)   # a freed address may be reused
    if cache and key in _DESCRIPTORS:
        return _DESCRIPTORS[key]
    desc = TensorDescriptor.from_tensor(t, [rows, bk], gl.NVMMASharedLayout.get_default_for([rows, bk], gl.bfloat16))
    if cache:       # weights live as long as the engine; activations are new each call
        _DESCRIPTORS[key] = desc
    return desc


@functools.cache
def _programs(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _launch(attn, x, o, gate_up, down, qkv, eps, state, t: ChainTiling | None = None):
    from . import _layer_chain_gluon as kern

    t = t or TILING        # read at each call, so a probe can set the module's TILING between engines
    m, hidden = x.shape
    inter = down.shape[1]
    q_rows = qkv.shape[0] if qkv is not None else 0
    if (m > ROWS or attn.dtype != torch.bfloat16 or o.dtype != torch.bfloat16
            or not supported(x.device, hidden, inter, q_rows or t.bn_q, t)):
        return reference(attn, x, o, gate_up, down, qkv, eps)
    attn, x = attn.contiguous(), x.contiguous()
    h_out = torch.empty(m, hidden, dtype=x.dtype, device=x.device)
    g_out = torch.empty(m, inter, dtype=x.dtype, device=x.device)
    x_out = torch.empty(m, hidden, dtype=x.dtype, device=x.device)
    q_out = torch.empty(m, q_rows, dtype=x.dtype, device=x.device)
    sq_h = torch.empty(hidden // t.bn_o, ROWS, dtype=torch.float32, device=x.device)
    sq_x = torch.empty(hidden // t.bn_d, ROWS, dtype=torch.float32, device=x.device)
    wo, wgu, wd = (_descriptor(o, t.bn_o, t.bk, True), _descriptor(gate_up, 2 * t.bn_gu, t.bk, True),
                   _descriptor(down, t.bn_d, t.bk, True))
    wq = _descriptor(qkv, t.bn_q, t.bk, True) if qkv is not None else wo
    xa, xh, xg, xn = (_descriptor(v, ROWS, t.bk) for v in (attn, h_out, g_out, x_out))
    programs = min(t.programs or _programs(x.device), _programs(x.device))
    kern.layer_chain[(programs,)](
        wo, wgu, wd, wq, xa, xh, xg, xn, x, h_out, g_out, x_out, q_out if q_rows else h_out, sq_h, sq_x,
        state[1:6], state[0:1], m, eps, H=hidden, I=inter, Q=q_rows or t.bn_q, BN_O=t.bn_o, BN_GU=t.bn_gu, BN_D=t.bn_d,
        BN_Q=t.bn_q, BK=t.bk, STAGES=t.stages, XSTAGES=t.xstages, G=programs, NEXT=q_rows > 0,
        EARLY=t.early_weights, num_warps=4, launch_pdl=t.pdl, **({"maxnreg": t.maxnreg} if t.maxnreg else {}))
    return x_out, q_out


def _register() -> None:
    @torch.library.custom_op("yue2::layer_chain", mutates_args=("state",))
    def _op(attn: torch.Tensor, x: torch.Tensor, o: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor,
            qkv: torch.Tensor | None, eps: float, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out, nxt = reference(attn, x, o, gate_up, down, qkv, eps)
        return out, nxt

    _op.register_kernel("cuda")(_launch)

    @_op.register_fake
    def _(attn, x, o, gate_up, down, qkv, eps, state):
        return x.new_empty(x.shape), x.new_empty(len(x), qkv.shape[0] if qkv is not None else 0)


_register()
