"""A released checkpoint's `config.json` files (docs/model.md §11.2 and §11.3) ↔ the dataclasses of config.py.

Read: `from_checkpoint` (the model dir's config.json, its optional generation_config.json, the tokenizer file that
sets the token layout, and the VAE dir's config.json), with every key a field or known Hugging Face bookkeeping, so
a misspelled field is an error naming the file and the key, never silently dropped. Written: `model_json`,
`vae_json`, `generation_json`, what `weights.init_checkpoint` puts beside random weights.
"""
from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from .config import (BYTE_LAYOUT, FULL_LAYOUT, ConfigError, GenerationDefaults, ModelConfig, Sampling, VaeConfig,
                     Yue2Config, from_table)


MODEL_JSON_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                     "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings",
                     "tie_word_embeddings", "latent_dim", "max_latent_frames", "timestep_shift")
# Hugging Face bookkeeping a config.json may carry (the keys the reference's config classes keep besides their
# own): accepted and ignored. Any other key is refused, so a misspelled field is never silently dropped.
HF_BOOKKEEPING = ("model_type", "architectures", "auto_map", "transformers_version", "dtype", "torch_dtype",
                  "return_dict", "output_hidden_states", "output_attentions", "use_cache", "torchscript", "is_decoder",
                  "is_encoder_decoder", "add_cross_attention", "bos_token_id", "eos_token_id", "pad_token_id",
                  "decoder_start_token_id", "attn_implementation", "_name_or_path")
MODEL_ARCHITECTURES = ["YuE2ForCausalLM"]
MODEL_AUTO_MAP = {"AutoConfig": "modeling_yue2.YuE2Config", "AutoModelForCausalLM": "modeling_yue2.YuE2ForCausalLM"}
VAE_JSON_FIELDS = ("sample_rate", "audio_channels", "latent_dim", "downsampling_ratio", "decode_core_frames",
                   "decode_halo_frames", "encoder_config", "decoder_config", "release_variant")
VAE_ENCODER_FIELDS = ("in_channels", "channels", "c_mults", "strides", "latent_dim", "use_snake")
VAE_DECODER_FIELDS = ("out_channels", "channels", "c_mults", "strides", "latent_dim", "use_snake", "snake_type",
                      "use_filter", "final_tanh")
VAE_UNSUPPORTED = ("antialias_activation", "use_nearest_upsample")    # known to the release's loader; must be false
VAE_ARCHITECTURES = ["YuE2VAE"]
VAE_AUTO_MAP = {"AutoConfig": "modeling_vae.YuE2VAEConfig", "AutoModel": "modeling_vae.YuE2VAE"}


def _known_keys(data: dict, known, where: str) -> None:
    """Refuse a key that is neither a field nor bookkeeping, naming the closest known one."""
    import difflib

    for key in data:
        if key not in known:
            near = difflib.get_close_matches(key, list(known), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            raise ConfigError(f"{where}: unknown key {key!r}{hint}")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing (a checkpoint directory needs its config.json)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None


def model_config_from_json(path: Path) -> tuple[ModelConfig, str]:
    """The backbone config and the stored dtype name from a model dir's config.json."""
    data = _read_json(path)
    if data.get("model_type") != "yue2":
        raise ConfigError(f"{path}: model_type must be 'yue2', got {data.get('model_type')!r}")
    _known_keys(data, (*MODEL_JSON_FIELDS, "latent_type", "rope_scaling", *HF_BOOKKEEPING), str(path))
    if data.get("latent_type", "vae") != "vae":
        raise ConfigError(f"{path}: latent_type must be 'vae', got {data.get('latent_type')!r}")
    missing = [k for k in MODEL_JSON_FIELDS if k not in data]
    if missing:
        raise ConfigError(f"{path}: missing key(s) {', '.join(missing)}")
    if data.get("rope_scaling") is not None:
        raise ConfigError(f"{path}: rope_scaling is not supported (YuE2 uses none)")
    table = {k: data[k] for k in MODEL_JSON_FIELDS}
    dtype = data.get("torch_dtype") or data.get("dtype") or "bfloat16"
    return from_table(ModelConfig, table, str(path)), dtype


def vae_config_from_json(path: Path) -> VaeConfig:
    data = _read_json(path)
    where = str(path)
    if data.get("model_type") != "yue2_vae":
        raise ConfigError(f"{where}: model_type must be 'yue2_vae', got {data.get('model_type')!r}")
    _known_keys(data, (*VAE_JSON_FIELDS, *HF_BOOKKEEPING), where)
    for table, known in (("encoder_config", VAE_ENCODER_FIELDS), ("decoder_config", VAE_DECODER_FIELDS)):
        part = data.get(table)
        if not isinstance(part, dict):
            raise ConfigError(f"{where}: {table} must be a table, got {part!r}")
        _known_keys(part, (*known, *VAE_UNSUPPORTED), f"{where} {table}")
        for key in VAE_UNSUPPORTED:
            if part.get(key):
                raise ConfigError(f"{where} {table}: {key} = {part[key]!r} is not supported (only the standard "
                                  f"release: false)")
    try:
        dec, enc = data["decoder_config"], data["encoder_config"]
        if int(data["latent_dim"]) != int(dec["latent_dim"]):
            raise ConfigError(f"{where}: latent_dim {data['latent_dim']} differs from decoder_config.latent_dim "
                              f"{dec['latent_dim']}")
        cfg = VaeConfig(
            sample_rate=int(data["sample_rate"]), audio_channels=int(data["audio_channels"]),
            latent_dim=int(dec["latent_dim"]), encoder_latent_dim=int(enc["latent_dim"]),
            channels=int(dec["channels"]), c_mults=tuple(dec["c_mults"]), strides=tuple(dec["strides"]),
            decode_core_frames=int(data["decode_core_frames"]), decode_halo_frames=int(data["decode_halo_frames"]),
            use_snake=bool(dec.get("use_snake", True)), snake_type=str(dec.get("snake_type", "vanilla")),
            final_tanh=bool(dec.get("final_tanh", False)), use_filter=bool(dec.get("use_filter", False)),
            release_variant=str(data.get("release_variant", "standard")))
    except KeyError as exc:
        raise ConfigError(f"{where}: missing key {exc.args[0]!r}") from None
    if cfg.hop != int(data.get("downsampling_ratio", cfg.hop)):
        raise ConfigError(f"{where}: downsampling_ratio disagrees with the product of the strides ({cfg.hop})")
    return cfg


def generation_from_json(path: Path, fallback: GenerationDefaults) -> GenerationDefaults:
    """Optional generation_config.json beside the weights: overrides of the sampling defaults."""
    if not path.exists():
        return fallback
    data = _read_json(path)
    where = str(path)
    plan = from_table(Sampling, {**_as_table(fallback.plan), **data.get("plan", {})}, f"{where} plan")
    semantic = from_table(Sampling, {**_as_table(fallback.semantic), **data.get("semantic", {})}, f"{where} semantic")
    return GenerationDefaults(plan=plan, semantic=semantic, ode_steps=int(data.get("ode_steps", fallback.ode_steps)))


def _as_table(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def from_checkpoint(model_dir: str | Path, vae_dir: str | Path) -> Yue2Config:
    """Read a checkpoint in the released layout: `model_dir/config.json` (+ qwen.tiktoken) and `vae_dir/config.json`.

    The token layout follows from the tokenizer file (docs/model.md §11.2): qwen.tiktoken → the full layout, none → the
    byte layout of the tiny test models.
    """
    model_dir, vae_dir = Path(model_dir), Path(vae_dir)
    model, dtype = model_config_from_json(model_dir / "config.json")
    layout = FULL_LAYOUT if (model_dir / "qwen.tiktoken").exists() else BYTE_LAYOUT
    generation = generation_from_json(model_dir / "generation_config.json", GenerationDefaults())
    name = "yue2-3b" if layout is FULL_LAYOUT else "tiny"
    return Yue2Config(name=name, dtype=dtype, model=model, tokens=layout, vae=vae_config_from_json(
        vae_dir / "config.json"), generation=generation).validate(str(model_dir))


def model_json(cfg: Yue2Config) -> dict:
    """The MoT config.json the release carries, for this config (docs/model.md §11.2)."""
    out = {"architectures": list(MODEL_ARCHITECTURES), "auto_map": dict(MODEL_AUTO_MAP), "model_type": "yue2",
           "dtype": cfg.dtype, "latent_type": "vae"}
    out.update({k: getattr(cfg.model, k) for k in MODEL_JSON_FIELDS})
    return out


def vae_json(cfg: Yue2Config) -> dict:
    """The VAE config.json the release carries, for this config (docs/model.md §11.3); the encoder uses SnakeBeta."""
    v = cfg.vae
    common = {"channels": v.channels, "c_mults": list(v.c_mults), "strides": list(v.strides)}
    return {
        "architectures": list(VAE_ARCHITECTURES), "auto_map": dict(VAE_AUTO_MAP), "model_type": "yue2_vae",
        "dtype": "float32", "release_variant": v.release_variant,
        "sample_rate": v.sample_rate, "audio_channels": v.audio_channels, "latent_dim": v.latent_dim,
        "downsampling_ratio": v.hop, "decode_core_frames": v.decode_core_frames,
        "decode_halo_frames": v.decode_halo_frames,
        "encoder_config": {"in_channels": v.audio_channels, **common, "latent_dim": v.encoder_latent_dim,
                           "use_snake": True},
        "decoder_config": {"out_channels": v.audio_channels, **common, "latent_dim": v.latent_dim,
                           "use_snake": v.use_snake, "snake_type": v.snake_type, "use_filter": v.use_filter,
                           "final_tanh": v.final_tanh},
    }


def generation_json(cfg: Yue2Config) -> dict:
    g = cfg.generation
    return {"plan": _as_table(g.plan), "semantic": _as_table(g.semantic), "ode_steps": g.ode_steps}
