"""Mastering on its own (farm/mastering.py): loudness and true peak measured the way BS.1770 does, on the written
file; the cue sheet's arithmetic; tags read back. The album step inside a render is in test_farm.py."""
from __future__ import annotations

import io

import numpy as np
import pyloudnorm
import pytest
import soundfile as sf
from mutagen.flac import FLAC
from scipy.signal import resample_poly

from farm.mastering import MasterSpec, cue_sheet, master_track, tagged_flac

RATE = 48000


def measured(audio: np.ndarray) -> tuple[float, float]:
    """(LUFS, dBTP) of what a FLAC of `audio` holds, measured independently of the code under test."""
    back, _ = sf.read(io.BytesIO(tagged_flac(audio, RATE, {})), always_2d=True)
    peak = np.abs(resample_poly(back, 4, 1, axis=0)).max()
    return pyloudnorm.Meter(RATE).integrated_loudness(back), 20 * np.log10(peak)


@pytest.mark.parametrize("spec, level", [(MasterSpec(), 0.3), (MasterSpec(), 0.003), (MasterSpec(-20.0, -3.0), 0.2)])
def test_a_track_reaches_the_target_under_the_ceiling(spec, level):
    rng = np.random.default_rng(7)
    t = np.arange(6 * RATE) / RATE
    audio = np.stack([level * rng.standard_normal(len(t)), level * np.sin(2 * np.pi * 440 * t)], axis=1)
    out, report = master_track(audio.astype(np.float32), RATE, spec)
    lufs, peak = measured(out)
    assert abs(lufs - spec.lufs) <= 0.5 and peak <= spec.true_peak + 0.05, (lufs, peak)
    assert len(out) % (RATE // 75) == 0 and abs(report["lufs"] - lufs) < 0.1


def test_silence_stays_silent():
    out, report = master_track(np.zeros((RATE, 2), np.float32), RATE, MasterSpec())
    assert not out.any() and report["lufs"] is None and report["gain_db"] == 0.0


def test_cue_indexes_are_the_track_starts():
    lengths = [640 * 75 * 61 + 640 * 3, 640 * 10, 640]          # 61 s + 3 frames, 10 frames, 1 frame
    cue = cue_sheet('Album "X"', "Someone", ["a", "b", "c"], lengths, RATE)
    indexes = [line.split()[-1] for line in cue.splitlines() if "INDEX 01" in line]
    assert indexes == ["00:00:00", "01:01:03", "01:01:13"]
    assert cue.splitlines()[:3] == ['PERFORMER "Someone"', "TITLE \"Album 'X'\"", 'FILE "album.flac" WAVE']


def test_tags_and_the_embedded_cue_sheet_read_back():
    data = tagged_flac(np.zeros((640, 2), np.float32), RATE, {"TITLE": "Ünïcode", "TRACKNUMBER": "2"}, "CUE")
    tags = FLAC(io.BytesIO(data))
    assert tags["TITLE"] == ["Ünïcode"] and tags["TRACKNUMBER"] == ["2"] and tags["CUESHEET"] == ["CUE"]
    assert sf.read(io.BytesIO(data))[0].shape == (640, 2)
