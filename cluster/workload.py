"""Workload facts: the shape of the model (docs/model.md §2, §5-§7) and of one track, as plain numbers.

Responsible for: parameter counts, bytes and FLOP per unit of work that the cost model needs, derived from the
architecture (and checked in tests against the published totals, docs/model.md §6); the length of each stage's
work for one track. Not responsible for: hardware, memory budgets or timing (memory.py, costs.py).
"""
from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path

# The stages in order, and what each counts. stages/song.py keeps the torch side's copy of the names (the two
# rooms never import each other); tests/test_facts.py proves the copies agree.
STAGES = ("plan", "semantic", "acoustic", "decode")
AR_STAGES = ("plan", "semantic")
STAGE_UNITS = {"plan": "tokens", "semantic": "tokens", "acoustic": "frames", "decode": "frames"}
# One semantic token = one latent frame = `hop` (1,920) samples at 48 kHz; stages/config.py derives it from the VAE
# config, and tests/test_facts.py checks that both configs shipped give 25.
FRAMES_PER_SECOND = 25.0

# Reference track (docs/model.md §12): 214.85 s of audio, ~4,540 plan (ABC) tokens, 5,371 semantic tokens.
REFERENCE_SECONDS = 214.85
REFERENCE_PLAN_TOKENS = 4540
REFERENCE_SEMANTIC_TOKENS = 5371
# A seeded album's song lengths (album_tracks) stay within these: a minute, and the model's 9,000 frames (6 min).
SHORTEST_SECONDS, LONGEST_SECONDS = 60.0, 360.0
# Plan-stage prompt (style + lyrics + framing) in tokens. Not published; a guess of a typical prompt. The semantic
# prefix then holds prompt + ABC ids, as the reference runtime builds it (token_prefixes(request, tokenizer, abc)).
DEFAULT_PROMPT_TOKENS = 300
# The AR step's weight and KV-cache formats (stages/quant.py FORMATS, stages/kv_cache.py KV_FORMATS — the torch side's
# copies; tests/test_facts.py checks they agree): bytes per value, None for the model's own dtype. A quantised matrix
# also keeps one FP32 scale per output channel (NVFP4: and an e4m3 scale per 16 values, counted in its 0.5625); the
# embedding and the lm_head stay in the model's dtype.
AR_FORMAT_BYTES = {"bf16": None, "fp8": 1, "nvfp4": 0.5 + 1 / 16}
KV_FORMAT_BYTES = {"bf16": None, "fp8": 1}


@dataclass(frozen=True)
class ModelShape:
    """Sizes of a YuE2 Mixture-of-Transformers + Oobleck VAE decoder (yue2-3b or tiny)."""
    name: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    context: int                     # max positions: prefix + generated tokens, and L_a + L_n per acoustic chunk
    latent_dim: int
    ode_evals: int                   # velocity evaluations per acoustic chunk (32 midpoint steps = 64)
    plan_max_tokens: int
    semantic_max_tokens: int
    vae_channels: int
    vae_c_mults: tuple[int, ...]
    vae_strides: tuple[int, ...]
    weight_bytes: int = 2            # bf16 MoT
    vae_bytes: int = 4               # fp32 VAE, TF32 off
    frames_per_second: float = FRAMES_PER_SECOND
    ar_format: str = "bf16"          # the AR step's linear weights (AR_FORMAT_BYTES)
    kv_format: str = "bf16"          # the AR engine's KV cache (KV_FORMAT_BYTES)

    def with_formats(self, ar_format: str | None = None, kv_format: str | None = None) -> ModelShape:
        for value, known, what in ((ar_format, AR_FORMAT_BYTES, "AR weight"), (kv_format, KV_FORMAT_BYTES, "KV")):
            if value is not None and value not in known:
                raise ValueError(f"unknown {what} format {value!r} (known: {', '.join(known)})")
        return replace(self, ar_format=ar_format or self.ar_format, kv_format=kv_format or self.kv_format)

    @classmethod
    def yue2_3b(cls) -> ModelShape:
        return cls("yue2-3b", 28, 2048, 6144, 16, 8, 128, 184704, 24576, 64, 64, 4096, 9000,
                   64, (1, 2, 4, 8, 16, 32), (2, 2, 4, 4, 5, 6))

    @classmethod
    def tiny(cls) -> ModelShape:
        return cls("tiny", 2, 64, 192, 4, 2, 16, 640, 512, 8, 64, 32, 64, 2, (1, 2, 4, 8, 16, 32), (2, 2, 4, 4, 5, 6),
                   weight_bytes=4)  # configs/models/tiny.toml: dtype float32

    @classmethod
    def from_toml(cls, path: str | Path) -> ModelShape:
        """Read configs/models/<name>.toml ([model], [vae], [generation] tables)."""
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        m, vae, gen = data["model"], data["vae"], data.get("generation", {})
        return cls(data.get("name", Path(path).stem), m["num_hidden_layers"], m["hidden_size"], m["intermediate_size"],
                   m["num_attention_heads"], m["num_key_value_heads"], m["head_dim"], m["vocab_size"],
                   m["max_position_embeddings"], m["latent_dim"], 2 * gen.get("ode_steps", 32),
                   gen.get("plan", {}).get("max_tokens", 4096), gen.get("semantic", {}).get("max_tokens", 9000),
                   vae["channels"], tuple(vae["c_mults"]), tuple(vae["strides"]),
                   weight_bytes=4 if data.get("dtype") == "float32" else 2)

    # --- parameters (docs/model.md §2, §3, §8) ---
    @property
    def branch_params(self) -> int:
        """One branch (AR or NAR) over all layers: attention + MLP + 4 norm vectors per layer (1409.41 M)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        attention = 2 * self.hidden * q + 2 * self.hidden * kv
        return self.layers * (attention + 3 * self.hidden * self.intermediate + 2 * self.hidden + 2 * self.head_dim)

    @property
    def embed_params(self) -> int:
        return self.vocab * self.hidden          # embed_tokens; lm_head has the same size (untied)

    @property
    def aux_params(self) -> int:
        """vae2llm, llm2vae and the time embedder's MLP (4.99 M)."""
        h, d = self.hidden, self.latent_dim
        return (d * h + h) + (h * d + d) + (256 * h + h) + (h * h + h)

    @property
    def pe_params(self) -> int:
        return self.context * self.hidden        # latent_pos_embed.pe, stored in the checkpoint

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V of every layer for one token of one branch (112 KiB at release size)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * self.weight_bytes

    @property
    def ar_kv_bytes_per_token(self) -> int:
        """The same in the AR engine's KV format (the acoustic stage's prefix K/V stay in the model's dtype)."""
        return self.layers * 2 * self.kv_heads * self.head_dim * (KV_FORMAT_BYTES[self.kv_format] or self.weight_bytes)

    @property
    def ar_linear_params(self) -> int:
        """The AR branch's matrices (q/k/v/o, gate/up/down): what a weight format quantises."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.layers * (2 * self.hidden * q + 2 * self.hidden * kv + 3 * self.hidden * self.intermediate)

    @property
    def ar_step_matrix_bytes(self) -> int:
        """The AR branch's matrices as the step reads them: in the model's dtype, or quantised with one FP32 scale
        per output channel."""
        per_value = AR_FORMAT_BYTES[self.ar_format]
        if per_value is None:
            return self.ar_linear_params * self.weight_bytes
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        channels = self.layers * (q + 2 * kv + self.hidden + 2 * self.intermediate + self.hidden)
        return int(self.ar_linear_params * per_value) + channels * 4

    @property
    def ar_step_weight_bytes(self) -> int:
        """Weights one AR decode step reads: the AR branch (its matrices in the step's format, its norms) + lm_head
        (the embedding read is one row)."""
        norms = self.branch_params - self.ar_linear_params
        return self.ar_step_matrix_bytes + (norms + self.embed_params) * self.weight_bytes

    # --- FLOP (docs/model.md §6) ---
    def ar_token_flop(self, context: float) -> float:
        """One generated token: 2 x (branch + lm_head) params plus attention 4 * ctx * hidden per layer."""
        return 2.0 * (self.branch_params + self.embed_params) + self.layers * 4.0 * context * self.hidden

    def prefill_flop(self, tokens: int) -> float:
        """Causal prefill of the AR branch over `tokens` (no lm_head): linear + half of the full attention."""
        return 2.0 * tokens * self.branch_params + self.layers * 2.0 * tokens * tokens * self.hidden

    def velocity_eval_flop(self, ar_tokens: int, nar_tokens: int) -> float:
        """One NAR velocity evaluation: 2 L_n * branch params + 28 * 4 * L_n (L_a + L_n) * 2048 (docs/model.md §6)."""
        return 2.0 * nar_tokens * self.branch_params + self.layers * 4.0 * nar_tokens * (ar_tokens + nar_tokens) * self.hidden

    # --- VAE decoder (docs/model.md §5): derived from channels / c_mults / strides ---
    def _vae_walk(self):
        """Yield (conv MACs per latent frame, output elements per frame) for each layer of the decoder."""
        ch, mults, strides = self.vae_channels, (1, *self.vae_c_mults), self.vae_strides
        top, length = mults[-1] * ch, 1
        yield self.latent_dim * top * 7, top
        for i in range(len(mults) - 1, 0, -1):
            cin, cout, s = mults[i] * ch, mults[i - 1] * ch, strides[i - 1]
            yield cin * cout * 2 * s * length, cout * length * s
            length *= s
            for _ in (1, 3, 9):
                yield (cout * cout * 7 + cout * cout) * length, cout * length
        yield ch * 2 * 7 * length, 2 * length

    @property
    def vae_flop_per_frame(self) -> float:
        """2 x MACs per latent frame (1.154 GMAC -> 57.7 GFLOP per second of audio at release size)."""
        return 2.0 * sum(macs for macs, _ in self._vae_walk())

    @property
    def vae_peak_elements_per_frame(self) -> int:
        """Largest activation per latent frame (64 channels x 1920 samples at release size)."""
        return max(elements for _, elements in self._vae_walk())

    @property
    def vae_decoder_params(self) -> int:
        """Decoder weights with weight norm's g, biases and SnakeBeta alpha/beta (66.37 M at release size)."""
        ch, mults, strides = self.vae_channels, (1, *self.vae_c_mults), self.vae_strides
        top = mults[-1] * ch
        total = self.latent_dim * top * 7 + 2 * top
        for i in range(len(mults) - 1, 0, -1):
            cin, cout, s = mults[i] * ch, mults[i - 1] * ch, strides[i - 1]
            total += 2 * cin + cin * cout * 2 * s + cout + cin
            total += 3 * (4 * cout + cout * cout * 7 + 2 * cout + cout * cout + 2 * cout)
        return total + 2 * ch + ch * 2 * 7 + 2


@dataclass(frozen=True)
class TrackShape:
    """How much work one song is: token counts of the two AR stages and the latent frames of the others."""
    audio_seconds: float
    plan_tokens: int
    semantic_tokens: int                         # = latent frames (25 per second of audio)
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS   # plan-stage prefix
    title: str = ""
    cfg_branches: int = 1                        # 2 when classifier-free guidance is on (guidance != 1)

    @classmethod
    def from_audio_seconds(cls, seconds: float, prompt_tokens: int = DEFAULT_PROMPT_TOKENS,
                           title: str = "", model: ModelShape | None = None) -> TrackShape:
        """25 frames per second; plan tokens scale like the reference track's (4,540 per 214.85 s), capped at max."""
        frames = max(1, round(seconds * FRAMES_PER_SECOND))
        plan = max(1, round(seconds * REFERENCE_PLAN_TOKENS / REFERENCE_SECONDS))
        if model is not None:
            frames, plan = min(frames, model.semantic_max_tokens), min(plan, model.plan_max_tokens)
        return cls(seconds, plan, frames, prompt_tokens, title)  # cfg off: cot=full defaults to guidance 1.0

    @classmethod
    def reference(cls) -> TrackShape:
        return cls(REFERENCE_SECONDS, REFERENCE_PLAN_TOKENS, REFERENCE_SEMANTIC_TOKENS, title="reference")

    @property
    def semantic_prefix_tokens(self) -> int:
        return self.prompt_tokens + self.plan_tokens

    def prefix_tokens(self, stage: str) -> int:
        return self.prompt_tokens if stage == "plan" else self.semantic_prefix_tokens

    def generated_tokens(self, stage: str) -> int:
        return self.plan_tokens if stage == "plan" else self.semantic_tokens

    def mean_context(self, stage: str) -> float:
        """Mean attended context while generating: prefix + half the generated tokens."""
        return self.prefix_tokens(stage) + self.generated_tokens(stage) / 2.0

    def acoustic_chunks(self, model: ModelShape) -> list[tuple[int, int]]:
        """(L_a, L_n) per acoustic chunk: S = (context - |P| - 3) // 2 frames each (docs/model.md §3.2)."""
        prefix = self.semantic_prefix_tokens
        size = (model.context - prefix - 3) // 2
        if size < 1:
            raise ValueError(f"semantic prefix of {prefix} tokens leaves no room in a {model.context}-token context")
        frames, chunks = self.semantic_tokens, []
        for start in range(0, frames, size):
            n = min(size, frames - start)
            chunks.append((prefix + n + 1, n + 2))
        return chunks


def album_tracks(count: int, seed: int = 0, mean_seconds: float = REFERENCE_SECONDS, spread_seconds: float = 45.0,
                 model: ModelShape | None = None) -> list[TrackShape]:
    """A seeded album: lengths ~ normal(mean, spread) clipped to [SHORTEST_SECONDS, LONGEST_SECONDS]; token counts
    capped at the model's max_tokens (yue2-3b by default)."""
    import random
    rng, model = random.Random(seed), model or ModelShape.yue2_3b()
    tracks = []
    for i in range(count):
        seconds = min(LONGEST_SECONDS, max(SHORTEST_SECONDS, rng.gauss(mean_seconds, spread_seconds)))
        tracks.append(TrackShape.from_audio_seconds(round(seconds, 2), title=f"track {i + 1:02d}", model=model))
    return tracks


def check_track(track: TrackShape, model: ModelShape) -> None:
    """Raise ValueError when a track cannot run on `model`: its prefix and tokens must fit the context.

    Token counts above max_tokens are accepted (benchmarks force lengths; the reference track's 4,540 ABC tokens
    exceed the plan stage's max_tokens of 4,096); the KV cache is then sized for them.
    """
    if not math.isfinite(track.audio_seconds) or track.audio_seconds <= 0:
        raise ValueError(f"audio_seconds must be a positive number, got {track.audio_seconds}")
    for stage in AR_STAGES:
        need = track.prefix_tokens(stage) + track.generated_tokens(stage)
        if need > model.context:
            raise ValueError(f"{stage}: prefix {track.prefix_tokens(stage)} + {track.generated_tokens(stage)} tokens "
                             f"> context {model.context}")
    track.acoustic_chunks(model)
