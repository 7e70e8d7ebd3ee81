"""The skinny-GEMM op of the AR decode step (stages/skinny_gemm.py): the op's plumbing on the CPU, and the Triton
kernel itself under Triton's interpreter (FP32; the interpreter cannot run BF16 dot products). The BF16 kernel on
the real shapes is checked on the GPU (tests/test_gpu.py)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from stages import skinny_gemm as sg
from stages.transformer import BranchWeights, Dims, layer_head, layer_tail


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


def test_every_model_shape_has_a_tiling():
    for n, k, epilogue in [(4096, 2048, "none"), (2048, 2048, "add"), (6144, 2048, "silu_mul"), (2048, 6144, "add"),
                           (128, 64, "none"), (64, 64, "add"), (96, 64, "silu_mul"), (64, 96, "add")]:
        t = sg.tiling(n, k, epilogue)
        assert t is not None and n % t.block_n == 0 and k % (t.block_k * t.split) == 0, (n, k, epilogue)


INTERPRETED = textwrap.dedent("""
    import torch
    from stages import skinny_gemm as sg
    torch.manual_seed(0)
    cases = [(5, 128, 256, "none", sg.Tiling(32, 64, 1)), (32, 128, 512, "add", sg.Tiling(32, 64, 4)),
             (3, 64, 256, "silu_mul", sg.Tiling(16, 32, 2)), (17, 96, 256, "silu_mul", sg.Tiling(32, 64, 1)),
             (6, 64, 512, "none", sg.Tiling(16, 128, 2))]
    for m, n, k, epilogue, t in cases:
        x, w = torch.randn(m, k), torch.randn(2 * n if epilogue == "silu_mul" else n, k)
        res = torch.randn(m, n) if epilogue == "add" else None
        want = sg.reference(x, w, epilogue, res)
        got = sg._launch(x, w, epilogue, res, t)
        assert (got - want).abs().max() <= 1e-5 * want.abs().max(), (m, n, k, epilogue, t)
        assert torch.equal(got, sg._launch(x, w, epilogue, res, t))        # split-K: a fixed order
        other = x.clone()
        other[1:] = torch.randn(m - 1, k)
        assert torch.equal(sg._launch(other, w, epilogue, res, t)[0], got[0])   # rows never mix
    print("ok", len(cases))
""")


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_the_triton_kernel_under_the_interpreter():
    """Split-K with its last-finisher reduction, the three epilogues, M below the row tile."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.getcwd()}
    run = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and run.stdout.startswith("ok 5"), run.stderr[-3000:]
