"""Quantised AR weights (stages/quant.py): the FP8 and NVFP4 conversions' error bounds, the quantised product's maths,
and the AR engine reading its linear layers in each format (tiny checkpoint, the reference kernels on the CPU)."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from stages import quant, skinny_gemm
from stages.ar import AREngine, ARRequest
from stages.config import BYTE_LAYOUT, Sampling
from stages.transformer import AR, HEAD, ar_prefill, branch_weights, logits
from stages.weights import load_model


@pytest.fixture(scope="module")
def model(tiny_ckpt_dir, tiny_cfg):
    return load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, HEAD}, dtype=torch.float32)


def test_fp8_rows_round_within_half_a_step_of_e4m3():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 256, generator=g) * torch.logspace(-3, 1, 64)[:, None]
    w[5] = 0
    values, scale = quant.quantize_fp8(w)
    assert values.dtype == torch.float8_e4m3fn and scale.shape == (64,) and scale[5] == 1
    back = quant.dequantize(values, scale)
    assert torch.equal(back[5], w[5])
    # e4m3 keeps 3 mantissa bits: relative error ≤ 2⁻⁴ for normal values; below 2⁻⁶·scale the step is 2⁻⁹·scale
    bound = torch.maximum(w.abs() * 2 ** -4, scale[:, None] * 2 ** -10)
    assert ((back - w).abs() <= bound).all()
    torch.testing.assert_close(back.abs().amax(dim=1), w.abs().amax(dim=1), rtol=1e-6, atol=0)   # the max is exact


def test_nvfp4_rounds_each_value_to_the_nearest_step_of_its_group():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 256, generator=g) * torch.logspace(-4, 0, 256)      # groups from tiny to large
    w[7, 16:32] = 0
    packed, group, scale = quant.quantize_nvfp4(w)
    assert (packed.dtype, packed.shape, group.dtype, group.shape, scale.shape) == (
        torch.uint8, (64, 128), torch.float8_e4m3fn, (64, 16), (64,))
    back = quant.dequantize(packed, group, scale)
    assert torch.equal(back[7, 16:32], w[7, 16:32])
    # a group's unit is its scale over the global one; e2m1 steps are 0.5 below 2, 1 to 4, 2 to 6 units (plus the
    # e4m3 rounding of the unit itself, which can push the group's largest value just past 6 units)
    unit = (group.float() * scale[:, None]).repeat_interleave(16, dim=1)
    assert ((back - w).abs() <= unit * (0.25 + (w / unit).abs() / 4)).all()
    assert (back - w).abs().max() > 0                                        # it did quantise
    assert ((quant.unpack_codes(packed) & 7) == 7).any(dim=1).all()           # every row reaches ±6 units somewhere


def test_nvfp4_ties_go_to_the_even_code():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.25, -5.0, 7.0])
    assert quant.e2m1_values(quant.e2m1_codes(x.clamp(-6, 6))).tolist() == [0, 1, 1, 2, 2, 4, 4, 0, -4, 6]


@pytest.mark.parametrize("fmt", ["fp8", "nvfp4"])
@pytest.mark.parametrize("epilogue", ["none", "add", "silu_mul"])
def test_a_quantised_product_is_the_product_with_the_dequantised_matrix(epilogue, fmt):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 64, generator=g)
    w = torch.randn(2 * 48 if epilogue == "silu_mul" else 48, 64, generator=g)
    residual = torch.randn(5, 48, generator=g) if epilogue == "add" else None
    pair = quant.quantize(w, fmt)
    got = skinny_gemm.linear(x, pair, epilogue, residual)
    expected = skinny_gemm.reference(x, quant.dequantize(*pair), epilogue, residual)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    assert not torch.allclose(F.linear(x, w), F.linear(x, quant.dequantize(*pair)), atol=1e-4)   # it did quantise


@torch.inference_mode()
@pytest.mark.parametrize("fmt, gap", [("fp8", 0.05), ("nvfp4", 0.25)])
def test_a_quantised_engine_follows_its_own_dequantised_model(model, fmt, gap):
    """Prefill and decode with quantised linear layers = a plain forward of the model whose matrices are the
    dequantised ones; and that model stays close to the original (NVFP4's 4 bits less so than FP8's 8)."""
    engine = AREngine(model, BYTE_LAYOUT, slots=2, kv_tokens=1024, weight_format=fmt)
    prompt, fed = [256, 5, 9, 200, 33, 77, 1], [12, 460, 99, 3, 250, 17, 8, 120]
    steps = [engine.prefill(0, prompt)] + [engine.decode({0: t})[0] for t in fed]
    twin = copy.deepcopy(model)
    for plain, w in zip(branch_weights(twin, AR), engine.step_weights):
        for name in ("qkv", "o", "gate_up", "down"):          # the module's linears are views of these
            getattr(plain, name).copy_(quant.dequantize(*getattr(w, name)))
    hidden, _ = ar_prefill(twin, torch.tensor(prompt + fed))
    expected = logits(twin, hidden)[0, len(prompt) - 1:]
    torch.testing.assert_close(torch.stack(steps), expected, atol=1e-4, rtol=0)
    hidden, _ = ar_prefill(model, torch.tensor(prompt + fed))
    original = logits(model, hidden)[0, len(prompt) - 1:]
    assert 0 < (torch.stack(steps) - original).abs().max() < gap * original.abs().max()


@torch.inference_mode()
@pytest.mark.parametrize("weights, kv", [("fp8", "bf16"), ("bf16", "fp8"), ("fp8", "fp8"), ("nvfp4", "bf16"),
                                         ("fp8-chain", "bf16")])
def test_quantised_engines_are_batch_invariant(model, weights, kv):
    s = Sampling(1.0, 0.95, 100, 1.2, 50, 24, 24)
    requests = [ARRequest(k, "semantic", tuple([256] + list(range(40, 40 + 3 * seed)) + [464]), s, seed)
                for k, seed in (("a", 1), ("b", 2), ("c", 3))]

    def engine():
        return AREngine(model, BYTE_LAYOUT, slots=6, kv_tokens=3072, weight_format=weights.removesuffix("-chain"),
                        kv_format=kv, chain=weights.endswith("-chain"))
    assert engine().w8a8 == weights.endswith("-chain")
    together = {r.key: r.ids for r in engine().generate(requests)}
    for r in requests:
        alone = engine()
        alone.free_slots.rotate(2)
        (result,) = alone.generate([r])
        assert np.array_equal(result.ids, together[r.key])


def test_an_unknown_weight_format_is_refused(model):
    with pytest.raises(ValueError, match="weight_format"):
        AREngine(model, BYTE_LAYOUT, slots=2, kv_tokens=512, weight_format="int3")


@torch.inference_mode()
def test_an_fp8_kv_cache_stores_e4m3_and_stays_close(model):
    """kv_format fp8: the pools hold e4m3; prefill and decode read every key as stored, so the logits equal a
    forward whose keys and values are rounded through e4m3 — close to the BF16-cache ones, not equal."""
    prompt, fed = [256, 5, 9, 200, 33, 77, 1], [12, 460, 99, 3, 250, 17, 8, 120]
    out = {}
    for kv_format in ("bf16", "fp8"):
        engine = AREngine(model, BYTE_LAYOUT, slots=2, kv_tokens=1024, kv_format=kv_format)
        out[kv_format] = torch.stack([engine.prefill(0, prompt)] + [engine.decode({0: t})[0] for t in fed])
        assert engine.kv.k.dtype == (torch.float8_e4m3fn if kv_format == "fp8" else model.lm_head.weight.dtype)
    gap = (out["fp8"] - out["bf16"]).abs().max()
    assert 0 < gap < 0.05 * out["bf16"].abs().max()


@torch.inference_mode()
def test_w8a8_chain_quantises_each_row_on_its_own():
    """The W8A8 layer chain's maths (layer_chain_w8a8.reference): each product's input rounded to e4m3 per row with
    its own scale, so a row gives the same bits alone and batched, with every row's values within e4m3's half-step
    of the input; the layer stays close to the same FP8 weights with unquantised activations (W8A16)."""
    from stages import layer_chain, layer_chain_w8a8

    g = torch.Generator().manual_seed(3)
    h, i, q, eps = 64, 96, 48, 1e-6
    u = torch.randn(4, h, generator=g) * torch.tensor([[1e-3], [1.0], [30.0], [0.0]])
    values, scale = layer_chain_w8a8.quantize_rows(u)
    assert scale[3] == 0 and not values[3].float().any()
    back = values.float() * scale[:, None]
    assert ((back - u).abs() <= u.abs() * 2 ** -4 + scale[:, None] * 2 ** -10).all()   # e4m3: 3 mantissa bits
    weights = {name: quant.quantize_fp8(torch.randn(*shape, generator=g) * shape[1] ** -0.5)
               for name, shape in (("o", (h, h)), ("gate_up", (2 * i, h)), ("down", (h, i)), ("qkv", (q, h)))}
    paired = tuple(layer_chain.pair_rows(t) for t in weights["gate_up"])
    gamma_post, gamma_in = 1 + 0.1 * torch.randn(h, generator=g), 1 + 0.1 * torch.randn(h, generator=g)
    attn, x = torch.randn(5, h, generator=g), torch.randn(5, h, generator=g)

    def chain(a, r):
        return layer_chain_w8a8.reference(a, r, weights["o"], paired, weights["down"], weights["qkv"], gamma_post,
                                          gamma_in, eps)
    out, nxt = chain(attn, x)
    alone = chain(attn[2:3], x[2:3])
    assert torch.equal(out[2:3], alone[0]) and torch.equal(nxt[2:3], alone[1])
    last = layer_chain_w8a8.reference(attn, x, weights["o"], paired, weights["down"], None, gamma_post, None, eps)
    assert torch.equal(last[0], out) and last[1].shape == (5, 0)

    def plain(name):                        # the same FP8 weights, activations unquantised
        return quant.dequantize(*weights[name])
    mid = skinny_gemm.reference(attn, plain("o"), "add", x)
    normed = mid * torch.rsqrt(mid.pow(2).mean(1, keepdim=True) + eps) * gamma_post
    want = skinny_gemm.reference(skinny_gemm.reference(normed, plain("gate_up"), "silu_mul"), plain("down"), "add",
                                 mid)
    gap = (out - want).abs().max()
    assert 0 < gap < 0.1 * want.abs().max()


@torch.inference_mode()
def test_the_w8a8_chain_engine_stays_close_to_the_w8a16_engine(model):
    """The same FP8 weights with the W8A8 numerics (activations quantised per row) and without (W8A16): teacher-forced
    logits close, but not the same."""
    prompt, fed = [256, 5, 9, 200, 33, 77, 1], [12, 460, 99, 3, 250, 17, 8, 120]
    out = {}
    for chain in (False, True):
        engine = AREngine(model, BYTE_LAYOUT, slots=2, kv_tokens=1024, weight_format="fp8", chain=chain)
        assert engine.w8a8 == chain
        out[chain] = torch.stack([engine.prefill(0, prompt)] + [engine.decode({0: t})[0] for t in fed])
    gap = (out[True] - out[False]).abs().max()
    assert 0 < gap < 0.1 * out[False].abs().max()
