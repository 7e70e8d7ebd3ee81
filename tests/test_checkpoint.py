"""Strict, selective checkpoint loading; config.json ↔ TOML; random checkpoints in the released layout."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from safetensors import safe_open

from stages.checkpoint import CheckpointError, load_tensors, read_header, write_tensors
from stages.config import ConfigError, from_checkpoint, from_toml
from stages.transformer import AR, HEAD, NAR, expected_shapes
from stages.weights import ALL_PARTS, load_model

FULL = 12 + 22 * 2   # tiny: 2 layers


def test_written_checkpoint_has_the_released_layout(tiny_ckpt_dir, tiny_cfg):
    header = read_header(tiny_ckpt_dir / "model" / "model.safetensors")
    assert header == expected_shapes(tiny_cfg.model)
    assert len(header) == FULL
    assert header["latent_pos_embed.pe"] == (512, 64)
    assert sorted(p.name for p in (tiny_ckpt_dir / "model").iterdir()) == [
        "config.json", "generation_config.json", "model.safetensors"]
    vae = read_header(tiny_ckpt_dir / "vae" / "model.safetensors")
    assert any(k.startswith("encoder.") for k in vae) and "decoder.layers.8.weight_v" in vae
    assert json.loads((tiny_ckpt_dir / "model" / "config.json").read_text())["model_type"] == "yue2"


def test_release_shapes_match_the_published_parameter_counts():
    cfg = from_toml("configs/models/yue2-3b.toml")
    full = expected_shapes(cfg.model)
    ar_only = expected_shapes(cfg.model, frozenset({AR, HEAD}))
    count = lambda shapes: sum(math.prod(s) for s in shapes.values())   # noqa: E731
    assert len(full) == 628 and len(ar_only) == 311
    assert count(ar_only) == 2_165_957_632
    assert count(full) - 24576 * 2048 == 3_580_352_576


def test_config_json_reads_back_as_the_toml_dataclass(tiny_ckpt_dir, tiny_cfg):
    assert from_checkpoint(tiny_ckpt_dir / "model", tiny_ckpt_dir / "vae") == tiny_cfg


def test_unknown_and_missing_toml_keys_are_named(tmp_path):
    text = open("configs/models/tiny.toml").read()
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("head_dim = 16", "head_dim = 16\nhead_dims = 3"))
    with pytest.raises(ConfigError, match=r"bad.toml \[model\]: unknown key\(s\) head_dims"):
        from_toml(bad)
    bad.write_text(text.replace("codebook = 64\n", ""))
    with pytest.raises(ConfigError, match=r"\[tokens\]: missing key 'codebook'"):
        from_toml(bad)


def test_ar_stage_reads_no_nar_tensor(tiny_ckpt_dir, tiny_cfg, tmp_path):
    ar = load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, HEAD})
    names = set(ar.state_dict())
    assert not any("nar_" in n or n.startswith(("llm2vae", "vae2llm", "time_embedder", "latent_pos")) for n in names)
    # An AR-only file (the 311-tensor subset of the release) is enough for the AR stages...
    src = tiny_ckpt_dir / "model" / "model.safetensors"
    with safe_open(str(src), framework="pt") as f:
        ar_tensors = {k: f.get_tensor(k) for k in f.keys() if k in names}
    ar_dir = tmp_path / "ar-only"
    ar_dir.mkdir()
    write_tensors(ar_dir / "model.safetensors", ar_tensors, {"format": "pt"})
    again = load_model(ar_dir, tiny_cfg, {AR, HEAD})
    for k, v in ar.state_dict().items():
        assert torch.equal(v, again.state_dict()[k])
    # ...and the acoustic stage names the first tensor it misses.
    with pytest.raises(CheckpointError, match=r"missing tensor 'latent_pos_embed.pe'|missing tensor 'llm2vae"):
        load_model(ar_dir, tiny_cfg, {AR, NAR})
    assert set(load_tensors(src, ["lm_head.weight", "model.norm.weight"], dtype=torch.float32)) == {
        "lm_head.weight", "model.norm.weight"}


def _rewrite(src, dst, edit):
    with safe_open(str(src), framework="pt") as f:
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    edit(tensors)
    write_tensors(dst, tensors, {"format": "pt"})


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "missing tensor 'model.layers.1.mlp.up_proj.weight'"),
    (lambda t: t.__setitem__("model.layers.0.extra.weight", torch.zeros(2)),
     "unexpected tensor 'model.layers.0.extra.weight'"),
    (lambda t: t.__setitem__("model.layers.0.self_attn.k_proj.weight", torch.zeros(33, 64)),
     r"'model.layers.0.self_attn.k_proj.weight' has shape \[33, 64\], expected \[32, 64\]"),
])
def test_strict_loading_names_the_bad_tensor(tiny_ckpt_dir, tiny_cfg, tmp_path, edit, message):
    shutil.copy(tiny_ckpt_dir / "model" / "config.json", tmp_path / "config.json")
    _rewrite(tiny_ckpt_dir / "model" / "model.safetensors", tmp_path / "model.safetensors", edit)
    with pytest.raises(CheckpointError, match=message):
        load_model(tmp_path, tiny_cfg, ALL_PARTS)


def test_missing_pe_is_recomputed(tiny_ckpt_dir, tiny_cfg, tmp_path):
    _rewrite(tiny_ckpt_dir / "model" / "model.safetensors", tmp_path / "model.safetensors",
             lambda t: t.pop("latent_pos_embed.pe"))
    with_pe = load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, NAR})
    without = load_model(tmp_path, tiny_cfg, {AR, NAR})
    assert torch.equal(with_pe.latent_pos_embed.pe, without.latent_pos_embed.pe)
