"""`farm calibrate` on real H200 reports from docs/measured: the fit lands in the file, what the reports do not
measure keeps the file's values, and an unreadable file is refused in one line."""
from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cluster.calibration import load_calibration
from farm.cli import app

ROOT = Path(__file__).resolve().parents[1]
SONG = ROOT / "docs/measured/2026-12-02-h200-s26-bench-song.json"
ALBUM = ROOT / "docs/measured/2026-12-02-h200-s26-bench-album12-seq.json"


def test_calibrate_fits_the_reports_and_keeps_what_they_do_not_measure(tmp_path):
    target = tmp_path / "h200.toml"
    shutil.copy(ROOT / "configs/calibration/h200.toml", target)
    text = target.read_text().replace("[nvfp4]\nstep_overhead_s = ", "[nvfp4]\nstep_overhead_s = 0.00123 # ")
    target.write_text(text.replace("ar_slowdown = ", "ar_slowdown = 4.5 # "))
    result = CliRunner().invoke(app, ["calibrate", str(SONG), "--album", str(ALBUM), "--out", str(target)])
    assert result.exit_code == 0, result.output
    cal, data = load_calibration(target), tomllib.loads(target.read_text())
    assert cal.nvfp4_step_overhead_s == 0.00123 and cal.overlap_ar_slowdown == 4.5     # not measured: kept
    seconds = {row["stage"]: row["seconds"] for row in json.loads(SONG.read_text())["rows"]}
    assert data["measured"]["plan_s"] == pytest.approx(seconds["plan"])                # measured: refitted
    assert data["measured"]["plan_batch12_tokens_per_s"] > 3000                         # the album's batch point
    assert cal.source.startswith("farm bench song, 2026-12-02") and cal.source.endswith("bench album of 12")


def test_calibrate_refuses_an_unreadable_calibration_in_one_line(tmp_path):
    target = tmp_path / "h200.toml"
    target.write_text("[ar]\nstep_overhead_s = 'fast'\n")
    result = CliRunner().invoke(app, ["calibrate", str(SONG), "--out", str(target)])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{target}: an existing calibration" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert target.read_text() == "[ar]\nstep_overhead_s = 'fast'\n"
