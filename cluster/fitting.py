"""Calibration factors fitted to measurements: what a benchmark measured on a known GPU → the factors that make the
cost model (costs.py) reproduce it, written as a calibration file (calibration.py).

Responsible for: `Measured`, `fit_calibration` and `write_calibration`. It sits above both costs.py (whose formulas
it inverts) and calibration.py (whose record it fills), so neither imports the other's way back.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from .calibration import Calibration, calibration_toml
from .costs import decode_peak, track_work
from .gpus import lookup
from .workload import AR_STAGES, ModelShape, TrackShape


@dataclass(frozen=True)
class Measured:
    """What a benchmark measured: seconds per stage for one track alone (batch 1) on one GPU model.

    `ar_tokens_per_s` optionally maps AR batch size -> aggregate tokens/s at this track's semantic-stage context; two
    or more points let the AR step overhead and the per-track overhead be fitted separately. `stage_tokens_per_s`
    does the same per AR stage ({"plan": {batch: tokens/s}, "semantic": {...}}) for per-stage overheads.
    `decode_precision` says how seconds["decode"] was decoded; `decode_seconds` optionally adds the track's decode in
    other precisions ({"fp32": s, "tf32x3": s}), so one run fits both decode factors.
    """
    gpu: str
    track: TrackShape
    seconds: dict                     # stage -> seconds (any subset of plan, semantic, acoustic, decode)
    ar_tokens_per_s: dict = field(default_factory=dict)
    stage_tokens_per_s: dict = field(default_factory=dict)
    source: str = "measured"
    decode_precision: str = "tf32x3"
    decode_seconds: dict = field(default_factory=dict)


def write_calibration(path: str | Path, measured: Measured, base: Calibration | None = None, model=None) -> Calibration:
    """Fit factors to `measured`, write them as TOML to `path`, and return them (stages not measured keep `base`)."""
    fitted = fit_calibration(measured, base or Calibration(), model)
    Path(path).write_text(calibration_toml(fitted), encoding="utf-8")
    return fitted


def fit_calibration(measured: Measured, base: Calibration, model: ModelShape | None = None) -> Calibration:
    """Factors that reproduce `measured` on the catalogue's figures for measured.gpu (see `Measured`)."""
    model = model or ModelShape.yue2_3b()
    spec = lookup(measured.gpu)
    if spec is None:
        raise ValueError(f"unknown GPU '{measured.gpu}': calibration needs a catalogue entry for its peaks")
    bf16, bw = spec.bf16_tflops * 1e12, spec.bandwidth_gbs * 1e9
    cal, t, s = replace(base, gpu=spec.model, source=measured.source), measured.track, measured.seconds
    if "acoustic" in s:
        cal = replace(cal, acoustic_efficiency=_efficiency(t, "acoustic", model, bf16, s["acoustic"], cal))
    decodes = {**measured.decode_seconds, **({measured.decode_precision: s["decode"]} if "decode" in s else {})}
    for precision, seconds in decodes.items():
        if precision in ("fp32", "tf32x3"):        # tf32, another song's bytes, is not a mode the planner books
            rate, attr = decode_peak(spec, precision)
            cal = replace(cal, **{attr: _efficiency(t, "decode", model, rate * 1e12, seconds, cal)})
    cal = _fit_ar(cal, measured, model, bw)
    for stage, points in measured.stage_tokens_per_s.items():
        fit = _line_fit(points, t.mean_context(stage) * model.kv_bytes_per_token * t.cfg_branches, model,
                        bw * cal.ar_bandwidth_efficiency)
        # a fit that fails (a negative overhead) leaves the stage to the [ar] values, never to an older fit
        fixed, per_track = fit if fit is not None else (None, None)
        cal = replace(cal, **{f"{stage}_step_overhead_s": fixed, f"{stage}_track_step_overhead_s": per_track})
    record = {"audio_seconds": t.audio_seconds, "plan_tokens": t.plan_tokens, "semantic_tokens": t.semantic_tokens,
              "prompt_tokens": t.prompt_tokens, **{f"{k}_s": float(v) for k, v in s.items()}}
    record.update({f"ar_batch{b}_tokens_per_s": float(v) for b, v in measured.ar_tokens_per_s.items()})
    record.update({f"{st}_batch{b}_tokens_per_s": float(v) for st, pts in measured.stage_tokens_per_s.items()
                   for b, v in pts.items()})
    return replace(cal, measured=record)


def _efficiency(track: TrackShape, stage: str, model: ModelShape, rate: float, seconds: float,
                cal: Calibration) -> float:
    return track_work(track, stage, model).flop / (rate * (seconds - cal.job_overhead_s))


def _line_fit(points: dict, kv: float, model: ModelShape, stream: float) -> tuple[float, float] | None:
    """step(B) − (weights + B·kv) / stream = fixed + B·per_track, by least squares over ≥ 2 batch points."""
    pts = sorted(points.items())
    if len(pts) < 2:
        return None
    xs = [float(b) for b, _ in pts]
    ys = [b / tps - (model.ar_step_weight_bytes + b * kv) / stream for b, tps in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return (my - slope * mx, slope) if slope >= 0 and my - slope * mx >= 0 else None


def _fit_ar(cal: Calibration, measured: Measured, model: ModelShape, bw: float) -> Calibration:
    """AR overheads from measurements, the bandwidth factor kept (it comes from the copy-bandwidth measurement).

    With two or more batch points the per-step and the per-track overhead come from `_line_fit`; with one track
    alone, the per-step overhead absorbs both.
    """
    t = measured.track
    kv = t.mean_context("semantic") * model.kv_bytes_per_token * t.cfg_branches
    stream = bw * cal.ar_bandwidth_efficiency
    fit = _line_fit(measured.ar_tokens_per_s, kv, model, stream)
    if fit is not None:
        return replace(cal, ar_step_overhead_s=fit[0], ar_track_step_overhead_s=fit[1])
    steps = sum(t.generated_tokens(st) for st in AR_STAGES if st in measured.seconds)
    if not steps:
        return cal
    spec_bf16 = lookup(measured.gpu).bf16_tflops * 1e12
    rest = 0.0
    for st in (x for x in AR_STAGES if x in measured.seconds):
        w = track_work(t, st, model)
        per_step = (model.ar_step_weight_bytes + w.kv_bytes_per_step) / stream
        rest += measured.seconds[st] - cal.job_overhead_s - w.flop / (spec_bf16 * cal.prefill_efficiency) - w.tokens * per_step
    return replace(cal, ar_step_overhead_s=max(0.0, rest / steps), ar_track_step_overhead_s=0.0)
