"""Album specs: a TOML file of tracks → validated, frozen `AlbumSpec`, reporting every problem at once.

```toml
title = "Paper Boats"                    # required
model = "tiny"                           # optional: what `farm render` uses when --model is not given
artist = "The Paper Boats"               # optional: the ARTIST tag of the mastered files
ar_checkpoint = "../ar-fp8"              # optional: a quantised AR checkpoint (`farm quantize`), relative to this file
kv_cache = "fp8"                         # optional: the AR KV cache, bf16 (default) or fp8
ar_format = "fp8"                        # optional: the AR step's weights, bf16 (default), fp8 or nvfp4 (on load)
[master]                                 # optional; the defaults below. `master = false`: no mastering
lufs = -14.0                             # integrated loudness of each mastered track (ITU-R BS.1770)
true_peak = -1.0                         # ceiling in dBTP (4x oversampled)
[defaults]                               # optional; any track key except title/lyrics/abc
style = "lo-fi pop, warm piano"
cot = "full"
seed = 831001                            # a track without its own seed gets defaults.seed + (number − 1)
plans = 3                                # optional: candidate scores the plan stage writes (1–16; default 1)
choose = "length"                        # which candidate goes on: "first" (default) or "length" (closest to
target_seconds = 180.0                   #   target_seconds by the score's own tempo); `farm approve` overrides
[defaults.sampling.semantic]
temperature = 0.95
[[tracks]]
title = "Harbour Lights"                 # required; becomes the folder name 01-harbour-lights
lyrics_file = "lyrics/harbour.txt"       # or an inline lyrics = "..."; paths are relative to this file
abc_file = "scores/harbour.abc"          # optional: your own score (ABC text, or plan.npy ids), or abc = "..."
```
Every message names the file, the track (number and title) and the field. Knows nothing about rendering.
"""
from __future__ import annotations

import math
import re
import tomllib
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from stages.protocol import COT_MODES, DEFAULT_SEED
from stages.config import DEFAULT_DECODE_PRECISION
from stages.vae import PRECISIONS

from .errors import UserError, read_user_text
from .mastering import MasterSpec
from .scores import CHOOSE_RULES, check_abc

TRACK_KEYS = {"title", "style", "lyrics", "lyrics_file", "cot", "seed", "guidance", "abc", "abc_file",
              "max_semantic_tokens", "sampling", "decode_precision", "plans", "choose", "target_seconds"}
DEFAULT_KEYS = TRACK_KEYS - {"title", "lyrics", "lyrics_file", "abc", "abc_file"}
SAMPLING_KEYS = {"temperature": float, "top_p": float, "top_k": int, "repetition_penalty": float,
                 "penalty_window": int, "min_tokens": int, "max_tokens": int}
TYPES = {"title": str, "style": str, "lyrics": str, "lyrics_file": str, "cot": str, "seed": int, "guidance": float,
         "abc": str, "abc_file": str, "max_semantic_tokens": int, "sampling": dict, "decode_precision": str,
         "plans": int, "choose": str, "target_seconds": float}
MAX_PLANS = 16


class AlbumError(UserError):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__(f"{len(problems)} problem(s) in the album spec:\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class TrackSpec:
    number: int
    title: str
    folder: str                              # NN-slug: safe, unique, readable
    style: str
    lyrics: str
    cot: str
    seed: int
    guidance: float | None = None
    abc: str | None = None
    abc_ids: tuple[int, ...] | None = None
    max_semantic_tokens: int | None = None
    sampling: dict = field(default_factory=dict)   # {"plan": {...}, "semantic": {...}} overrides
    decode_precision: str = DEFAULT_DECODE_PRECISION   # the VAE's convolutions (stages.vae.PRECISIONS)
    plans: int = 1                                 # candidate scores the plan stage writes (best of N)
    choose: str = "first"                          # the rule that picks the one that goes on (scores.CHOOSE_RULES)
    target_seconds: float | None = None            # the "length" rule's target

    @property
    def label(self) -> str:
        return f'track {self.number} "{self.title}"'


@dataclass(frozen=True)
class AlbumSpec:
    path: Path
    title: str
    model: str | None
    tracks: tuple[TrackSpec, ...]
    master: MasterSpec | None = MasterSpec()      # None: `master = false`
    artist: str | None = None
    ar_checkpoint: Path | None = None             # `farm render --ar-checkpoint` overrides it
    kv_cache: str | None = None                   # `farm render --kv-cache` overrides it; None: bf16
    ar_format: str | None = None                  # `farm render --ar-format` overrides it; None: bf16 (or the
                                                  # ar_checkpoint's format)

    @property
    def slug(self) -> str:
        return slugify(self.title) or "album"


def track_folder(number: int, title: str) -> str:
    slug = slugify(title)
    return f"{number:02d}-{slug}" if slug else f"{number:02d}-track"


SLUG_BYTES = 80          # well under every filesystem's 255-byte name limit, with room for "NN-" and temp suffixes
RESERVED = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)), *(f"lpt{i}" for i in range(1, 10))}


def slugify(title: str) -> str:
    """A folder name from a title: NFC, lower case, letters and digits of any script kept, the rest '-', at most
    SLUG_BYTES bytes of UTF-8 (cut between characters). Never a separator, a leading dot or a device name; may be
    empty (the caller names the folder otherwise). The title itself is kept as written in the manifest."""
    text = unicodedata.normalize("NFC", title).casefold()
    text = re.sub(r"[^\w]+", "-", text, flags=re.UNICODE).replace("_", "-")
    text = re.sub(r"-{2,}", "-", text).strip("-")
    while len(text.encode("utf-8")) > SLUG_BYTES:
        text = text[:-1]
    text = text.rstrip("-")
    return f"{text}-" if text in RESERVED else text


def load_album(path: str | Path) -> AlbumSpec:
    path = Path(path)
    if not path.exists():
        raise AlbumError([f"{path}: no such album spec"])
    try:
        data = tomllib.loads(read_user_text(path, "album spec"))
    except UserError as exc:
        raise AlbumError([str(exc)]) from None
    except tomllib.TOMLDecodeError as exc:
        raise AlbumError([f"{path}: not valid TOML: {exc}"]) from None
    problems: list[str] = []
    where = str(path)
    for key in sorted(set(data) - {"title", "model", "artist", "master", "defaults", "tracks", "ar_checkpoint",
                                   "kv_cache", "ar_format"}):
        problems.append(f"{where}: unknown key {key!r}")
    ar_checkpoint, kv_cache, ar_format = _ar_options(data, path, where, problems)
    artist = data.get("artist")
    if artist is not None and (not isinstance(artist, str) or not artist.strip() or not artist.isprintable()):
        problems.append(f"{where}: artist: must be printable text")
    master = _master(data.get("master", {}), where, problems)
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        problems.append(f"{where}: title: required, a non-empty string")
    model = data.get("model")
    if model is not None and not isinstance(model, str):
        problems.append(f"{where}: model: must be a string")
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        problems.append(f"{where}: defaults: must be a table")
        defaults = {}
    _check_fields(defaults, DEFAULT_KEYS, f"{where}: defaults", problems)
    raw_tracks = data.get("tracks")
    if not isinstance(raw_tracks, list) or not raw_tracks or not all(isinstance(t, dict) for t in raw_tracks):
        problems.append(f"{where}: tracks: required, one or more [[tracks]] tables")
        raw_tracks = []
    tracks = [_track(i + 1, raw, defaults, path, problems) for i, raw in enumerate(raw_tracks)]
    _check_unique(tracks, where, problems)
    if problems:
        raise AlbumError(problems)
    return AlbumSpec(path, title.strip(), model, tuple(tracks), master, artist.strip() if artist else None,
                     ar_checkpoint, kv_cache, ar_format)


def _ar_options(data: dict, path: Path, where: str, problems: list[str]) -> tuple[Path | None, str | None, str | None]:
    """The album's AR options: a quantised AR checkpoint directory (relative to the spec), the KV cache format and
    the AR weights' format. Only their form is checked here; the checkpoint against the model (and its format
    against `ar_format`) where the render starts."""
    from stages.kv_cache import KV_FORMATS
    from stages.quant import FORMATS

    ar_checkpoint, kv_cache = data.get("ar_checkpoint"), data.get("kv_cache")
    if ar_checkpoint is not None:
        if not isinstance(ar_checkpoint, str) or not ar_checkpoint.strip():
            problems.append(f"{where}: ar_checkpoint: must be a directory path")
            ar_checkpoint = None
        else:
            ar_checkpoint = (path.parent / ar_checkpoint).resolve()
            if not ar_checkpoint.is_dir():
                problems.append(f"{where}: ar_checkpoint: {ar_checkpoint} is not a directory")
    if kv_cache is not None and kv_cache not in KV_FORMATS:
        problems.append(f"{where}: kv_cache: must be one of {', '.join(KV_FORMATS)}, got {kv_cache!r}")
        kv_cache = None
    ar_format = data.get("ar_format")
    if ar_format is not None and ar_format not in FORMATS:
        problems.append(f"{where}: ar_format: must be one of {', '.join(FORMATS)}, got {ar_format!r}")
        ar_format = None
    return ar_checkpoint, kv_cache, ar_format


MASTER_RANGES = {"lufs": (-40.0, -5.0), "true_peak": (-12.0, 0.0)}


def _master(value, where: str, problems: list[str]) -> MasterSpec | None:
    """`[master]` (lufs, true_peak) or `master = false`."""
    if value is False:
        return None
    if not isinstance(value, dict):
        problems.append(f"{where}: master: a [master] table, or false for no mastering; got {value!r}")
        return None
    for key in sorted(set(value) - set(MASTER_RANGES)):
        problems.append(f"{where}: master.{key}: unknown key (known: {', '.join(MASTER_RANGES)})")
    for key, (low, high) in MASTER_RANGES.items():
        v = value.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not low <= v <= high):
            problems.append(f"{where}: master.{key}: must be a number in [{low:g}, {high:g}], got {v!r}")
    return MasterSpec(**{k: float(v) for k, v in value.items() if k in MASTER_RANGES
                         and isinstance(v, (int, float)) and not isinstance(v, bool)})


def _check_fields(table: dict, allowed: set[str], where: str, problems: list[str]) -> None:
    for key, value in table.items():
        if key not in allowed:
            problems.append(f"{where}: unknown key {key!r}")
            continue
        expected = TYPES[key]
        ok = isinstance(value, expected) and not isinstance(value, bool)
        if expected is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok:
            problems.append(f"{where}: {key}: must be {expected.__name__}, got {type(value).__name__} {value!r}")
    if isinstance(table.get("sampling"), dict):
        _check_sampling(table["sampling"], where, problems)
    if isinstance(table.get("decode_precision"), str) and table["decode_precision"] not in PRECISIONS:
        problems.append(f"{where}: decode_precision: must be one of {', '.join(PRECISIONS)}, "
                        f"got {table['decode_precision']!r}")
    if isinstance(table.get("cot"), str) and table["cot"] not in COT_MODES:
        problems.append(f"{where}: cot: must be one of {', '.join(COT_MODES)}, got {table['cot']!r}")
    if isinstance(table.get("seed"), int) and not 0 <= table["seed"] < 2 ** 63:
        problems.append(f"{where}: seed: must be in [0, 2**63)")
    if isinstance(table.get("max_semantic_tokens"), int) and table["max_semantic_tokens"] < 1:
        problems.append(f"{where}: max_semantic_tokens: must be >= 1")
    if isinstance(table.get("plans"), int) and not 1 <= table["plans"] <= MAX_PLANS:
        problems.append(f"{where}: plans: must be in [1, {MAX_PLANS}], got {table['plans']}")
    if isinstance(table.get("choose"), str) and table["choose"] not in CHOOSE_RULES:
        problems.append(f"{where}: choose: must be one of {', '.join(CHOOSE_RULES)}, got {table['choose']!r}")
    if isinstance(table.get("target_seconds"), (int, float)) and not table["target_seconds"] > 0:
        problems.append(f"{where}: target_seconds: must be > 0")


def _check_sampling(sampling: dict, where: str, problems: list[str]) -> None:
    for stage, overrides in sampling.items():
        if stage not in ("plan", "semantic") or not isinstance(overrides, dict):
            problems.append(f"{where}: sampling.{stage}: expected [sampling.plan] or [sampling.semantic] tables")
            continue
        for key, value in overrides.items():
            kind = SAMPLING_KEYS.get(key)
            if kind is None:
                problems.append(f"{where}: sampling.{stage}.{key}: unknown key")
            elif isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
                problems.append(f"{where}: sampling.{stage}.{key}: must be {kind.__name__}, got {value!r}")


def _track(number: int, raw: dict, defaults: dict, spec_path: Path, problems: list[str]) -> TrackSpec | None:
    title = raw.get("title")
    label = f'track {number} "{title}"' if isinstance(title, str) else f"track {number}"
    where = f"{spec_path}: {label}"
    before = len(problems)
    _check_fields(raw, TRACK_KEYS, where, problems)
    if not isinstance(title, str) or not title.strip():
        problems.append(f"{where}: title: required, a non-empty string")
    elif not title.isprintable():
        problems.append(f"{where}: title: must be printable text (no control characters or line breaks)")
    merged = {**defaults, **raw}
    lyrics = _text_field(raw, "lyrics", "lyrics_file", spec_path, where, problems, required=True)
    if lyrics is not None and not lyrics.strip():
        problems.append(f"{where}: lyrics: empty")
    abc, abc_ids = None, None
    if "abc_file" in raw and isinstance(raw["abc_file"], str) and raw["abc_file"].endswith(".npy"):
        file = _beside(spec_path, raw["abc_file"], f"{where}: abc_file", problems)
        abc_ids = _abc_ids(file, where, problems) if file else None
    else:
        abc = _text_field(raw, "abc", "abc_file", spec_path, where, problems, required=False)
    style = merged.get("style")
    if not isinstance(style, str):
        problems.append(f"{where}: style: required (here or in [defaults])")
    cot = merged.get("cot", "full")
    if (abc is not None or abc_ids is not None) and cot == "off":
        problems.append(f"{where}: abc: a given score needs cot full or melody")
    if abc is not None:
        try:
            check_abc(abc, f"{where}: {'abc' if 'abc' in raw else 'abc_file'}")
        except UserError as exc:
            problems.append(str(exc))
    if merged.get("choose") == "length" and "target_seconds" not in merged:
        problems.append(f'{where}: target_seconds: required by choose = "length" (here or in [defaults])')
    if len(problems) > before or not isinstance(merged.get("seed", DEFAULT_SEED), int):
        return None                  # (a bad [defaults] value is reported once, with the defaults)
    seed = merged.get("seed", DEFAULT_SEED) + (0 if "seed" in raw else number - 1)
    sampling = {k: {**defaults.get("sampling", {}).get(k, {}), **raw.get("sampling", {}).get(k, {})}
                for k in ("plan", "semantic")}
    return TrackSpec(number=number, title=title.strip(), folder=track_folder(number, title.strip()), style=style,
                     lyrics=lyrics, cot=cot, seed=seed, guidance=merged.get("guidance"), abc=abc, abc_ids=abc_ids,
                     max_semantic_tokens=merged.get("max_semantic_tokens"), sampling=sampling,
                     decode_precision=merged.get("decode_precision", DEFAULT_DECODE_PRECISION),
                     plans=merged.get("plans", 1), choose=merged.get("choose", "first"),
                     target_seconds=float(merged["target_seconds"]) if "target_seconds" in merged else None)


def _text_field(raw: dict, inline: str, file_key: str, spec_path: Path, where: str, problems: list[str],
                required: bool) -> str | None:
    if inline in raw and file_key in raw:
        problems.append(f"{where}: {inline}: give {inline} or {file_key}, not both")
        return None
    if isinstance(raw.get(inline), str):
        return raw[inline]
    if isinstance(raw.get(file_key), str):
        file = _beside(spec_path, raw[file_key], f"{where}: {file_key}", problems)
        try:
            return read_user_text(file, f"{where}: {file_key}") if file else None
        except UserError as exc:
            problems.append(str(exc))
        return None
    if required and inline not in raw and file_key not in raw:
        problems.append(f"{where}: {inline}: required ({inline} = \"\"\"…\"\"\" or {file_key} = \"path\")")
    return None


def _beside(spec_path: Path, name: str, where: str, problems: list[str]) -> Path | None:
    """A file a spec names must lie in the spec's folder or below it: the text of what it reads ends up in the
    album's settings.json, so a spec written by someone else must not be able to read ~/.ssh or /etc into it."""
    root = spec_path.parent.resolve()
    file = (spec_path.parent / name).resolve()
    if not file.is_relative_to(root):
        problems.append(f"{where}: {name} lies outside the album's folder {root}; copy it in beside the spec")
        return None
    return file


def _abc_ids(file: Path, where: str, problems: list[str]) -> tuple[int, ...] | None:
    import numpy as np

    try:
        ids = np.load(file, allow_pickle=False)
    except (FileNotFoundError, ValueError, OSError) as exc:
        problems.append(f"{where}: abc_file: cannot read {file}: {exc}")
        return None
    if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
        problems.append(f"{where}: abc_file: {file} must hold a non-empty 1-D integer array")
        return None
    return tuple(int(i) for i in ids)


def _check_unique(tracks: list[TrackSpec | None], where: str, problems: list[str]) -> None:
    seen: dict[str, TrackSpec] = {}
    for t in tracks:
        if t is None:
            continue
        key = unicodedata.normalize("NFC", t.title).casefold()
        if key in seen:
            problems.append(f"{where}: {t.label}: title: the same as {seen[key].label}; titles must be unique")
        else:
            seen[key] = t
