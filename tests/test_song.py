"""The sequential one-song path and `farm song`: folders, determinism, lengths, bad input."""
from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
from typer.testing import CliRunner

from farm.cli import app

from .farm_album import same_content

RUN = CliRunner()
ARTIFACTS = ["score.abc", "plan.npy", "semantic.npy", "latents.npy", "audio.flac"]


@pytest.fixture()
def lyrics(tmp_path):
    path = tmp_path / "lyrics.txt"
    path.write_text("[verse]\nPaper boats in the rain\n[chorus]\nCarry me home\n")
    return path


def song(ckpt, lyrics, out, *extra):
    return RUN.invoke(app, ["song", "--model", str(ckpt), "--style", "lo-fi pop", "--lyrics-file", str(lyrics),
                            "--out", str(out), "--device", "cpu", *extra])


def test_init_checkpoint_command(tmp_path):
    r = RUN.invoke(app, ["init-checkpoint", str(tmp_path / "ck"), "--config", "tiny", "--seed", "3"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "ck" / "model" / "model.safetensors").exists()
    again = RUN.invoke(app, ["init-checkpoint", str(tmp_path / "ck"), "--config", "tiny"])
    assert again.exit_code == 2 and "already exists" in again.stderr
    bad = RUN.invoke(app, ["init-checkpoint", str(tmp_path / "x"), "--config", "huge"])
    assert bad.exit_code == 2 and "'huge' is not one of 'tiny', 'yue2-3b'" in bad.stderr


def test_song_folder_is_complete_and_deterministic(tiny_ckpt_dir, lyrics, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert song(tiny_ckpt_dir, lyrics, a, "--seed", "5").exit_code == 0
    assert song(tiny_ckpt_dir, lyrics, b, "--seed", "5").exit_code == 0
    for name in ARTIFACTS:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    codes, latents = np.load(a / "semantic.npy"), np.load(a / "latents.npy")
    assert codes.dtype == np.int32 and codes.min() >= 0 and codes.max() < 64
    assert latents.dtype == np.float32 and latents.shape == (codes.size, 8)
    info = sf.info(a / "audio.flac")
    assert (info.samplerate, info.channels, info.subtype) == (48000, 2, "PCM_24")
    assert info.frames == 1920 * codes.size - 64
    settings = json.loads((a / "settings.json").read_text())
    assert settings["request"]["seed"] == 5 and settings["settings"]["ode_steps"] == 32
    assert set(settings["timings"]) == {"plan", "semantic", "acoustic", "decode"}
    assert len(settings["checkpoint"]["model"]) == 64 and len(settings["stage_keys"]) == 4
    from farm.tags import read_tags     # a lone song's FLAC names its render (no album, no title)

    assert read_tags((a / "audio.flac").read_bytes()) == {
        "YUE2_SEED": "5", "YUE2_STYLE": settings["request"]["style"], "YUE2_MODEL": settings["checkpoint"]["id"],
        "YUE2_SETTINGS": settings["stage_keys"]["decode"]}
    c = tmp_path / "c"
    assert song(tiny_ckpt_dir, lyrics, c, "--seed", "6").exit_code == 0
    assert (c / "audio.flac").read_bytes() != (a / "audio.flac").read_bytes()


def test_given_score_skips_the_plan_and_cot_off_runs_cfg(tiny_ckpt_dir, lyrics, tmp_path):
    first = tmp_path / "first"
    assert song(tiny_ckpt_dir, lyrics, first, "--max-semantic-tokens", "20").exit_code == 0
    replay = tmp_path / "replay"
    r = song(tiny_ckpt_dir, lyrics, replay, "--abc-file", str(first / "plan.npy"), "--max-semantic-tokens", "20")
    assert r.exit_code == 0, r.output
    settings = json.loads((replay / "settings.json").read_text())
    assert "plan" not in settings["timings"]
    for name in ("plan.npy", "semantic.npy", "audio.flac"):   # the same score ids → the same song
        assert same_content(name, (replay / name).read_bytes(), (first / name).read_bytes()), name
    off = tmp_path / "off"
    assert song(tiny_ckpt_dir, lyrics, off, "--cot", "off", "--max-semantic-tokens", "20").exit_code == 0
    settings = json.loads((off / "settings.json").read_text())
    assert settings["request"]["guidance"] == 1.01 and (off / "score.abc").read_bytes() == b""
    assert np.load(off / "semantic.npy").size == 20


def test_tiny_is_created_on_first_use(lyrics, tmp_path, monkeypatch):
    monkeypatch.setenv("YUE2_FARM_CACHE", str(tmp_path / "cache"))
    r = song("tiny", lyrics, tmp_path / "out", "--max-semantic-tokens", "8")
    assert r.exit_code == 0, r.output
    assert (tmp_path / "cache" / "checkpoints" / "tiny-seed0" / "model" / "model.safetensors").exists()


@pytest.mark.parametrize("case, message", [
    ("missing lyrics", "--lyrics-file: file not found"),
    ("empty lyrics", ": empty"),
    ("unknown cot", "Invalid value for '--cot': 'loud' is not one of 'full', 'melody', 'off'"),
    ("abc outside text", "ABC token id 300 is outside the text range [0, 256)"),
    ("prompt over context", "exceeds the model context of 512 tokens"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tiny_ckpt_dir, lyrics, tmp_path, case, message):
    out, extra = tmp_path / "never", []
    if case == "missing lyrics":
        lyrics = tmp_path / "nope.txt"
    elif case == "empty lyrics":
        lyrics.write_text("  \n")
    elif case == "unknown cot":
        extra = ["--cot", "loud"]
    elif case == "abc outside text":
        np.save(tmp_path / "abc.npy", np.array([65, 300], dtype=np.int32))
        extra = ["--abc-file", str(tmp_path / "abc.npy")]
    else:
        lyrics.write_text("la " * 200)
    r = song(tiny_ckpt_dir, lyrics, out, *extra)
    assert r.exit_code == 2
    assert r.stderr.count("\n") == 1 and message in r.stderr and r.stderr.startswith("error: ")
    assert not out.exists()


def test_a_finished_song_is_never_overwritten_without_force(tiny_ckpt_dir, lyrics, tmp_path):
    out = tmp_path / "done"
    assert song(tiny_ckpt_dir, lyrics, out, "--max-semantic-tokens", "8").exit_code == 0
    before = (out / "audio.flac").read_bytes()
    r = song(tiny_ckpt_dir, lyrics, out, "--seed", "1")
    assert r.exit_code == 2 and "not empty; pass --force" in r.stderr
    assert (out / "audio.flac").read_bytes() == before
