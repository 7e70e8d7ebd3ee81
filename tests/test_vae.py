"""The Oobleck decoder on the tiny random checkpoint: layout, strict and selective loading, lengths, halo, tiling."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from stages import vae
from stages.checkpoint import CheckpointError, write_tensors
from stages.config import from_toml

CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "models"
TINY = from_toml(CONFIGS / "tiny.toml").vae
RELEASE = from_toml(CONFIGS / "yue2-3b.toml").vae


def _write(directory: Path, tensors: dict[str, torch.Tensor]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    write_tensors(directory / "model.safetensors", tensors, {"format": "pt"})
    return directory


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("vae"), vae.random_vae_tensors(TINY, seed=0))


@pytest.fixture(scope="module")
def decoder(tiny_dir) -> vae.OobleckDecoder:
    return vae.load_decoder(tiny_dir, TINY)


def _latents(frames: int, seed: int = 1) -> torch.Tensor:      # [1, latent_dim, T]
    return torch.randn(1, TINY.latent_dim, frames, generator=torch.Generator().manual_seed(seed))


def _params(cfg, prefix: str) -> int:
    return sum(math.prod(shape) for name, shape in vae.vae_shapes(cfg).items() if name.startswith(prefix))


# ---- layout ---------------------------------------------------------------------------------------------------

def test_release_param_counts_from_shapes():
    decoder, encoder = _params(RELEASE, "decoder."), _params(RELEASE, "encoder.")
    assert abs(decoder - 66.37e6) <= 0.01e6
    assert abs(encoder - 66.24e6) <= 0.01e6
    assert (decoder + encoder) * 4 / 2**30 == pytest.approx(0.494, abs=1e-3)
    assert 60e3 <= _params(TINY, "decoder.") <= 80e3


def test_release_layout_matches_model_md():
    shapes = vae.vae_shapes(RELEASE)
    assert shapes["decoder.layers.0.weight_v"] == (2048, 64, 7)
    assert shapes["decoder.layers.0.weight_g"] == (2048, 1, 1)
    assert shapes["decoder.layers.1.layers.0.alpha"] == (2048,)
    assert shapes["decoder.layers.1.layers.1.weight_v"] == (2048, 1024, 12)     # ConvTranspose: [in, out, 2s]
    assert shapes["decoder.layers.1.layers.1.weight_g"] == (2048, 1, 1)
    assert shapes["decoder.layers.1.layers.1.bias"] == (1024,)
    assert shapes["decoder.layers.2.layers.4.layers.1.weight_v"] == (512, 512, 7)
    assert shapes["decoder.layers.6.layers.3.layers.3.weight_v"] == (64, 64, 1)
    assert shapes["decoder.layers.7.beta"] == (64,)
    assert shapes["decoder.layers.8.weight_v"] == (2, 64, 7)
    assert "decoder.layers.8.bias" not in shapes
    assert shapes["encoder.layers.0.weight_v"] == (64, 2, 7)
    assert shapes["encoder.layers.1.layers.2.layers.1.weight_v"] == (64, 64, 7)
    assert shapes["encoder.layers.6.layers.3.alpha"] == (1024,)
    assert shapes["encoder.layers.6.layers.4.weight_v"] == (2048, 1024, 12)     # Conv: [out, in, 2s]
    assert shapes["encoder.layers.8.weight_v"] == (128, 2048, 3)
    assert vae.decoder_names(RELEASE) == [n for n in shapes if n.startswith("decoder.")]


def test_random_tensors_are_deterministic():
    a, b, c = (vae.random_vae_tensors(TINY, seed) for seed in (3, 3, 4))
    assert list(a) == list(vae.vae_shapes(TINY))
    assert all(t.dtype == torch.float32 and tuple(t.shape) == vae.vae_shapes(TINY)[n] for n, t in a.items())
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert not torch.equal(a["decoder.layers.0.weight_v"], c["decoder.layers.0.weight_v"])


# ---- halo and lengths -----------------------------------------------------------------------------------------

def test_required_halo_is_twelve():
    assert vae.required_halo(TINY) == 12
    assert vae.required_halo(RELEASE) == 12


@pytest.mark.parametrize("frames", [1, 2, 7, 30])
def test_output_length(decoder, frames):
    with torch.inference_mode():
        y = decoder(_latents(frames))
    assert y.shape == (1, TINY.audio_channels, 1920 * frames - 64)
    assert decoder.output_length(frames) == 1920 * frames - 64


def test_tiled_equals_full(decoder):
    z = _latents(37)
    with torch.inference_mode():
        full = decoder(z)
        for halo in (16, 12):
            tiled = vae.decode_tiled(decoder, z, core=8, halo=halo)
            assert tiled.shape == full.shape
            torch.testing.assert_close(tiled, full, atol=1e-5, rtol=0)
        # 12 is tight: one frame less leaves a measurable seam (unchecked path, for the proof only)
        seam = (vae._decode_tiles(decoder, z, 8, 11) - full).abs().max().item()
        exact = (vae.decode_tiled(decoder, z, core=8, halo=12) - full).abs().max().item()
        assert seam > 10 * exact


def test_short_halo_is_an_error(decoder):
    with pytest.raises(ValueError, match="halo 11"):
        vae.decode_tiled(decoder, _latents(20), core=8, halo=11)


# ---- loading --------------------------------------------------------------------------------------------------

def test_missing_decoder_tensor(tmp_path):
    tensors = vae.random_vae_tensors(TINY, seed=0)
    del tensors["decoder.layers.8.weight_g"]
    with pytest.raises(CheckpointError, match=r"missing tensor 'decoder\.layers\.8\.weight_g'"):
        vae.load_decoder(_write(tmp_path, tensors), TINY)


def test_unexpected_tensor(tmp_path):
    tensors = vae.random_vae_tensors(TINY, seed=0)
    tensors["decoder.layers.8.bias"] = torch.zeros(2)           # the output conv has no bias
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'decoder\.layers\.8\.bias'"):
        vae.load_decoder(_write(tmp_path, tensors), TINY)


@pytest.mark.parametrize("name", ["decoder.layers.3.layers.1.weight_v", "encoder.layers.2.layers.4.bias"])
def test_misshaped_tensor(tmp_path, name):
    tensors = vae.random_vae_tensors(TINY, seed=0)
    tensors[name] = torch.zeros(*tensors[name].shape[:-1], tensors[name].shape[-1] + 1)
    with pytest.raises(CheckpointError, match=rf"tensor '{name}' has shape"):
        vae.load_decoder(_write(tmp_path, tensors), TINY)


def test_load_reads_only_decoder_tensors(tiny_dir, decoder, tmp_path, monkeypatch):
    read: dict[str, torch.Tensor] = {}
    real = vae.load_tensors

    def recording(path, names, **kwargs):      # the real reader, noting what it hands back
        out = real(path, names, **kwargs)
        read.update(out)
        return out

    monkeypatch.setattr(vae, "load_tensors", recording)
    vae.load_decoder(tiny_dir, TINY)
    assert sorted(read) == sorted(vae.decoder_names(TINY))
    # and a decoder-only file (no encoder.* at all) gives the very same decoder
    tensors = vae.random_vae_tensors(TINY, seed=0)
    only = vae.load_decoder(_write(tmp_path, {n: t for n, t in tensors.items() if n.startswith("decoder.")}), TINY)
    for (name, a), (_, b) in zip(decoder.state_dict().items(), only.state_dict().items()):
        assert torch.equal(a, b), name


def test_weight_norm_is_folded(decoder):
    tensors = vae.random_vae_tensors(TINY, seed=0)
    w = decoder.layers[1].layers[1].weight                      # ConvTranspose: norm over dims 1, 2 per input channel
    assert w.dtype == torch.float32 and not w.requires_grad
    g = tensors["decoder.layers.1.layers.1.weight_g"].flatten()
    torch.testing.assert_close(w.flatten(1).norm(dim=1), g)


@pytest.mark.parametrize("field, value", [("use_filter", True), ("snake_type", "snakebeta"),
                                          ("release_variant", "legacy"), ("final_tanh", True),
                                          ("use_snake", False)])
def test_unsupported_config(tiny_dir, field, value):
    with pytest.raises(ValueError, match=field):
        vae.load_decoder(tiny_dir, dataclasses.replace(TINY, **{field: value}))


# ---- audio ----------------------------------------------------------------------------------------------------

def test_decode_audio(decoder):
    latents = _latents(37)[0].T.numpy()                          # [N, latent_dim], as the acoustic stage emits
    torch.backends.cudnn.allow_tf32 = True
    audio = vae.decode_audio(decoder, latents, core=8, halo=16)
    assert torch.backends.cudnn.allow_tf32                      # the caller's setting is restored
    assert audio.dtype == np.float32 and audio.shape == (1920 * 37 - 64, 2)
    assert np.abs(audio).max() <= 1.0
    assert np.abs(audio).mean() > 0.05                          # not silent
    assert np.mean(np.abs(audio) >= 1.0) < 0.01                 # not clipped
    with torch.inference_mode():
        full = decoder(torch.from_numpy(latents).T[None]).clamp(-1, 1)[0].T.numpy()
    np.testing.assert_allclose(audio, full, atol=1e-5, rtol=0)
