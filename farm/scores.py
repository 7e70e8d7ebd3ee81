"""Each track's score as MIDI (`score.mid`) beside its ABC, through music21, where the ABC parses.

The plan stage writes ABC; a producer wants it in a DAW. music21 reads the ABC and writes a Standard MIDI File
(deterministic: the same score gives the same bytes). A score music21 cannot read — or a machine without music21 —
does not fail the track: the manifest says why there is no MIDI (`score_midi`), in one line.
"""
from __future__ import annotations

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
