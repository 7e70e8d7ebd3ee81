"""Strict, selective checkpoint loading; config.json ↔ TOML; random checkpoints in the released layout."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from stages.checkpoint import CheckpointError, load_tensors, read_header, write_tensors
from stages.config import ConfigError, from_toml
from stages.config_json import from_checkpoint, model_config_from_json, vae_config_from_json
from stages.transformer import AR, HEAD, NAR, expected_shapes
from stages.weights import ALL_PARTS, load_model, write_configs

FULL = 12 + 22 * 2   # tiny: 2 layers
ROOT = Path(__file__).resolve().parents[1]


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


def released(kind: str) -> dict:
    """The released config.json of docs/model.md §11 (the ```json model / ```json vae blocks)."""
    text = (ROOT / "docs" / "model.md").read_text()
    block = re.search(rf"```json {kind}\n(.*?)```", text, re.S).group(1)
    return json.loads(block)


def key_tree(data):
    return {k: key_tree(v) if isinstance(v, dict) and k.endswith("_config") else None for k, v in data.items()}


def test_yue2_3b_configs_are_the_released_ones(tmp_path):
    """What the writer puts in config.json for yue2-3b is the release's, key for key and value for value; the
    files read back as the TOML dataclass."""
    cfg = from_toml(ROOT / "configs" / "models" / "yue2-3b.toml")
    model_dir, vae_dir = tmp_path / "model", tmp_path / "vae"
    model_dir.mkdir()
    vae_dir.mkdir()
    write_configs(cfg, model_dir, vae_dir)
    assert json.loads((model_dir / "config.json").read_text()) == released("model")
    assert json.loads((vae_dir / "config.json").read_text()) == released("vae")
    model, dtype = model_config_from_json(model_dir / "config.json")
    assert model == cfg.model and dtype == "bfloat16"
    assert vae_config_from_json(vae_dir / "config.json") == cfg.vae


def test_tiny_configs_have_the_released_keys(tiny_ckpt_dir):
    model = json.loads((tiny_ckpt_dir / "model" / "config.json").read_text())
    vae = json.loads((tiny_ckpt_dir / "vae" / "config.json").read_text())
    assert key_tree(model) == key_tree(released("model")) and key_tree(vae) == key_tree(released("vae"))
    assert vae["encoder_config"]["use_snake"] is True and vae["architectures"] == ["YuE2VAE"]


@pytest.mark.parametrize("which, change, message", [
    ("model", lambda d: d.update(num_hiden_layers=d.pop("num_hidden_layers")),
     r"unknown key 'num_hiden_layers' \(did you mean 'num_hidden_layers'\?\)"),
    ("model", lambda d: d.pop("head_dim"), r"missing key\(s\) head_dim"),
    ("model", lambda d: d.update(latent_type="image"), r"latent_type must be 'vae'"),
    ("vae", lambda d: d.update(sample_rat=48000), r"unknown key 'sample_rat' \(did you mean 'sample_rate'\?\)"),
    ("vae", lambda d: d.pop("decode_halo_frames"), r"missing key 'decode_halo_frames'"),
    ("vae", lambda d: d["decoder_config"].update(stride=[2]), r"decoder_config: unknown key 'stride'"),
    ("vae", lambda d: d["encoder_config"].update(antialias_activation=True), r"antialias_activation = True is not"),
    ("vae", lambda d: d.update(latent_dim=32), r"latent_dim 32 differs from decoder_config.latent_dim"),
])
def test_a_wrong_config_json_key_is_refused_naming_file_and_key(tiny_ckpt_dir, tmp_path, which, change, message):
    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_ckpt_dir, ckpt)
    path = ckpt / which / "config.json"
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=re.escape(str(path)) + ".*" + message):
        from_checkpoint(ckpt / "model", ckpt / "vae")


def test_hugging_face_bookkeeping_is_accepted(tiny_ckpt_dir, tmp_path):
    ckpt = tmp_path / "ck"
    shutil.copytree(tiny_ckpt_dir, ckpt)
    path = ckpt / "model" / "config.json"
    data = json.loads(path.read_text())
    data.update(transformers_version="4.57.6", use_cache=True, torch_dtype="float32")
    path.write_text(json.dumps(data))
    assert from_checkpoint(ckpt / "model", ckpt / "vae").model == from_toml(
        ROOT / "configs" / "models" / "tiny.toml").model


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
