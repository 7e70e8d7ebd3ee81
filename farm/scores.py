"""Each track's score as MIDI (`score.mid`) beside its ABC, through music21, where the ABC parses.

The plan stage writes ABC; a producer wants it in a DAW. music21 reads the ABC and writes a Standard MIDI File
(deterministic: the same score gives the same bytes). A score music21 cannot read — or a machine without music21 —
does not fail the track: the manifest says why there is no MIDI (`score_midi`), in one line.

A score a user edited is checked here too, before anything renders (`abc_problems`, `check_abc`), and a score's
length in seconds (`score_seconds`) lets `pick_candidate` choose among the plan stage's candidates.
"""
from __future__ import annotations

import re

MIDI = "score.mid"


def midi_from_abc(abc_text: str) -> tuple[bytes | None, str]:
    """→ (the MIDI bytes, "") or (None, why not)."""
    if not abc_text.strip():
        return None, "no score (the plan stage wrote none)"
    try:
        import music21
    except ImportError:   # a dependency of the package; a source tree run without it still delivers the audio
        return None, "music21 is not installed (pip install music21), so no MIDI was written"
    try:
        score = music21.converter.parse(abc_text, format="abc")
        notes = len(score.flatten().notes)
        if not notes:
            return None, "the score holds no notes"
        return music21.midi.translate.streamToMidiFile(score).writestr(), ""
    except Exception as exc:   # music21 raises many types (ABCHandlerException, ValueError, IndexError, …)
        first = (str(exc).splitlines() or [""])[0][:160]
        return None, f"music21 could not read the ABC ({type(exc).__name__}: {first})"


def write_midi(store, folder: str) -> str:
    """`folder/score.mid` from `folder/score.abc` → "score.mid", or why there is none (an old score.mid is
    removed then, so the folder never holds a MIDI of another score)."""
    from . import artifacts

    def at(name):
        return f"{folder}/{name}" if folder else name

    midi, why = midi_from_abc(store.read_bytes(at(artifacts.SCORE)).decode("utf-8"))
    path = at(MIDI)
    if midi is None:
        store.remove_tree(path)
        return why
    store.write_bytes(path, midi)
    return MIDI


# ---- checking a user's ABC before anything renders ------------------------------------------------------------
# A score the user edited is checked here, structurally (ABC 2.1), so that a broken one is refused at once, naming
# its line, instead of failing minutes later inside a model or music21. This is a check, not a parser: it knows
# the shape of each line, not the music.

CHOOSE_RULES = ("first", "length")

_FIELD = re.compile(r"^[A-Za-z+]:")
# Text that is not music, each with its closer optional so that an unclosed one is seen (and swallows the rest of
# its line, which keeps one mistake from being reported as many): chord symbols and annotations, decorations,
# old-style +decorations+, inline fields such as [K:G].
_TEXT = re.compile(r'"[^"]*"?|![^!]*!?|\+[^+\s"]+\+|\[[A-Za-z+]:[^\]]*\]?')
# Bar lines and variant endings that hold a bracket which opens or closes nothing: [|] [| |] [1 [2.
_BAR_BRACKETS = re.compile(r"\[\|\]|\[\||\|\]|\[(?=\d)")
_NOTES = frozenset("ABCDEFGabcdefg")
_ALPHABET = _NOTES | frozenset("zZxXy^=_,'0123456789/|:[]-()<> \t.~HLMOPSTuv+{}\\&$*`")
_DIVIDE_BY_ZERO = re.compile(r"/0+(?!\d)")
_ZERO_LENGTH = re.compile(r"[A-Ga-gzx][,']*0+(?!\d)")     # C0, C0/, C0/2: a length of 0 (C05 is 5)
_UNCLOSED = {'"': 'a chord symbol opened with " is not closed', "!": "a decoration opened with ! is not closed",
             "[": "an inline field opened with [ is not closed"}

_L = re.compile(r"([1-9]\d*)/([1-9]\d*)")
_M = re.compile(r"C\|?|none|[1-9]\d*(\+[1-9]\d*)*/[1-9]\d*|\([1-9]\d*(\+[1-9]\d*)*\)/[1-9]\d*")
_Q = re.compile(r'[1-9]\d*|("[^"]*"\s*)?([1-9]\d*/[1-9]\d*\s*)+=\s*[1-9]\d*(\s*"[^"]*")?')
_TONIC = re.compile(r"([A-G][#b]?)([A-Za-z]*)")
_MODES = ("maj", "min", "dor", "phr", "lyd", "mix", "aeo", "loc", "ion")


def _strip_comment(line: str) -> str:
    """The line without its trailing `% comment`; a % inside a quoted chord symbol is text."""
    return re.match(r'(?:"[^"]*"?|[^"%])*', line).group()


def _key_ok(value: str) -> bool:
    """K: starts with a key (a tonic and a mode); what follows (clef=, explicit accidentals) is left to the tools."""
    words = value.split()
    if not words:
        return False
    if words[0] in ("none", "HP", "Hp"):
        return True
    tonic = _TONIC.fullmatch(words[0])
    mode = tonic.group(2).lower() if tonic else ""
    return bool(tonic) and (mode in ("", "m") or mode[:3] in _MODES)


def _unit_ok(value: str) -> bool:
    """L: is N/M with M a power of two: music21 and every renderer divide by it."""
    unit = _L.fullmatch(re.sub(r"\s", "", value))
    return bool(unit) and int(unit.group(2)) & (int(unit.group(2)) - 1) == 0


_FIELD_CHECKS = {
    "L": (_unit_ok, "L: (unit note length) must be N/M with M a power of two, like 1/8"),
    "M": (lambda v: bool(_M.fullmatch(re.sub(r"\s", "", v))), "M: (meter) must be C, C|, none or like 4/4, 6/8"),
    "Q": (lambda v: bool(_Q.fullmatch(v.strip())), "Q: (tempo) must hold a tempo, like 1/4=120"),
    "K": (_key_ok, "K: (key) must start with a key, like G, Am, F#dor, Bbmix or none"),
}


def _field_problem(field: str, at: str) -> str | None:
    """The problem with one field (`K:G`, from a field line or an inline [K:G]), or None; unchecked fields pass."""
    name, value = field[0], field[2:]
    check = _FIELD_CHECKS.get(name)
    if check is None or check[0](value):
        return None
    return f"{at}: {check[1]} (got {value.strip()!r})"


def _blank_text(line: str, at: str) -> tuple[str, list[str]]:
    """The line with its non-music text (chord symbols, decorations, inline fields) blanked to spaces, so columns
    stay true, and the problems of that text: unclosed ones, and inline fields with bad values."""
    problems = []

    def blank(match: re.Match) -> str:
        text = match.group()
        closer = "]" if text[0] == "[" else text[0]
        if text[0] in _UNCLOSED and (len(text) < 2 or text[-1] != closer):
            problems.append(f"{at}: {_UNCLOSED[text[0]]} (column {match.start() + 1})")
        elif text[0] == "[":
            problems.append(_field_problem(text[1:-1], at))
        return " " * len(text)

    blanked = _TEXT.sub(blank, line)
    return blanked, [p for p in problems if p]


def _bracket_problems(music: str, at: str) -> list[str]:
    """[ ] (chords) and { } (grace notes) open and close on the line, never one inside another of its kind."""
    problems, open_at = [], {"[": [], "{": []}   # the columns of the brackets still open, innermost last
    for col, char in enumerate(_BAR_BRACKETS.sub(lambda m: " " * len(m.group()), music), 1):
        if char in open_at:
            if open_at[char]:
                problems.append(f"{at}: a {char} at column {col} opens inside another {char}")
            open_at[char].append(col)
        elif char in "]}":
            opener = "[" if char == "]" else "{"
            if not open_at[opener]:
                problems.append(f"{at}: a {char} at column {col} closes nothing")
            else:
                open_at[opener].pop()
    return problems + [f"{at}: a {char} opened at column {cols[0]} is not closed"
                       for char, cols in open_at.items() if cols]


def _character_problems(music: str, at: str) -> list[str]:
    """Characters outside the ABC body alphabet (and outside quotes), the typo an editor most often leaves."""
    return [f"{at}: unexpected character {char!r} at column {col}"
            for col, char in enumerate(music, 1) if char not in _ALPHABET]


def _length_problems(music: str, at: str) -> list[str]:
    """Note lengths of zero: `/0` makes music21 divide by zero; `C0` is a note that lasts no time."""
    return ([f"{at}: a note length divides by zero at column {m.start() + 1}" for m in _DIVIDE_BY_ZERO.finditer(music)]
            + [f"{at}: a note of length 0 at column {m.start() + 1}" for m in _ZERO_LENGTH.finditer(music)])


def _music_problems(line: str, at: str) -> tuple[list[str], int]:
    """One music line's problems, and how many notes it holds."""
    music, problems = _blank_text(line, at)
    problems += _bracket_problems(music, at) + _character_problems(music, at) + _length_problems(music, at)
    return problems, sum(char in _NOTES for char in music)


def abc_problems(text: str) -> list[str]:
    """The structural problems of an ABC 2.1 tune, in line order, each naming its 1-based line; [] when it is
    sound. The whole score's problems (no key, no notes) come last."""
    if not text.strip():
        return ["the score is empty"]
    problems, has_key, music_before_key, notes = [], False, False, 0
    for number, raw in enumerate(text.splitlines(), 1):
        line, at = _strip_comment(raw).rstrip(), f"line {number}"
        if not line.strip() or raw.lstrip().startswith("%"):
            continue
        if _FIELD.match(line):
            has_key = has_key or line[0] == "K"
            problems.append(_field_problem(line, at))
            continue
        if not has_key and not music_before_key:   # once is enough: the fix is one K: line above
            music_before_key = True
            problems.append(f"{at}: music before the K: (key) field")
        found, count = _music_problems(line, at)
        problems += found
        notes += count
    problems = [p for p in problems if p]
    sound_lines = not problems   # a broken line (an unclosed quote swallows its notes) is the one to fix first
    if not has_key and not music_before_key:
        problems.append("the score has no K: (key) field")
    if not notes and sound_lines:
        problems.append("the score holds no notes")
    return problems


def check_abc(text: str, where: str) -> None:
    """Refuse a broken score in one line (UserError) naming `where` (a flag, a spec's track): first our structural
    check, then — where music21 is installed — whether music21 can read it, as the MIDI and length steps will."""
    from .errors import UserError

    problems = abc_problems(text)
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise UserError(f"{where}: the ABC score is broken: {problems[0]}{more}")
    try:
        import music21
    except ImportError:   # the structural check above is ours and has run; music21 only adds its own reading
        return
    try:
        music21.converter.parse(text, format="abc")
    except Exception as exc:   # music21 raises many types (ABCHandlerException, ZeroDivisionError, …)
        first = (str(exc).splitlines() or [""])[0][:160]
        raise UserError(f"{where}: music21 could not read the ABC score ({type(exc).__name__}: {first})") from None


def _quarter_bpm(score) -> float:
    """Quarter notes per minute from the score's first tempo mark; 120 (music21's and MIDI's default) without one."""
    import music21

    for mark in score.recurse().getElementsByClass(music21.tempo.MetronomeMark):
        bpm = mark.getQuarterBPM()
        if not bpm and mark.number and mark.referent is not None:
            bpm = mark.number * mark.referent.quarterLength
        if bpm:
            return float(bpm)
    return 120.0


def score_seconds(text: str) -> float | None:
    """How long the score plays, in seconds, through music21; None without music21, or when the ABC does not
    parse or holds no notes."""
    try:
        import music21
    except ImportError:
        return None
    try:
        score = music21.converter.parse(text, format="abc")
        if not len(score.flatten().notes):
            return None
        return float(score.highestTime) * 60.0 / _quarter_bpm(score)
    except Exception:   # any failure to read means "no length", as for a score music21 cannot read at all
        return None


def pick_candidate(texts: list[str], rule: str, target_seconds: float | None) -> int:
    """The index of the plan candidate that `rule` chooses: "first" → 0; "length" → the one whose score plays
    closest to target_seconds (an unreadable score ranks last; a tie goes to the earlier one; with no target, or
    no readable score, the first)."""
    if rule not in CHOOSE_RULES:
        raise ValueError(f"unknown rule {rule!r}; one of {', '.join(CHOOSE_RULES)}")
    if not texts:
        raise ValueError("no candidates to choose from")
    if rule == "first" or target_seconds is None:
        return 0
    seconds = [score_seconds(text) for text in texts]

    def rank(i: int) -> tuple[bool, float, int]:
        return seconds[i] is None, abs((seconds[i] or 0.0) - target_seconds), i

    return min(range(len(texts)), key=rank)
