"""Quantised AR checkpoints (stages/ar_checkpoint.py) on the tiny model: written with compressed-tensors, read by
transformers + compressed-tensors as a Qwen3 model, read back by us into the AR engine, and refused clearly when
they do not fit the MoT checkpoint."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from typer.testing import CliRunner

from farm.cli import app
from farm.errors import UserError

from stages import ar_checkpoint, quant
from stages.ar import AREngine, ARRequest
from stages.checkpoint import CheckpointError
from stages.config import Sampling
from stages.transformer import AR, HEAD
from stages.weights import load_model

from .farm_album import same_content


@pytest.fixture(scope="module")
def fp8_dir(tiny_ckpt_dir, tiny_cfg, tmp_path_factory):
    return ar_checkpoint.quantize_checkpoint(tiny_ckpt_dir / "model", tiny_cfg,
                                             tmp_path_factory.mktemp("q") / "ar-fp8", "fp8")


@pytest.fixture(scope="module")
def nvfp4_dir(tiny_ckpt_dir, tiny_cfg, tmp_path_factory):
    return ar_checkpoint.quantize_checkpoint(tiny_ckpt_dir / "model", tiny_cfg,
                                             tmp_path_factory.mktemp("q") / "ar-nvfp4", "nvfp4")


@pytest.fixture(params=["fp8", "nvfp4"])
def quantized_dir(request):
    return request.param, request.getfixturevalue(f"{request.param}_dir")


def test_transformers_reads_our_fp8_checkpoint_as_a_compressed_qwen3(fp8_dir, tiny_cfg):
    """The ecosystem's reader (transformers with compressed-tensors) loads our directory as Qwen3ForCausalLM with
    FP8 weights equal to ours, and its W8A8 forward is close to our W8A16 step."""
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(fp8_dir, dtype=torch.float32)
    assert type(hf).__name__ == "Qwen3ForCausalLM"
    model, fmt = ar_checkpoint.load_quantized_ar(fp8_dir, tiny_cfg)
    assert fmt == "fp8"
    engine = AREngine(model, tiny_cfg.tokens, slots=2, kv_tokens=1024, weight_format="fp8")
    for layer, ours in zip(hf.model.layers, engine.step_weights):
        attn, mlp = layer.self_attn, layer.mlp
        rows = [attn.q_proj, attn.k_proj, attn.v_proj]
        theirs = torch.cat([m.weight.float() * m.weight_scale.float() for m in rows])
        assert rows[0].weight.dtype == quant.FP8
        torch.testing.assert_close(theirs, quant.dequantize(*ours.qkv), rtol=0, atol=0)
        theirs = torch.cat([m.weight.float() * m.weight_scale.float() for m in (mlp.gate_proj, mlp.up_proj)])
        torch.testing.assert_close(theirs, quant.dequantize(*ours.gate_up), rtol=0, atol=0)
    ids = [256, 5, 9, 200, 33, 77, 1]
    with torch.inference_mode():
        reference = hf(torch.tensor([ids])).logits[0, 2:]
        steps = torch.stack([engine.prefill(0, ids[:3])] + [engine.decode({0: t})[0] for t in ids[3:]])
    # theirs also quantises the activations to FP8 (W8A8): close, not equal
    assert (steps - reference).abs().max() < 0.1 * reference.abs().max()


def test_transformers_reads_our_nvfp4_checkpoint_as_a_compressed_qwen3(nvfp4_dir, tiny_cfg):
    """The same for NVFP4 W4A16: transformers + compressed-tensors keep our file's packed values and decompress
    them (in BF16) to the matrices ours stand for, and their BF16 forward is close to our step."""
    from compressed_tensors.compressors import NVFP4PackedCompressor
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(nvfp4_dir, dtype=torch.bfloat16)     # it decompresses in BF16
    assert type(hf).__name__ == "Qwen3ForCausalLM"
    model, fmt = ar_checkpoint.load_quantized_ar(nvfp4_dir, tiny_cfg)
    assert fmt == "nvfp4"
    engine = AREngine(model, tiny_cfg.tokens, slots=2, kv_tokens=1024, weight_format="nvfp4")

    def theirs(module):
        stored = {k: getattr(module, k) for k in ("weight_packed", "weight_scale", "weight_global_scale")}
        return NVFP4PackedCompressor.decompress(stored, module.quantization_scheme)["weight"].float()
    for layer, ours in zip(hf.model.layers, engine.step_weights):
        attn, mlp = layer.self_attn, layer.mlp
        assert attn.q_proj.weight_packed.dtype == torch.uint8
        for modules, mine in (((attn.q_proj, attn.k_proj, attn.v_proj), ours.qkv),
                              ((mlp.gate_proj, mlp.up_proj), ours.gate_up), ((mlp.down_proj,), ours.down)):
            torch.testing.assert_close(torch.cat([theirs(m) for m in modules]), quant.dequantize(*mine),
                                       rtol=2 ** -8, atol=0)
    ids = [256, 5, 9, 200, 33, 77, 1]
    with torch.inference_mode():
        reference = hf(torch.tensor([ids])).logits[0, 2:].float()
        steps = torch.stack([engine.prefill(0, ids[:3])] + [engine.decode({0: t})[0] for t in ids[3:]])
    assert (steps - reference).abs().max() < 0.05 * reference.abs().max()      # theirs runs in BF16


@torch.inference_mode()
def test_an_engine_on_the_checkpoint_equals_an_engine_quantising_the_mot(quantized_dir, tiny_ckpt_dir, tiny_cfg):
    fmt, path = quantized_dir
    from_file = AREngine(ar_checkpoint.load_quantized_ar(path, tiny_cfg)[0], tiny_cfg.tokens, slots=4,
                         kv_tokens=2048, weight_format=fmt)
    mot = load_model(tiny_ckpt_dir / "model", tiny_cfg, {AR, HEAD})
    on_load = AREngine(mot, tiny_cfg.tokens, slots=4, kv_tokens=2048, weight_format=fmt)
    for a, b in zip(from_file.step_weights, on_load.step_weights):
        for name in ("qkv", "o", "gate_up", "down"):
            for x, y in zip(getattr(a, name), getattr(b, name)):    # the stored values and scales themselves
                assert x.dtype == y.dtype and torch.equal(x.view(torch.uint8) if x.element_size() == 1 else x,
                                                          y.view(torch.uint8) if y.element_size() == 1 else y)
    s = Sampling(1.0, 0.95, 100, 1.2, 50, 30, 30)
    request = ARRequest("a", "semantic", (256, 40, 41, 42, 464), s, seed=7)
    (x,), (y,) = from_file.generate([request]), on_load.generate([request])
    assert np.array_equal(x.ids, y.ids) and len(x.ids) == 30


def _broken(fp8_dir, tmp_path, edit_config=None, edit_tensors=None):
    bad = tmp_path / "bad"
    shutil.copytree(fp8_dir, bad)
    if edit_config:
        data = json.loads((bad / "config.json").read_text())
        edit_config(data)
        (bad / "config.json").write_text(json.dumps(data))
    if edit_tensors:
        tensors = load_file(str(bad / "model.safetensors"))
        edit_tensors(tensors)
        save_file(tensors, str(bad / "model.safetensors"))
    return bad


@pytest.mark.parametrize("edit_config, edit_tensors, message", [
    (lambda d: d.update(model_type="llama"), None, "model_type must be 'qwen3'"),
    (lambda d: d.update(hidden_size=128), None, "hidden_size is 128, the MoT checkpoint has 64"),
    (lambda d: d["quantization_config"].update(format="pack-quantized"), None, "format 'pack-quantized' is not supported"),
    (lambda d: d["quantization_config"]["config_groups"]["group_0"]["weights"].update(strategy="tensor"), None,
     "one scale per output channel"),
    (lambda d: d.pop("quantization_config"), None, "quant_method must be 'compressed-tensors'"),
    (None, lambda t: t.pop("model.layers.1.mlp.down_proj.weight_scale"), "missing tensor 'model.layers.1.mlp.down_proj.weight_scale'"),
    (None, lambda t: t.update({"model.layers.0.self_attn.o_proj.weight": t["model.layers.0.self_attn.o_proj.weight"].float()}),
     "'model.layers.0.self_attn.o_proj.weight' is torch.float32, expected torch.float8_e4m3fn"),
])
def test_a_checkpoint_that_does_not_fit_is_refused_naming_file_and_field(fp8_dir, tiny_cfg, tmp_path, edit_config,
                                                                        edit_tensors, message):
    bad = _broken(fp8_dir, tmp_path, edit_config, edit_tensors)
    with pytest.raises(CheckpointError, match=None) as info:
        ar_checkpoint.load_quantized_ar(bad, tiny_cfg)
    assert message in str(info.value) and str(bad) in str(info.value)


@pytest.mark.parametrize("edit_config, edit_tensors, message", [
    (lambda d: d["quantization_config"]["config_groups"]["group_0"]["weights"].update(group_size=32), None,
     "FP4 weights with a scale per 16 values"),
    (None, lambda t: t.pop("model.layers.0.mlp.up_proj.weight_global_scale"),
     "missing tensor 'model.layers.0.mlp.up_proj.weight_global_scale'"),
    (None, lambda t: t.update({"model.layers.1.self_attn.k_proj.weight_packed":
                               t["model.layers.1.self_attn.k_proj.weight_packed"].to(torch.int8)}),
     "'model.layers.1.self_attn.k_proj.weight_packed' is torch.int8, expected torch.uint8"),
])
def test_an_nvfp4_checkpoint_that_does_not_fit_is_refused(nvfp4_dir, tiny_cfg, tmp_path, edit_config, edit_tensors,
                                                         message):
    bad = _broken(nvfp4_dir, tmp_path, edit_config, edit_tensors)
    with pytest.raises(CheckpointError) as info:
        ar_checkpoint.load_quantized_ar(bad, tiny_cfg)
    assert message in str(info.value) and str(bad) in str(info.value)


def test_quantize_never_overwrites_and_knows_its_formats(fp8_dir, tiny_ckpt_dir, tiny_cfg, tmp_path):
    with pytest.raises(FileExistsError):
        ar_checkpoint.quantize_checkpoint(tiny_ckpt_dir / "model", tiny_cfg, fp8_dir)
    with pytest.raises(CheckpointError, match="format must be one of fp8, nvfp4"):
        ar_checkpoint.quantize_checkpoint(tiny_ckpt_dir / "model", tiny_cfg, tmp_path / "x", "int3")
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob(".x*"))


def test_the_album_spec_can_name_the_ar_options_and_the_flags_win(fp8_dir, tiny_ckpt_dir, tmp_path):
    """`ar_checkpoint` (relative to the spec) and `kv_cache` in an album spec reach the render's options and the
    stage keys' identity before anything runs; --ar-checkpoint / --kv-cache override them."""
    from farm.driver import RenderOptions, prepare

    shutil.copytree(fp8_dir, tmp_path / "ar")
    spec = tmp_path / "album.toml"
    spec.write_text('title = "T"\nar_checkpoint = "ar"\nkv_cache = "fp8"\n[[tracks]]\ntitle = "One"\n'
                    'lyrics = "la la"\nstyle = "pop"\n')
    *_, identity, jobs, _, opts = prepare(spec, RenderOptions(out=str(tmp_path / "a"), model=str(tiny_ckpt_dir)))
    assert opts.ar_checkpoint == (tmp_path / "ar").resolve() and opts.kv_cache == "fp8"
    assert identity["ar"]["format"] == "fp8" and identity["ar"]["kv_cache"] == "fp8"
    *_, plain, jobs_bf16, _, opts = prepare(spec, RenderOptions(out=str(tmp_path / "b"), model=str(tiny_ckpt_dir),
                                                                kv_cache="bf16"))
    assert opts.kv_cache == "bf16" and "kv_cache" not in plain["ar"]
    assert jobs[0].stage_keys["plan"] != jobs_bf16[0].stage_keys["plan"]
    with pytest.raises(UserError, match="--ar-format bf16: the AR checkpoint holds fp8 weights"):
        prepare(spec, RenderOptions(out=str(tmp_path / "c"), model=str(tiny_ckpt_dir), ar_format="bf16"))


def test_ar_format_quantises_the_models_own_weights_and_enters_the_keys(tiny_ckpt_dir, tmp_path):
    """`ar_format = "fp8"` without a checkpoint: the AR engines quantise the MoT's AR weights when they load; the
    format enters the identity (and every stage key), and --ar-format overrides the album's."""
    from farm.driver import RenderOptions, prepare

    spec = tmp_path / "album.toml"
    spec.write_text('title = "T"\nar_format = "fp8"\n[[tracks]]\ntitle = "One"\nlyrics = "la la"\nstyle = "pop"\n')
    *_, identity, jobs, _, opts = prepare(spec, RenderOptions(out=str(tmp_path / "a"), model=str(tiny_ckpt_dir)))
    assert opts.ar_format == "fp8" and identity["ar"] == {"format": "fp8"}
    *_, plain, jobs_bf16, _, opts = prepare(spec, RenderOptions(out=str(tmp_path / "b"), model=str(tiny_ckpt_dir),
                                                                ar_format="bf16"))
    assert opts.ar_format == "bf16" and "ar" not in plain
    assert all(jobs[0].stage_keys[s] != jobs_bf16[0].stage_keys[s] for s in jobs[0].stage_keys)


def test_farm_song_with_fp8_ar_weights_says_so(tiny_ckpt_dir, tmp_path):
    lyrics = tmp_path / "lyrics.txt"
    lyrics.write_text("[verse]\nla la\n")
    out = tmp_path / "song"
    r = CliRunner().invoke(app, ["song", "--model", str(tiny_ckpt_dir), "--style", "pop", "--lyrics-file",
                                 str(lyrics), "--out", str(out), "--max-semantic-tokens", "24", "--ar-format", "fp8"])
    assert r.exit_code == 0, r.output
    settings = json.loads((out / "settings.json").read_text())
    assert settings["checkpoint"]["ar"] == {"format": "fp8"}


def test_farm_song_renders_end_to_end_from_a_quantised_checkpoint(quantized_dir, tiny_ckpt_dir, tmp_path):
    """`farm song --ar-checkpoint DIR` (FP8 and NVFP4 files written by `farm quantize`): the whole song renders from
    the checkpoint's AR weights, settings.json names the format, and the audio equals the song whose engines
    quantise the MoT's own weights on load (`--ar-format`): the files hold exactly those values."""
    fmt, path = quantized_dir
    lyrics = tmp_path / "lyrics.txt"
    lyrics.write_text("[verse]\nla la\n")
    songs = {}
    for name, flags in (("file", ["--ar-checkpoint", str(path)]), ("on-load", ["--ar-format", fmt])):
        out = tmp_path / name
        r = CliRunner().invoke(app, ["song", "--model", str(tiny_ckpt_dir), "--style", "pop", "--lyrics-file",
                                     str(lyrics), "--out", str(out), "--max-semantic-tokens", "24", *flags])
        assert r.exit_code == 0, r.output
        assert json.loads((out / "settings.json").read_text())["checkpoint"]["ar"]["format"] == fmt
        songs[name] = out
    assert same_content("audio.flac", (songs["file"] / "audio.flac").read_bytes(),
                        (songs["on-load"] / "audio.flac").read_bytes())
    assert (songs["file"] / "audio.flac").stat().st_size > 1000
