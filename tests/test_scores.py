"""score.mid beside score.abc (farm/scores.py): written through music21 where the ABC parses, a one-line reason
where it does not, and the same bytes every time."""
from __future__ import annotations

import music21
import pytest
from typer.testing import CliRunner

from farm import scores
from farm.cli import app
from farm.errors import UserError

ABC = "X:1\nT:Paper Boats\nM:4/4\nL:1/8\nK:G\nGABc d2 B2 | c2 A2 G4 |]\n"


def test_a_score_that_parses_becomes_a_midi_file_of_its_notes():
    midi, why = scores.midi_from_abc(ABC)
    assert why == "" and midi.startswith(b"MThd")
    back = music21.converter.parse(midi, format="midi")
    pitches = [n.pitch.name for n in back.flatten().notes]
    assert pitches == ["G", "A", "B", "C", "D", "B", "C", "A", "G"]
    assert scores.midi_from_abc(ABC)[0] == midi


def test_a_score_that_does_not_parse_gets_a_one_line_reason():
    for text, reason in (("", "no score"), ("X:1\nK:C\n|]\n", "holds no notes"),
                         ("X:1\nK:C\nCD-\n", "music21 could not read the ABC")):
        midi, why = scores.midi_from_abc(text)
        assert midi is None and reason in why and "\n" not in why



def test_without_music21_the_track_gets_a_reason_not_a_crash(monkeypatch):
    """A source-tree run on a machine without music21 (the GPU image) still delivers the album: no MIDI, a reason."""
    import sys

    monkeypatch.setitem(sys.modules, "music21", None)         # `import music21` raises ImportError
    midi, why = scores.midi_from_abc(ABC)
    assert midi is None and why.startswith("music21 is not installed") and "\n" not in why

def test_farm_song_writes_score_mid_beside_a_given_score(tiny_ckpt_dir, tmp_path):
    (tmp_path / "lyrics.txt").write_text("[verse]\nPaper boats\n")
    (tmp_path / "score.abc").write_text(ABC)
    out = tmp_path / "song"
    r = CliRunner().invoke(app, ["song", "--model", str(tiny_ckpt_dir), "--style", "folk", "--lyrics-file",
                                 str(tmp_path / "lyrics.txt"), "--abc-file", str(tmp_path / "score.abc"), "--out",
                                 str(out), "--device", "cpu", "--max-semantic-tokens", "16"])
    assert r.exit_code == 0, r.output
    assert "score.mid beside score.abc" in r.output
    assert (out / "score.mid").read_bytes() == scores.midi_from_abc(ABC)[0]


# ---- the structural check of a user's ABC, its length, and choosing a plan candidate ----------------------------

GOOD = """X:1
T:Paper Boats % a comment after a title
M:4/4
L:1/8
Q:"Allegro" 1/4=120
K:Am
% a comment line
%%MIDI program 1
"Am"A2 {g}A2 !trill!c2 [CEG]2 | "C%"c4 +fermata+e4 |
[K:G] G2 B2 d4 :|[2 G8 |]
w: pa-per boats
"""


def test_a_sound_score_has_no_problems_and_music21_reads_it():
    assert scores.abc_problems(GOOD) == []
    scores.check_abc(GOOD, "--abc-file")


def _broken(line: str) -> str:
    """GOOD with line 9 (its first music line) replaced."""
    lines = GOOD.splitlines()
    lines[8] = line
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("text, line, words", [
    (_broken('"Am A2 B2 c4 |'), 9, 'a chord symbol opened with " is not closed'),
    (_broken("[CEG2 A2 B2 |"), 9, "a [ opened at column 1 is not closed"),
    (_broken("[C[EG]]2 A2 |"), 9, "a [ at column 3 opens inside another ["),
    (_broken("{gA2 B2 c4 |"), 9, "a { opened at column 1 is not closed"),
    (_broken("!trill c2 A2 |"), 9, "a decoration opened with ! is not closed"),
    (_broken("A2 C#2 c4 |"), 9, "unexpected character '#' at column 5"),
    (_broken("A2 B2; c4 |"), 9, "unexpected character ';' at column 6"),
    (_broken("A2 B/0 c4 |"), 9, "a note length divides by zero at column 5"),
    (_broken("A2 B0/ c4 |"), 9, "a note of length 0 at column 4"),
    (_broken("A2 [M:3/x] c4 |"), 9, "M: (meter)"),
    (GOOD.replace("L:1/8", "L:1/3"), 4, "L: (unit note length)"),
    (GOOD.replace("M:4/4", "M:4/x"), 3, "M: (meter)"),
    (GOOD.replace("K:Am", "K:Q"), 6, "K: (key)"),
    (GOOD.replace('Q:"Allegro" 1/4=120', 'Q:"Allegro"'), 5, "Q: (tempo)"),
    (GOOD.replace("T:Paper", "ABc|\nT:Paper"), 2, "music before the K: (key) field"),
])
def test_each_broken_score_is_reported_at_its_line(text, line, words):
    problems = scores.abc_problems(text)
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"line {line}: ") and words in problems[0]


@pytest.mark.parametrize("text", [
    "X:1\nM:6/8\nM:C|\nM:none\nM:2+3/8\nM:(2+3)/8\nL:1/16\nQ:96\nQ:3/8=60 \"Lively\"\nK:F#dor clef=bass\nF2 G|\n",
    "X:1\nL:1/8\nK:Bbmix\n[K:HP] A4 [|] [1 B2 :|[2 c2 || [V:1] d-d (3efg a>b & z4 x4 y ~c .d uA vB |]\n",
    "X:1\nL:1/4\nK:none\nC D E F\\\n`G A B c $ *\n",
])
def test_the_forms_that_abc_allows_pass(text):
    assert scores.abc_problems(text) == []


def test_every_problem_is_reported_in_line_order():
    text = "X:1\nL:1/3\nK:C\nA#B\n[CE\n"
    assert scores.abc_problems(text) == ["line 2: L: (unit note length) must be N/M with M a power of two, like 1/8 "
                                         "(got '1/3')", "line 4: unexpected character '#' at column 2",
                                         "line 5: a [ opened at column 1 is not closed"]


def test_an_empty_score_a_score_without_notes_and_one_without_a_key():
    assert scores.abc_problems(" \n\t\n") == ["the score is empty"]
    assert scores.abc_problems("X:1\nL:1/8\nK:C\n\"C\" z4 | x4 |]\n") == ["the score holds no notes"]
    assert scores.abc_problems("X:1\nT:Nothing\n") == ["the score has no K: (key) field", "the score holds no notes"]


def test_check_abc_names_where_and_the_first_problem_in_one_line():
    text = _broken("A2 C#2 c4 | A;")
    with pytest.raises(UserError) as caught:
        scores.check_abc(text, "spec tracks[2].abc")
    message = str(caught.value)
    assert message == ("spec tracks[2].abc: the ABC score is broken: line 9: unexpected character '#' at column 5 "
                       "(and 1 more problem(s))")
    assert "\n" not in message
    with pytest.raises(UserError, match=r"^--abc-file: the ABC score is broken: the score is empty$"):
        scores.check_abc("", "--abc-file")


def test_a_score_that_only_music21_refuses_is_refused_in_one_line():
    """music21 needs L: or M: to know a note's length (ABC's default of 1/8 aside): our check passes, music21 not."""
    text = "X:1\nK:C\nCDEF|\n"
    assert scores.abc_problems(text) == []
    with pytest.raises(UserError) as caught:
        scores.check_abc(text, "--abc-file")
    message = str(caught.value)
    assert message.startswith("--abc-file: music21 could not read the ABC score (ABCHandlerException: ")
    assert "\n" not in message


def test_check_abc_reports_whatever_music21_raises(monkeypatch):
    def refuse(*args, **kwargs):
        raise ZeroDivisionError("float division by zero\nmore")

    monkeypatch.setattr(music21.converter, "parse", refuse)
    with pytest.raises(UserError, match=r"^x: music21 could not read the ABC score "
                                        r"\(ZeroDivisionError: float division by zero\)$"):
        scores.check_abc(GOOD, "x")


def test_without_music21_check_abc_still_runs_its_own_check(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "music21", None)
    scores.check_abc("X:1\nK:C\nCDEF|\n", "--abc-file")       # music21's objection is not raised: it is absent
    with pytest.raises(UserError, match="line 3: unexpected character"):
        scores.check_abc("X:1\nK:C\nC@DEF|\n", "--abc-file")
    assert scores.score_seconds(GOOD) is None


def _tune(tempo: str = "", unit: str = "1/4") -> str:
    """Eight quarter notes (written in `unit`s), with a Q: line when `tempo` is given."""
    q = f"Q:{tempo}\n" if tempo else ""
    notes = "CDEF|GABc|]" if unit == "1/4" else "C2D2E2F2|G2A2B2c2|]"
    return f"X:1\nM:4/4\nL:{unit}\n{q}K:C\n{notes}\n"


def test_score_seconds_is_quarters_times_sixty_over_the_quarter_bpm():
    assert scores.score_seconds(_tune("1/4=120")) == pytest.approx(4.0)
    assert scores.score_seconds(_tune("1/4=60")) == pytest.approx(8.0)
    assert scores.score_seconds(_tune()) == pytest.approx(4.0)                # no tempo: 120 quarters a minute
    assert scores.score_seconds(_tune("1/8=120", unit="1/8")) == pytest.approx(8.0)   # 60 quarters a minute
    assert scores.score_seconds(_tune('"Andante" 1/2=30')) == pytest.approx(8.0)
    assert scores.score_seconds(_tune("80")) == pytest.approx(6.0)


def test_score_seconds_is_none_for_a_score_without_length():
    assert scores.score_seconds("X:1\nK:C\nCDEF|\n") is None              # music21 cannot read it
    assert scores.score_seconds("X:1\nL:1/4\nK:C\nz4|]\n") is None        # no notes
    assert scores.score_seconds("") is None


def test_pick_candidate_first_and_length():
    fast, slow, broken = _tune("1/4=120"), _tune("1/4=60"), "X:1\nK:C\nCDEF|\n"     # 4 s, 8 s, None
    assert scores.pick_candidate([slow, fast], "first", 4.0) == 0
    assert scores.pick_candidate([slow, fast], "length", 4.5) == 1
    assert scores.pick_candidate([fast, slow], "length", 7.0) == 1
    assert scores.pick_candidate([slow, fast], "length", 6.0) == 0          # a tie: the earlier one
    assert scores.pick_candidate([fast, slow], "length", 6.0) == 0
    assert scores.pick_candidate([broken, slow], "length", 1.0) == 1        # unreadable ranks last
    assert scores.pick_candidate([broken, broken], "length", 4.0) == 0
    assert scores.pick_candidate([slow, fast], "length", None) == 0         # no target: the first
    assert scores.CHOOSE_RULES == ("first", "length")


def test_pick_candidate_refuses_an_unknown_rule_and_no_candidates():
    with pytest.raises(ValueError, match="unknown rule 'longest'"):
        scores.pick_candidate([GOOD], "longest", 4.0)
    with pytest.raises(ValueError):
        scores.pick_candidate([], "first", None)
