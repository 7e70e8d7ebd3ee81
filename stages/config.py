"""Frozen configuration of a YuE2 checkpoint: backbone, token layout, VAE and generation defaults.

Reads our TOML files (`configs/models/*.toml`) and a released checkpoint's `config.json` files into the same
dataclasses. Knows nothing about weights, devices or the CLI. Unknown or missing keys are errors that name the file
and the key, because a silently ignored typo in a config changes every song rendered with it.
"""
from __future__ import annotations

import json
import tomllib
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

# How the VAE decoder's convolutions multiply on CUDA (stages/vae.py says what each costs): "fp32" the default,
# "tf32" the documented faster mode. Here, beside the other settings, so the CLI can list them without torch.
DECODE_PRECISIONS = ("fp32", "tf32")


class ConfigError(ValueError):
    """A config file is missing, malformed, or disagrees with itself."""


@dataclass(frozen=True)
class ModelConfig:
    """The Mixture-of-Transformers backbone (docs/model.md §2, §3, §7)."""
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    vocab_size: int
    latent_dim: int
    max_latent_frames: int
    timestep_shift: float = 1.0
    time_freq_dim: int = 256
    tie_word_embeddings: bool = False

    @property
    def context(self) -> int:
        return self.max_position_embeddings


@dataclass(frozen=True)
class TokenLayout:
    """Where text, protocol markers and codec codes sit in the vocabulary (docs/model.md §1.1)."""
    tokenizer: str          # "tiktoken" (qwen.tiktoken beside the weights) or "bytes" (tiny checkpoints)
    n_text: int
    codebook: int

    @property
    def eod(self) -> int:
        return self.n_text

    @property
    def abc_start(self) -> int:
        return self.n_text + 204

    @property
    def abc_end(self) -> int:
        return self.n_text + 205

    @property
    def music_start(self) -> int:
        return self.n_text + 208

    @property
    def music_end(self) -> int:
        return self.n_text + 209

    @property
    def codec_offset(self) -> int:
        return self.n_text + 210

    @property
    def latent_start(self) -> int:
        return self.codec_offset + self.codebook

    @property
    def min_vocab(self) -> int:
        """The vocabulary the layout needs: up to LATENT_PAD, rounded up to a multiple of 128."""
        used = self.latent_start + 3
        return -(-used // 128) * 128


FULL_LAYOUT = TokenLayout(tokenizer="tiktoken", n_text=151643, codebook=32768)
BYTE_LAYOUT = TokenLayout(tokenizer="bytes", n_text=256, codebook=64)


@dataclass(frozen=True)
class VaeConfig:
    """The Oobleck VAE (docs/model.md §5, §11.3). Only the decoder is ever run here."""
    sample_rate: int
    audio_channels: int
    latent_dim: int                 # decoder input width
    encoder_latent_dim: int         # encoder output width (mean ‖ scale)
    channels: int
    c_mults: tuple[int, ...]
    strides: tuple[int, ...]
    decode_core_frames: int
    decode_halo_frames: int
    use_snake: bool = True
    snake_type: str = "vanilla"
    final_tanh: bool = False
    use_filter: bool = False
    release_variant: str = "standard"

    @property
    def hop(self) -> int:
        """Audio samples per latent frame (1920 at 48 kHz = 25 frames per second)."""
        out = 1
        for s in self.strides:
            out *= s
        return out


@dataclass(frozen=True)
class Sampling:
    """One AR stage's sampler settings (docs/model.md §4)."""
    temperature: float
    top_p: float
    top_k: int
    repetition_penalty: float
    penalty_window: int
    min_tokens: int
    max_tokens: int

    def validate(self, where: str) -> None:
        if not 0 <= self.temperature <= 5:
            raise ConfigError(f"{where}: temperature must be in [0, 5], got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"{where}: top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 1:
            raise ConfigError(f"{where}: top_k must be >= 1, got {self.top_k}")
        if self.repetition_penalty <= 0 or self.penalty_window < 1:
            raise ConfigError(f"{where}: repetition_penalty must be > 0 and penalty_window >= 1")
        if not 0 <= self.min_tokens <= self.max_tokens or self.max_tokens < 1:
            raise ConfigError(f"{where}: need 0 <= min_tokens <= max_tokens and max_tokens >= 1, "
                              f"got {self.min_tokens} / {self.max_tokens}")


RELEASE_PLAN = Sampling(0.7, 0.9, 30, 1.005, 100, 32, 4096)
RELEASE_SEMANTIC = Sampling(1.0, 0.95, 100, 1.2, 50, 200, 9000)


@dataclass(frozen=True)
class GenerationDefaults:
    plan: Sampling = RELEASE_PLAN
    semantic: Sampling = RELEASE_SEMANTIC
    ode_steps: int = 32


@dataclass(frozen=True)
class Yue2Config:
    """Everything an engine needs to know about one checkpoint."""
    name: str
    dtype: str                      # the weights' compute dtype: "bfloat16" or "float32"
    model: ModelConfig
    tokens: TokenLayout
    vae: VaeConfig
    generation: GenerationDefaults

    def validate(self, where: str) -> "Yue2Config":
        m, t = self.model, self.tokens
        if self.dtype not in ("bfloat16", "float32"):
            raise ConfigError(f"{where}: dtype must be bfloat16 or float32, got {self.dtype!r}")
        if m.num_attention_heads % m.num_key_value_heads:
            raise ConfigError(f"{where}: num_attention_heads must be a multiple of num_key_value_heads")
        if m.vocab_size < t.min_vocab:
            raise ConfigError(f"{where}: vocab_size {m.vocab_size} is smaller than the token layout needs "
                              f"({t.min_vocab})")
        if m.latent_dim != self.vae.latent_dim:
            raise ConfigError(f"{where}: model latent_dim {m.latent_dim} != VAE decoder latent_dim "
                              f"{self.vae.latent_dim}")
        if len(self.vae.c_mults) != len(self.vae.strides):
            raise ConfigError(f"{where}: VAE c_mults and strides must have the same length")
        self.generation.plan.validate(f"{where} [generation.plan]")
        self.generation.semantic.validate(f"{where} [generation.semantic]")
        return self


# --------------------------------------------------------------------------------------------------------------
# TOML (our own files)

def _build(cls, table: dict, where: str):
    """Make a dataclass from a table, naming unknown, missing or mistyped keys."""
    names = {f.name: f for f in fields(cls)}
    unknown = sorted(set(table) - set(names))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    values: dict[str, Any] = {}
    for name, f in names.items():
        if name not in table:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ConfigError(f"{where}: missing key {name!r}")
            continue
        value = table[name]
        kind = f.type if isinstance(f.type, str) else f.type.__name__
        if kind.startswith("tuple"):
            if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
                raise ConfigError(f"{where}: {name} must be a list of integers")
            value = tuple(value)
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{where}: {name} must be a number, got {value!r}")
            value = float(value)
        elif kind in ("int", "bool", "str"):
            expected = {"int": int, "bool": bool, "str": str}[kind]
            if not isinstance(value, expected) or (kind == "int" and isinstance(value, bool)):
                raise ConfigError(f"{where}: {name} must be {kind}, got {value!r}")
        values[name] = value
    return cls(**values)


def from_toml(path: str | Path) -> Yue2Config:
    """Read one of `configs/models/*.toml`."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such model config") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    where = str(path)
    expected = {"name", "dtype", "model", "tokens", "vae", "generation"}
    unknown = sorted(set(data) - expected)
    missing = sorted(expected - set(data))
    if unknown or missing:
        raise ConfigError(f"{where}: unknown key(s) {unknown} / missing key(s) {missing}")
    gen = dict(data["generation"])
    plan = _build(Sampling, gen.pop("plan", {}), f"{where} [generation.plan]")
    semantic = _build(Sampling, gen.pop("semantic", {}), f"{where} [generation.semantic]")
    generation = replace(_build(GenerationDefaults, gen, f"{where} [generation]"), plan=plan, semantic=semantic)
    return Yue2Config(
        name=data["name"], dtype=data["dtype"],
        model=_build(ModelConfig, data["model"], f"{where} [model]"),
        tokens=_build(TokenLayout, data["tokens"], f"{where} [tokens]"),
        vae=_build(VaeConfig, data["vae"], f"{where} [vae]"),
        generation=generation,
    ).validate(where)


# --------------------------------------------------------------------------------------------------------------
# config.json (the released checkpoint layout, docs/model.md §11.2 and §11.3)

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
    return _build(ModelConfig, table, str(path)), dtype


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
    plan = _build(Sampling, {**_as_table(fallback.plan), **data.get("plan", {})}, f"{where} plan")
    semantic = _build(Sampling, {**_as_table(fallback.semantic), **data.get("semantic", {})}, f"{where} semantic")
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
