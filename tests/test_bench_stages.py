"""`farm bench song` and `farm bench acoustic` on the tiny checkpoint (CPU): their figures land in the summary's
keys. (Timings mean nothing here; the H200 figures are in docs/benchmarks.md.)"""
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
    precisions = {r["precision"]: r for r in json.loads(report.read_text())["decode_precisions"]}
    assert set(precisions) == {"fp32", "tf32", "tf32x3"} and precisions["fp32"]["max_abs"] == 0.0
    assert precisions["tf32"]["max_abs"] == 0.0 and "decode in tf32" in r.output      # a CPU has no TF32
    assert keys["decode_tf32_s"]["value"] == round(precisions["tf32"]["seconds"], 4)
    assert keys["decode_fp32_s"]["value"] == round(precisions["fp32"]["seconds"], 4)
    assert "decode_fp32_max_abs" not in keys
    assert keys["decode_tf32x3_max_abs"]["value"] == 0.0          # the CPU decodes in FP32 whatever is asked



def test_summary_keeps_four_significant_digits_of_a_distance(tmp_path):
    """Seconds keep four decimals; a distance (`…_abs`) four significant digits: tf32x3's 9e-6 from FP32 is not 0."""
    from farm.measured import update_summary

    env = {"date": "d", "gpu": "g"}
    keys = update_summary(tmp_path / "s.json", {"decode_tf32x3_max_abs": 8.959323e-06, "decode_s": 0.553012}, env)
    assert keys["decode_tf32x3_max_abs"]["value"] == 8.959e-06 and keys["decode_s"]["value"] == 0.553


def test_bench_song_with_fp8_ar_weights_writes_only_the_quantised_key(tiny_ckpt_dir, tmp_path):
    """--format fp8: the AR step reads FP8 weights; the track's time is `song_s_fp8`, `song_s_quantized` is the fastest
    quantised format's (here an NVFP4 figure already in the summary is slower), and the BF16 keys stay as they were
    (the acoustic and decode stages do not change with the AR format)."""
    summary = tmp_path / "summary.json"
    summary.write_text(json.dumps({"song_s": {"value": 1.0, "gpu": "x", "date": "d", "command": "c"},
                                   "song_s_nvfp4": {"value": 1e6, "gpu": "x", "date": "d", "command": "c"}}))
    r = CliRunner().invoke(app, ["bench", "song", "--model", str(tiny_ckpt_dir), "--device", "cpu",
                                 "--plan-tokens", "24", "--semantic-tokens", "40", "--format", "fp8",
                                 "--summary", str(summary)])
    assert r.exit_code == 0, r.output
    keys = json.loads(summary.read_text())
    assert set(keys) == {"song_s", "song_s_fp8", "song_s_nvfp4", "song_s_quantized"} and keys["song_s"]["value"] == 1.0
    assert keys["song_s_quantized"] == keys["song_s_fp8"] and keys["song_s_fp8"]["value"] > 0
    assert "AR weights fp8" in r.output.replace("\n", " ")

def test_the_decode_precision_changes_only_the_decode_key():
    """decode_precision enters the decode stage's key unless it is fp32 (the default before tf32x3): fp32 albums
    rendered before the option keep their keys, and no precision's track is mistaken for another's on resume."""
    import dataclasses

    from farm.identity import _digest, stage_keys
    from stages.config import from_toml
    from stages.protocol import SongRequest
    from stages.requests import default_settings

    cfg = from_toml("configs/models/tiny.toml")
    request, identity = SongRequest(style="s", lyrics="l"), {"model": "m", "vae": "v"}
    default = default_settings(cfg)
    keys = {p: stage_keys(identity, request, dataclasses.replace(default, decode_precision=p))
            for p in ("fp32", "tf32", "tf32x3")}
    assert stage_keys(identity, request, default) == keys["tf32x3"]
    assert len({k["decode"] for k in keys.values()}) == 3
    assert all(k[s] == keys["fp32"][s] for k in keys.values() for s in ("plan", "semantic", "acoustic"))
    before = {"acoustic": keys["fp32"]["acoustic"], "vae": "v", "core": default.vae_core_frames,
              "halo": default.vae_halo_frames}                  # the decode key as written before the option
    assert keys["fp32"]["decode"] == _digest(before)


def test_bench_acoustic_times_both_paths_and_writes_its_keys(tiny_ckpt_dir, tmp_path):
    report, summary = tmp_path / "acoustic.json", tmp_path / "summary.json"
    r = CliRunner().invoke(app, ["bench", "acoustic", "--model", str(tiny_ckpt_dir), "--device", "cpu",
                                 "--evals", "1", "--json", str(report), "--summary", str(summary)])
    assert r.exit_code == 0, r.output
    data, keys = json.loads(report.read_text()), json.loads(summary.read_text())
    assert set(data["eval_ms"]) == {"engine", "plain"} and all(v > 0 for v in data["eval_ms"].values())
    assert data["flop_per_eval"] > 0 and data["mfu"]["engine"] > 0
    assert keys["acoustic_mfu"]["value"] == round(data["mfu"]["engine"], 4)
    assert keys["acoustic_eval_ms"]["value"] == round(data["eval_ms"]["engine"], 4)
    assert data["numerics"]["engine"]["mean_abs"] < 1e-5        # FP32 on the CPU: the same path as the FP32 run


def test_bench_quality_compares_every_format_with_the_bf16_engine(tiny_ckpt_dir, tmp_path):
    """Each variant × phase against the BF16 engine on its own samples: on the CPU the tiny model runs in FP32, so
    the plain forward matches it to rounding, and FP8 weights or an FP8 cache move the distributions visibly."""
    report, summary = tmp_path / "quality.json", tmp_path / "summary.json"
    r = CliRunner().invoke(app, ["bench", "quality", "--model", str(tiny_ckpt_dir), "--device", "cpu",
                                 "--plan-tokens", "24", "--semantic-tokens", "40", "--json", str(report),
                                 "--summary", str(summary)])
    assert r.exit_code == 0, r.output
    rows = {(row["variant"], row["phase"]): row for row in json.loads(report.read_text())["rows"]}
    assert len(rows) == 12 and {p for _, p in rows} == {"plan", "semantic"}
    assert all(rows[("bf16 (other path)", p)]["mean_tv"] < 1e-4 for p in ("plan", "semantic"))
    assert all(rows[(v, p)]["mean_tv"] > 1e-4 for v in ("fp8 weights", "fp8 weights, W8A8", "nvfp4 weights",
                                                          "fp8 KV cache") for p in ("plan", "semantic"))
    assert all(rows[("nvfp4 weights", p)]["mean_tv"] > rows[("fp8 weights", p)]["mean_tv"]
               for p in ("plan", "semantic"))
    assert rows[("fp8 weights", "plan")]["positions"] == 24 and rows[("fp8 weights", "semantic")]["positions"] == 40
    keys = json.loads(summary.read_text())
    assert keys["quality_semantic_tv_fp8"]["value"] == round(rows[("fp8 weights", "semantic")]["mean_tv"], 4)
    assert keys["quality_semantic_tv_nvfp4"]["value"] == round(rows[("nvfp4 weights", "semantic")]["mean_tv"], 4)
    assert keys["quality_semantic_tv_fp8_w8a8"]["value"] == round(rows[("fp8 weights, W8A8", "semantic")]
                                                                  ["mean_tv"], 4)
    assert "RANDOM weights" in r.output and "3.8%" in r.output and "6.3%" in r.output
