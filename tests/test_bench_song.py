"""`farm bench song` on the tiny checkpoint (CPU): the per-stage table's figures land in the summary's keys.
(Its timings mean nothing here; the H200 figures are in docs/benchmarks.md.)"""
from __future__ import annotations

import json

from typer.testing import CliRunner

from farm.cli import app


def test_bench_song_writes_the_stage_keys(tiny_ckpt_dir, tmp_path):
    report, summary = tmp_path / "song.json", tmp_path / "summary.json"
    r = CliRunner().invoke(app, ["bench", "song", "--model", str(tiny_ckpt_dir), "--device", "cpu",
                                 "--plan-tokens", "24", "--semantic-tokens", "40", "--json", str(report),
                                 "--summary", str(summary)])
    assert r.exit_code == 0, r.output
    rows = {row["stage"]: row["seconds"] for row in json.loads(report.read_text())["rows"]}
    keys = json.loads(summary.read_text())
    assert keys["acoustic_s"]["value"] == round(rows["acoustic"], 4) > 0
    assert keys["decode_s"]["value"] == round(rows["decode"], 4) > 0
    assert keys["song_s"]["value"] == round(sum(rows.values()), 4)
    assert keys["acoustic_s"]["date"] == keys["song_s"]["date"] and "gpu" in keys["decode_s"]
