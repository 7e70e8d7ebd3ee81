"""The decoder's convolutions as channels-last GEMMs (stages/vae_tf32x3.py), checked on the CPU through the
reference GEMM: the layout arithmetic (taps, dilation, padding, a transposed conv as phases side by side, the
residual) against the module itself. The kernel runs under Triton's interpreter in test_triton_interpreted.py and
against FP64 on the GPU in test_gpu.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from stages import vae, vae_tf32x3 as tc
from stages.config import VaeConfig

# Widths 8 … 64: every conv input a multiple of 8, as the kernel needs (the tiny model's 2-channel VAE is not).
SMALL = VaeConfig(sample_rate=48000, audio_channels=2, latent_dim=8, encoder_latent_dim=16, channels=8,
                  c_mults=(1, 2, 4, 8), strides=(2, 3, 4, 5), decode_core_frames=8, decode_halo_frames=16)


@pytest.fixture(scope="module")
def small_decoder() -> vae.OobleckDecoder:
    decoder = vae.OobleckDecoder(SMALL)
    raw = {k: v for k, v in vae.random_vae_tensors(SMALL, 0).items() if k.startswith("decoder.")}
    decoder.load_state_dict(vae._fold(raw), strict=True)
    g = torch.Generator().manual_seed(1)
    for name, p in decoder.named_parameters():        # snakes away from α = β = 1, so a mixed-up channel shows
        if name.endswith(("alpha", "beta")):
            p.data = 0.3 * torch.randn(p.shape, generator=g)
    return decoder.eval().requires_grad_(False)


def test_split_is_exact_and_keeps_tf32_bits():
    x = torch.randn(10_000) * torch.logspace(-20, 20, 10_000)
    hi, lo = tc.split(x)
    assert torch.equal(hi + lo, x)
    assert (hi.view(torch.int32) & 0x1FFF == 0).all()                 # 10 stored mantissa bits, as TF32
    assert (lo.abs() <= x.abs() * 2.0**-11).all()                      # rounded to nearest: half a TF32 step


@torch.inference_mode()
def test_the_gemm_plan_equals_the_decoder(small_decoder):
    z = torch.randn(2, SMALL.latent_dim, 13, generator=torch.Generator().manual_seed(2))
    want = small_decoder(z)
    got = tc.forward(tc.prepare(small_decoder), z)
    assert got.shape == want.shape
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()


@torch.inference_mode()
def test_a_transposed_conv_is_its_phases_side_by_side(small_decoder):
    """Each block's upsampling alone, every stride of SMALL and stride 1, lengths 1 and 9: the output's first and
    last samples come from the zero rows TMA adds around the input."""
    stride_1 = torch.nn.ConvTranspose1d(8, 8, 2, stride=1, padding=1)
    for ct in [block.layers[1] for block in small_decoder.layers[1:-2]] + [stride_1]:
        for length in (1, 9) if ct.stride[0] > 1 else (3, 9):        # stride 1 makes L − 1 samples
            x = torch.randn(1, ct.in_channels, length)
            want = ct(x)
            got = tc.apply(tc.from_conv_transpose(ct), x.transpose(1, 2).contiguous()).transpose(1, 2)
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_only_widths_the_kernel_takes_are_planned(small_decoder, tiny_cfg):
    assert tc.usable(small_decoder)
    with torch.device("meta"):
        assert not tc.usable(vae.OobleckDecoder(tiny_cfg.vae))       # 2-channel layers
    assert tc.default_tiling(2048, 6144) == tc.Tiling(bn=128, bk=32, warps=8)
    assert tc.default_tiling(64, 2).bn == 16 and tc.default_tiling(24, 64).bk == 8


def test_the_plan_is_built_once_per_decoder_and_again_when_its_weights_move(small_decoder):
    import copy

    plan = tc.plan_for(small_decoder)
    assert tc.plan_for(small_decoder) is plan
    twin = copy.deepcopy(small_decoder)
    assert tc.plan_for(twin) is not plan and tc.plan_for(small_decoder) is plan
    tuned = tc.plan_for(small_decoder, {(32, 32, 7): tc.Tiling(bm=64, bn=64)})
    assert tuned is not plan and tc.plan_for(small_decoder) is tuned
    assert tuned.blocks[0][2][0][1].tiling == tc.Tiling(bm=64, bn=64)


def test_a_tiling_whose_channel_block_leaves_a_remainder_is_refused(small_decoder):
    with pytest.raises(ValueError, match=r"channel block \(32\) must divide the conv's input channels \(8\)"):
        tc.from_conv(small_decoder.layers[0], tc.Tiling(bk=32))


def test_descriptor_strides_of_size_1_dimensions_cover_the_next():
    """PyTorch calls a [1, L, C] tile contiguous whatever its batch stride (a transposed latent tile has (C, C, 1),
    a one-frame one (C, 1, 1)); TMA wants 16-byte strides that cover the next dimension."""
    z = torch.randn(240, 64).T[None]                       # as decode_audio builds it: [1, 64, 240]
    tile = z[:, :, 16:176].transpose(1, 2).contiguous()
    assert tile.stride() == (64, 64, 1) and tc._strides(tile) == [160 * 64, 64, 1]
    one = torch.randn(1, 64, 1).transpose(1, 2).contiguous()
    assert one.stride() == (64, 1, 1) and tc._strides(one) == [64, 64, 1]
    wide = torch.randn(3, 5, 8)[:, 1:4]                     # a real batch keeps its strides
    assert tc._strides(wide) == [40, 8, 1]


def test_a_cpu_decode_ignores_tf32x3(small_decoder):
    latents = np.random.default_rng(0).standard_normal((30, SMALL.latent_dim)).astype(np.float32)
    fp32 = vae.decode_audio(small_decoder, latents, 8, 16, "fp32")
    assert np.array_equal(vae.decode_audio(small_decoder, latents, 8, 16, "tf32x3"), fp32)
    assert np.array_equal(vae.decode_audio(small_decoder, latents, 8, 16), fp32)        # the default
