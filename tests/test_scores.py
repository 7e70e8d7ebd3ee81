"""score.mid beside score.abc (farm/scores.py): written through music21 where the ABC parses, a one-line reason
where it does not, and the same bytes every time."""
from __future__ import annotations

import music21
from typer.testing import CliRunner

from farm import scores
from farm.cli import app

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
