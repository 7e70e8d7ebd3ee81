"""`farm calibrate` and `farm bench model-check` on real H200 and H100 reports from docs/measured: the fit lands in
the file, what the reports do not measure keeps the file's values, an unreadable file is refused in one line, and
the model check simulates each run as it ran."""
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


def _simulated(album: Path, *args: str) -> tuple[float, float]:
    """`farm bench model-check` on a report: (measured, simulated) makespan."""
    result = CliRunner().invoke(app, ["bench", "model-check", str(album), *args])
    assert result.exit_code == 0, result.output
    last = result.output.strip().splitlines()[-1]
    return float(last.split("measured makespan ")[1].split(" s")[0]), float(last.split("simulated ")[1].split(" s")[0])


def test_model_check_simulates_the_runs_own_tracks_and_kv_cache(tmp_path):
    """The H100 albums of 2026-12-06 (one machine, one call: BF16 then FP8 KV) and the H200's mixed album: the
    simulator is given each run's KV format and track lengths, and the shipped H100 calibration (fitted on those
    runs' day) predicts both H100 albums within 5 %."""
    measured_bf16, bf16 = _simulated(ROOT / "docs/measured/2026-12-06-h100-s53-album12-kvbf16.json")
    measured_fp8, fp8 = _simulated(ROOT / "docs/measured/2026-12-06-h100-s53-album12-kvfp8.json")
    assert fp8 < 0.95 * bf16 and measured_fp8 < measured_bf16
    for measured, simulated in ((measured_bf16, bf16), (measured_fp8, fp8)):
        assert simulated == pytest.approx(measured, rel=0.05)
    mixed = ROOT / "docs/measured/2026-12-05-h200-s48-bench-album12-mixed.json"
    uniform = json.loads(mixed.read_text())
    del uniform["lengths"]
    (tmp_path / "uniform.json").write_text(json.dumps(uniform))
    assert _simulated(mixed)[1] != _simulated(tmp_path / "uniform.json")[1]


def test_an_h100_plan_uses_the_h100_calibration():
    from cluster.gpus import device_from_spec, lookup
    from farm.plan_commands import options_for

    options = options_for(None)
    h100, h200 = (options.calibration_for(device_from_spec(lookup(m), "n", 0)) for m in ("H100 SXM", "H200"))
    assert (h100.gpu, h200.gpu) == ("H100 SXM", "H200")
    assert h100.source.startswith("farm bench song, ") and h100.source != h200.source   # its own runs
    assert h100.kvfp8_byte_cost < h200.kvfp8_byte_cost      # the widening weighs less against fewer bytes/s
