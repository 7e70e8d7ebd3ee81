"""`farm bench album --mixed` on the tiny checkpoint and the session's Ray cluster: every track gets its own forced
lengths, and the report's keys name the mixed album. (Timings mean nothing on the CPU.)"""
from __future__ import annotations

import tempfile

import pytest

from farm.bench.album import run_album_bench, track_lengths
from farm.measured import album_figures

from .conftest import PROFILES


def test_mixed_lengths_follow_the_fixed_list():
    """The issue's mixed album: 12 different lengths from 2.5 to 4.5 minutes, ~3.5 on average (25 semantic tokens a
    second), each track's plan scaled like its song from the reference track's 4,540 : 5,371."""
    lengths = track_lengths(13, 4540, 5371, mixed=True)
    semantic = [s for _, s in lengths[:12]]
    assert (min(semantic), max(semantic)) == (2.5 * 1500, 4.5 * 1500)
    assert sum(semantic) / 12 == pytest.approx(3.5 * 1500, abs=0.05 * 1500)
    assert len(set(lengths[:12])) == 12 and lengths[12] == lengths[0]     # the list of 12, then again
    for plan, song in lengths:
        assert abs(plan / song - 4540 / 5371) <= 0.5 / song
    assert track_lengths(3, 10, 20, mixed=False) == [(10, 20)] * 3


@pytest.mark.slow
def test_mixed_album_bench_renders_each_track_at_its_length(ray_cluster, tiny_ckpt_dir, tmp_path, capsys,
                                                             monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    report = run_album_bench(model=str(tiny_ckpt_dir), vae=None, tracks=3, plan_tokens=20, semantic_tokens=30,
                             pins=(), sequential=False, json_out=tmp_path / "album.json",
                             cluster=PROFILES / "ci.toml", mixed=True, ar_window=2, gantt=tmp_path / "gantt.png")
    want = track_lengths(3, 20, 30, mixed=True)
    assert not report["failures"] and report["lengths"] == want
    for stage, index in (("plan", 0), ("semantic", 1)):
        got = sorted(e["units"] for e in report["events"] if e["ok"] and e["stage"] == stage)
        assert got == sorted(pair[index] for pair in want), stage
    assert report["ar_window"] == 2 and report["simulated_makespan_s"] > 0
    entered = sorted(e["start"] for e in report["events"] if e["stage"] == "plan")
    left = sorted(e["end"] for e in report["events"] if e["stage"] == "semantic")
    assert entered[2] >= left[0] - 1e-3                  # the third track entered AR only after one had left it
    assert (tmp_path / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(scratch.iterdir())                   # the bench's album folder is gone with the run
    figures = album_figures(report)
    assert any(k.startswith("album3_mixed_") and k.endswith("gpu_s") for k in figures), figures
    # where the start went: each worker's load phases (they add up to less than its whole start), and the wait
    # before the first stage
    for w in report["workers"].values():
        seconds = w["load_seconds"]
        assert set(seconds) == {"imports", "weights", "total", *w["engines"]}, (seconds, w["engines"])
        assert 0 < sum(v for k, v in seconds.items() if k != "total") <= seconds["total"]
        if "ar" in w["engines"]:     # on the CPU no graphs: the engine's tables and its step weights
            assert set(w["ar_build_seconds"]) == {"kv cache and tables", "step weights"}
            assert 0 <= sum(w["ar_build_seconds"].values()) <= seconds["ar"]
        began = report["load_began_after_s"][w["worker"]]
        assert 0 < began and began + seconds["total"] <= report["first_stage_after_s"] + 1e-3
    assert 0 < report["first_stage_after_s"] < report["render_wall_s"]
    out = capsys.readouterr().out
    assert "loaded in" in out and "the first stage began" in out and "its AR engine: kv cache and tables" in out


def test_a_failed_stage_keeps_its_figures_out_of_the_summary():
    """A run in which decode failed (say, a missing audio library on the card's host) still measured the AR part,
    but not the album: only `_ar_s` is written; with a failed AR stage, nothing."""
    def event(track, stage, start, end, ok=True):
        return {"track": track, "stage": stage, "start": start, "end": end, "ok": ok, "error": None if ok else "x"}
    stages = [{"stage": "plan", "cards": ["H200"]}]
    events = [event("a", "plan", 0, 10), event("a", "semantic", 10, 30), event("a", "acoustic", 30, 35),
              event("a", "decode", 35, 36)]
    report = {"tracks": 1, "stages": stages, "events": events, "album_makespan_s": 36.0}
    assert album_figures(report) == {"album1_1gpu_ar_s": 30, "album1_1gpu_s": 36.0}
    events[-1] = event("a", "decode", 35, 35, ok=False)
    assert album_figures(report) == {"album1_1gpu_ar_s": 30}
    events[1] = event("a", "semantic", 10, 12, ok=False)
    assert album_figures(report) == {}
    # the start stands whatever failed later; the wall only when the album finished
    report.update(first_stage_after_s=40.0, render_wall_s=80.0)
    assert album_figures(report) == {"album1_1gpu_first_stage_s": 40.0}
    events[1], events[-1] = event("a", "semantic", 10, 30), event("a", "decode", 35, 36)
    assert album_figures(report) == {"album1_1gpu_ar_s": 30, "album1_1gpu_s": 36.0,
                                     "album1_1gpu_first_stage_s": 40.0, "album1_1gpu_wall_s": 80.0}
