"""The skinny-GEMM op of the AR decode step (stages/skinny_gemm.py): the op's plumbing on the CPU. The kernel runs
under Triton's interpreter in tests/test_triton_interpreted.py, and in BF16 on the real shapes in tests/test_gpu.py."""
from __future__ import annotations

from dataclasses import fields, replace

import torch

from stages import skinny_gemm as sg
from stages.transformer import BranchWeights, Dims, layer_head, layer_qkv, layer_tail


def _weights(h=64, inter=96, heads=4, kv=2, d=16, seed=0) -> BranchWeights:
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g) * 0.1
    return BranchWeights(torch.rand(h, generator=g) + 0.5, r((heads + 2 * kv) * d, h), torch.rand(d) + 0.5,
                         torch.rand(d) + 0.5, r(h, heads * d), torch.rand(h, generator=g) + 0.5, r(2 * inter, h),
                         r(h, inter))


def test_the_op_runs_the_layer_maths_unchanged_on_the_cpu():
    """layer_head / layer_tail through the op (3-D activations, residuals) == the plain path."""
    w, d = _weights(), Dims(4, 2, 16, 1e-6)
    x = torch.randn(3, 1, 64)
    cos, sin = torch.ones(1, 16), torch.zeros(1, 16)
    plain = layer_head(x, w, cos, sin, d)
    viaop = layer_head(x, w, cos, sin, d, sg.linear)
    for a, b in zip(plain, viaop):
        assert torch.equal(a, b)
    attn = torch.randn(3, 4, 1, 16)
    assert torch.equal(layer_tail(x, attn, w, d), layer_tail(x, attn, w, d, sg.linear))


def test_folded_norms_are_the_same_layer_maths():
    """The decode step's form (each RMSNorm weight folded into the next matrix, the row factor applied to the
    product) against the plain layer: equal up to rounding, in FP32 and BF16."""
    w, d = _weights(), Dims(4, 2, 16, 1e-6)
    folded = replace(w, qkv=sg.fold_norm(w.qkv, w.in_norm), gate_up=sg.fold_norm(w.gate_up, w.post_norm))
    x, attn = torch.randn(3, 1, 64), torch.randn(3, 4, 1, 16)
    for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 3e-2)):
        cast = lambda t: t.to(dtype)
        wp, wf = (BranchWeights(*map(cast, _tensors(v))) for v in (w, folded))
        plain = layer_qkv(cast(x), wp, d)
        fast = layer_qkv(cast(x), wf, d, sg.linear, folded=True)
        assert (fast.float() - plain.float()).abs().max() <= tol * plain.float().abs().max()
        plain = layer_tail(cast(x), cast(attn), wp, d)
        fast = layer_tail(cast(x), cast(attn), wf, d, sg.linear, folded=True)
        assert (fast.float() - plain.float()).abs().max() <= tol * plain.float().abs().max()


def _tensors(w: BranchWeights) -> list:
    return [getattr(w, f.name) for f in fields(w)]


def test_every_model_shape_has_a_tiling():
    for n, k, epilogue in [(4096, 2048, "none"), (2048, 2048, "add"), (6144, 2048, "silu_mul"), (2048, 6144, "add"),
                           (128, 64, "none"), (64, 64, "add"), (96, 64, "silu_mul"), (64, 96, "add")]:
        t = sg.tiling(n, k, epilogue)
        assert t is not None and n % t.block_n == 0 and k % (t.block_k * t.split) == 0, (n, k, epilogue)
