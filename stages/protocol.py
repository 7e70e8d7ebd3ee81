"""The YuE2 prompt protocol: song requests, prefixes for each stage, CFG negatives, context checks, chunk ranges.

Everything here is pure bookkeeping over token ids (prompt assembly and acoustic chunk ranges); no tensors, no
model. The three instruction strings must match the reference verbatim, because the real weights were trained on
them.
"""
from __future__ import annotations

from dataclasses import dataclass

from .config import TokenLayout
from .tokenizer import Tokenizer

INSTRUCTIONS = {
    "full": "Generate a chord-annotated ABC transcription, then generate music with codec tokens from the given "
            "conditions.",
    "melody": "Generate a melody-only ABC transcription without chord symbols, then generate music with codec "
              "tokens from the given conditions.",
    "off": "Generate music with codec tokens from the given conditions.",
}
COT_MODES = tuple(INSTRUCTIONS)
DEFAULT_SEED = 831001


class ProtocolError(ValueError):
    """A request the model cannot take: unknown mode, empty lyrics, bad ABC, prompt over the context."""


@dataclass(frozen=True)
class SongRequest:
    """What a user asks for. `abc_ids` (exact plan tokens) or `abc` (text) replace the plan stage."""
    style: str
    lyrics: str
    cot: str = "full"
    seed: int = DEFAULT_SEED
    guidance: float | None = None          # None → 1.0 for full/melody, 1.01 for off
    abc: str | None = None
    abc_ids: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.cot not in INSTRUCTIONS:
            raise ProtocolError(f"cot must be one of {', '.join(COT_MODES)}, got {self.cot!r}")
        if not self.lyrics.strip():
            raise ProtocolError("lyrics are empty")
        if not 0 <= self.seed < 2 ** 63:
            raise ProtocolError(f"seed must be in [0, 2**63), got {self.seed}")
        if self.guidance is not None and not 0 <= self.guidance <= 20:
            raise ProtocolError(f"guidance must be in [0, 20], got {self.guidance}")
        if (self.abc is not None or self.abc_ids is not None) and self.cot == "off":
            raise ProtocolError("a given ABC score needs cot full or melody (cot off writes no score)")
        if self.abc is not None and not self.abc.strip():
            raise ProtocolError("the given ABC score is empty")

    @property
    def cfg_scale(self) -> float:
        if self.guidance is not None:
            return self.guidance
        return 1.01 if self.cot == "off" else 1.0

    @property
    def has_plan_stage(self) -> bool:
        return self.cot != "off" and self.abc is None and self.abc_ids is None

    def text(self) -> str:
        return f"{INSTRUCTIONS[self.cot]}\n[Tags]\n{self.style}\n[Lyrics]\n{self.lyrics}\n"


def check_abc_ids(ids, layout: TokenLayout) -> list[int]:
    ids = [int(i) for i in ids]
    bad = [i for i in ids if not 0 <= i < layout.eod]
    if bad:
        raise ProtocolError(f"ABC token id {bad[0]} is outside the text range [0, {layout.eod})")
    if not ids:
        raise ProtocolError("the given ABC score has no tokens")
    return ids


def given_abc_ids(request: SongRequest, tokenizer: Tokenizer, layout: TokenLayout) -> list[int] | None:
    """The user's own score as ids (plan stage skipped), or None when the plan stage writes it."""
    if request.abc_ids is not None:
        return check_abc_ids(request.abc_ids, layout)
    if request.abc is not None:
        return check_abc_ids(tokenizer.encode(request.abc), layout)
    return None


def plan_prefix(request: SongRequest, tokenizer: Tokenizer, layout: TokenLayout) -> list[int]:
    return [layout.eod] + tokenizer.encode(request.text()) + [layout.abc_start]


def semantic_prefix(request: SongRequest, tokenizer: Tokenizer, layout: TokenLayout, abc_ids) -> list[int]:
    base = [layout.eod] + tokenizer.encode(request.text())
    if request.cot == "off":
        return base + [layout.abc_start, layout.abc_end, layout.music_start]
    return base + [layout.abc_start] + check_abc_ids(abc_ids, layout) + [layout.abc_end, layout.music_start]


def negative_prefix(request: SongRequest, tokenizer: Tokenizer, layout: TokenLayout, abc_ids) -> list[int] | None:
    """The CFG unconditional branch's prefix, or None when guidance is 1 (no CFG)."""
    if request.cfg_scale == 1.0:
        return None
    base = [layout.eod] + tokenizer.encode(INSTRUCTIONS[request.cot])
    if request.cot == "off":
        return base + [layout.music_start]
    return base + [layout.abc_start] + check_abc_ids(abc_ids, layout) + [layout.abc_end, layout.music_start]


def check_context(prefix_len: int, max_tokens: int, context: int, what: str) -> None:
    """The reference never truncates: prefix + generation budget must fit the context."""
    if prefix_len + max_tokens > context:
        raise ProtocolError(f"{what}: prompt of {prefix_len} tokens + {max_tokens} to generate = "
                            f"{prefix_len + max_tokens} exceeds the model context of {context} tokens")


def chunk_ranges(frames: int, prefix_len: int, context: int) -> list[tuple[int, int]]:
    """Acoustic chunks [a, b): S = (context − |P| − 3) // 2 frames each, so prefix + codes + NAR slots fit."""
    size = (context - prefix_len - 3) // 2
    if frames < 1:
        raise ProtocolError("no semantic codes to synthesise")
    if size < 1:
        raise ProtocolError(f"a prefix of {prefix_len} tokens leaves no acoustic context in {context}")
    return [(a, min(a + size, frames)) for a in range(0, frames, size)]
