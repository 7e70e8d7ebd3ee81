"""Text ↔ token ids: the Qwen BPE of `qwen.tiktoken` (offline, through tiktoken) or a byte tokenizer for tiny models.

`encode` is "encode ordinary": NFC-normalise, split with the Qwen-1 regex, BPE each piece; special-token text in
lyrics is just bytes, so every id is below EOD. Knows nothing about prompts (see protocol.py).
"""
from __future__ import annotations

import base64
import itertools
import unicodedata
from pathlib import Path
from typing import Protocol

from .config import TokenLayout

# Qwen-1 pre-split pattern: digits one by one; needs \p{L} / \p{N} (tiktoken's regex engine has them).
QWEN_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                r"""\s*[\r\n]+|\s+(?!\S)|\s+""")
TIKTOKEN_FILE = "qwen.tiktoken"


class Tokenizer(Protocol):
    n_text: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids) -> str: ...


class ByteTokenizer:
    """id = byte value of the NFC-normalised UTF-8 text; n_text = 256."""
    n_text = 256

    def encode(self, text: str) -> list[int]:
        return list(unicodedata.normalize("NFC", text).encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")


def special_tokens(n_text: int) -> dict[str, int]:
    """The tokenizer's specials, numbered from EOD in the released order (ends at EOD + 207)."""
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<R>", "<S>", "<X>", "<mask>", "<sep>"]
    extras = [f"<extra_{i}>" for i in range(200)]
    extras[196], extras[197] = "<abc>", "</abc>"
    return {name: n_text + i for i, name in enumerate(names + extras)}


class QwenTokenizer:
    """The released tokenizer, built offline from `qwen.tiktoken` (base64 token, space, rank per line)."""

    def __init__(self, path: Path):
        import tiktoken  # only checkpoints that carry qwen.tiktoken need it

        ranks = load_ranks(path)
        self.n_text = len(ranks)
        self._enc = tiktoken.Encoding(name=f"yue2:{path}", pat_str=QWEN_PATTERN, mergeable_ranks=ranks,
                                      special_tokens=special_tokens(self.n_text))

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(unicodedata.normalize("NFC", text))

    def decode(self, ids) -> str:
        known = [int(i) for i in ids if 0 <= int(i) < self._enc.n_vocab]
        return self._enc.decode(known, errors="replace")


def load_ranks(path: Path) -> dict[bytes, int]:
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(path.read_text(encoding="ascii").splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        except ValueError:
            raise ValueError(f"{path}:{number}: expected 'base64-token rank'") from None
    return ranks


def load_tokenizer(model_dir: Path, layout: TokenLayout) -> Tokenizer:
    if layout.tokenizer == "bytes":
        return ByteTokenizer()
    tokenizer = QwenTokenizer(Path(model_dir) / TIKTOKEN_FILE)
    if tokenizer.n_text != layout.n_text:
        raise ValueError(f"{model_dir / TIKTOKEN_FILE}: {tokenizer.n_text} ranks, the layout needs {layout.n_text}")
    return tokenizer


def write_synthetic_ranks(path: Path, n_text: int) -> None:
    """A stand-in `qwen.tiktoken` for random-weight checkpoints in the full layout (the real file is not here).

    Ranks 0–255 are the single bytes, then every printable-ASCII pair, then printable triples until `n_text` ranks:
    each longer token is reachable by merging a shorter one, so BPE is well-formed and ordinary text encodes.
    """
    printable = [bytes([c]) for c in range(32, 127)]
    singles = (bytes([b]) for b in range(256))
    pairs = (a + b for a, b in itertools.product(printable, repeat=2))
    triples = (a + b + c for a, b, c in itertools.product(printable, repeat=3))
    tokens = itertools.islice(itertools.chain(singles, pairs, triples), n_text)
    lines = [f"{base64.b64encode(t).decode()} {rank}" for rank, t in enumerate(tokens)]
    if len(lines) != n_text:
        raise ValueError(f"cannot make {n_text} synthetic ranks")
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
