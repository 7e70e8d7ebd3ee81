"""The H100 calibration's format terms, fitted on the twenty-fourth session's H100 runs (docs/benchmarks.md).

`farm calibrate` fits the BF16 song and album; what the formats cost beyond their bytes is fitted here, as the H200's
was by hand (cluster/calibration.py):
- fp8 step overhead: so that the model gives the measured FP8 song's AR seconds (plan + semantic), with the chain's
  saving kept at the H200's (a Hopper card: FP8 steps lack the chain on both);
- nvfp4 step overhead: so that the model gives the measured NVFP4/BF16 step ratio of `farm bench ar` at one row,
  the mean over its three one-row scenarios (no NVFP4 song was run);
- an FP8 KV byte's cost: so that the model gives the AR part of the 12-track album with the FP8 KV cache against
  the BF16 one, both measured in one call on one machine.
Usage: python docs/measured/2026-12-06-cpu-s53-h100-format-fit.py CALIBRATION.toml (prints the three values)
"""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

from cluster.calibration import load_calibration
from cluster.costs import card_speed, step_seconds, track_work
from cluster.gpus import device_from_spec, lookup
from cluster.workload import ModelShape, TrackShape, FRAMES_PER_SECOND

M = Path(__file__).resolve().parent
S = "2026-12-06-h100-s53-"
cal = load_calibration(sys.argv[1])
gpu = device_from_spec(lookup("NVIDIA H100 80GB HBM3"), "fit", 0)
song = json.loads((M / f"{S}bench-song.json").read_text())
env = song["environment"]
track = TrackShape(env["semantic_tokens"] / FRAMES_PER_SECOND, env["plan_tokens"], env["semantic_tokens"],
                   prompt_tokens=env["prompt_tokens"])


def ar_seconds(c, model, rows=1) -> float:
    """The AR stages of `rows` reference tracks decoded together (their steps only; prefill is the same)."""
    total = 0.0
    for stage in ("plan", "semantic"):
        speed, work = card_speed(gpu, stage, model, c), track_work(track, stage, model)
        total += work.tokens * step_seconds(speed, rows * work.kv_bytes_per_step, rows * work.flop_per_step, rows)
    return total


def solve(f, lo, hi, target):
    """f increasing on [lo, hi]: the x with f(x) = target, by bisection."""
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < target else (lo, mid)
    return (lo + hi) / 2


def measured_ar(report: dict) -> float:
    return sum(r["seconds"] for r in report["rows"] if r["stage"] in ("plan", "semantic"))


bf16 = ModelShape.yue2_3b()
fp8_song = json.loads((M / f"{S}bench-song-fp8.json").read_text())
# the model's FP8 song against the measured one, scaled by the BF16 song's measured/model ratio (what calibrate fit)
scale = measured_ar(song) / ar_seconds(cal, bf16)
fp8 = solve(lambda x: scale * ar_seconds(replace(cal, fp8_step_overhead_s=x), bf16.with_formats("fp8")), 0, 5e-3,
            measured_ar(fp8_song))


def one_row_steps(report: dict) -> list[float]:
    return [p["step_ms"] for p in report["rows"] if p["rows"] == 1]


def row_model(c, model, ctx, sampling):
    speed = card_speed(gpu, sampling, model, c)
    return step_seconds(speed, ctx * model.ar_kv_bytes_per_token, model.ar_token_flop(ctx))


ar_bf16 = json.loads((M / f"{S}bench-ar-bf16.json").read_text())
ar_nvfp4 = json.loads((M / f"{S}bench-ar-nvfp4.json").read_text())
points = [(p["context"], p["kind"]) for p in ar_bf16["rows"] if p["rows"] == 1]
ratio = sum(b / a for a, b in zip(one_row_steps(ar_bf16), one_row_steps(ar_nvfp4))) / len(points)
nvfp4 = solve(lambda x: sum(row_model(replace(cal, nvfp4_step_overhead_s=x), bf16.with_formats("nvfp4"), c, s)
                            / row_model(cal, bf16, c, s) for c, s in points) / len(points), 0, 5e-3, ratio)


def album_ar(report: dict) -> float:
    ar = [e for e in report["events"] if e["ok"] and e["stage"] in ("plan", "semantic")]
    return max(e["end"] for e in ar) - min(e["start"] for e in ar)


kv_b, kv_f = (json.loads((M / f"{S}album12-kv{k}.json").read_text()) for k in ("bf16", "fp8"))
rows = kv_b["tracks"]
target = album_ar(kv_f) / album_ar(kv_b) * ar_seconds(cal, bf16, rows)   # the measured ratio on the model's scale
kv = solve(lambda x: ar_seconds(replace(cal, kvfp8_byte_cost=x), bf16.with_formats(kv_format="fp8"), rows),
           0.5, 4.0, target)
print(f"fp8_step_overhead_s = {fp8:.3g}  (FP8 song AR {measured_ar(fp8_song):.2f} s, BF16 {measured_ar(song):.2f})")
print(f"nvfp4_step_overhead_s = {nvfp4:.3g}  (NVFP4/BF16 one-row step ratio {ratio:.3f})")
print(f"kvfp8_byte_cost = {kv:.3g}  (12-track AR part: FP8 KV {album_ar(kv_f):.2f} s, BF16 {album_ar(kv_b):.2f} s)")
