"""Frozen configuration of a YuE2 checkpoint: backbone, token layout, VAE and generation defaults.

Reads our TOML files (`configs/models/*.toml`) into these dataclasses; a released checkpoint's `config.json` files
become the same dataclasses in config_json.py. Knows nothing about weights, devices or the CLI. Unknown or missing keys are errors that name the file
and the key, because a silently ignored typo in a config changes every song rendered with it.
"""
from __future__ import annotations

import tomllib
from dataclasses import MISSING, dataclass, fields, replace
from pathlib import Path
from typing import Any

# How the VAE decoder's convolutions multiply on CUDA (stages/vae.py says what each costs): "tf32x3" the default
# (FP32's accuracy on tensor cores where our kernel runs, cuDNN FP32 elsewhere), "fp32" cuDNN's FP32 everywhere,
# "tf32" the documented faster, less exact mode. Here, beside the other settings, so the CLI can list them without
# torch. FP32 stays first: it is what the others are measured against.
DECODE_PRECISIONS = ("fp32", "tf32", "tf32x3")
DEFAULT_DECODE_PRECISION = "tf32x3"


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

def from_table(cls, table: dict, where: str):
    """Make one of these dataclasses from a table (TOML here, config.json in config_json.py), naming unknown,
    missing or mistyped keys."""
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
    plan = from_table(Sampling, gen.pop("plan", {}), f"{where} [generation.plan]")
    semantic = from_table(Sampling, gen.pop("semantic", {}), f"{where} [generation.semantic]")
    generation = replace(from_table(GenerationDefaults, gen, f"{where} [generation]"), plan=plan, semantic=semantic)
    return Yue2Config(
        name=data["name"], dtype=data["dtype"],
        model=from_table(ModelConfig, data["model"], f"{where} [model]"),
        tokens=from_table(TokenLayout, data["tokens"], f"{where} [tokens]"),
        vae=from_table(VaeConfig, data["vae"], f"{where} [vae]"),
        generation=generation,
    ).validate(where)
