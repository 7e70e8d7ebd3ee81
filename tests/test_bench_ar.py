"""`farm bench ar` end to end on the tiny checkpoint (CPU): the command runs, reports every point it was asked
for, finds the engine batch-invariant, profiles a step, and writes the headline keys into a summary file. (Its
timings mean nothing here; the H200 figures are in docs/benchmarks.md.)"""
from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from farm.cli import app

pytestmark = pytest.mark.slow     # the whole benchmark command, ~12 s on two cores: not a unit test


def test_bench_ar_reports_points_invariance_numerics_and_summary(tiny_ckpt_dir, tmp_path):
    report, summary = tmp_path / "ar.json", tmp_path / "summary.json"
    summary.write_text(json.dumps({"song_s": {"value": 1.0, "gpu": "x", "date": "d", "command": "c"}}))
    r = CliRunner().invoke(app, ["bench", "ar", "--model", str(tiny_ckpt_dir), "--device", "cpu", "--rows", "1",
                                 "--rows", "3", "--blocks", "1", "--numerics-tokens", "80", "--json", str(report),
                                 "--summary", str(summary)])
    assert r.exit_code == 0, r.output
    data = json.loads(report.read_text())
    assert [(x["scenario"], x["rows"]) for x in data["rows"]] == [
        (s, n) for s in ("prompt-450", "plan-ref", "semantic-ref") for n in (1, 3)]
    assert data["invariance"]["identical"]
    assert data["invariance"]["first_difference"] == {"inv-plan": None, "inv-sem-a": None, "inv-sem-b": None}
    # where the step's time goes: the fewest rows at the prompt, the most at the semantic context
    assert [(p["rows"], p["kind"]) for p in data["profiles"]] == [(1, "plan"), (3, "semantic")]
    assert all(p["kernels_us"] > 0 and p["steps"] == 3 * 16 for p in data["profiles"])
    assert "step profile, 1 row(s) of plan" in r.output
    assert data["numerics"]["fast_step"]["max_abs"] < 1e-4          # tiny is FP32: the step equals the forward
    keys = json.loads(summary.read_text())
    assert keys["song_s"]["value"] == 1.0                             # kept
    assert keys["ar_b1_tok_s"]["value"] > 0 and keys["ar_b1_tok_s"]["command"].startswith("farm ")


@pytest.mark.parametrize("weights", ["fp8", "nvfp4"])
def test_bench_ar_chain_on_takes_bf16_weights_only(tiny_ckpt_dir, weights):
    """The layer chain's kernel reads BF16 weights: `--chain on` with quantised ones is one line and exit 2."""
    r = CliRunner().invoke(app, ["bench", "ar", "--model", str(tiny_ckpt_dir), "--device", "cpu", "--format", weights,
                                 "--chain", "on"])
    assert r.exit_code == 2, r.output
    assert r.output.strip().splitlines()[-1] == (f"error: --chain on: the layer chain's kernel reads bf16 weights, not "
                                                 f"{weights} (the W8A8 numerics have no fast kernel; farm bench "
                                                 "quality measures them)"), r.output
