"""docs/measured/summary.json: the headline figure of every GPU benchmark, one key per figure.

Each key holds {"value", "gpu", "date", "command"}; a run updates the keys it measured and keeps the others, so the
file always says where the project stands and where each figure came from. The README shows it.
"""
from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path


QUANTISED_SONG = ("song_s_fp8", "song_s_nvfp4")     # song_s_quantized is the best of these


def _rounded(key: str, value: float) -> float:
    """Four decimals, but four significant digits for a distance (`…_abs`): a decode's 9e-6 is not 0."""
    return float(f"{value:.4g}") if key.endswith("_abs") else round(value, 4)


def update_summary(path: Path, figures: dict[str, float], env: dict, command: str | None = None) -> dict:
    path = Path(path)
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        summary = {}
    command = command or "farm " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    for key, value in figures.items():
        if value is not None:
            summary[key] = {"value": _rounded(key, float(value)), "gpu": env.get("gpu", env.get("device")),
                            "date": env["date"], "command": command}
    best = min((summary[k] for k in QUANTISED_SONG if k in summary), key=lambda e: e["value"], default=None)
    if best is not None:           # issue 10's "a quantised AR": the fastest format measured, with its own record
        summary["song_s_quantized"] = dict(best)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(dict(sorted(summary.items())), indent=2) + "\n")
    os.replace(tmp, path)
    return summary


def ar_figures(report: dict) -> dict[str, float]:
    """The AR headline: one row at the 450-token prompt, and 24 rows at the reference track's semantic context."""
    def row(scenario, rows):
        return next((r for r in report["rows"] if r["scenario"] == scenario and r["rows"] == rows), {})

    b1, b24 = row("prompt-450", 1), row("semantic-ref", 24)
    fmt, kv = report.get("weight_format", "bf16"), report.get("kv_format", "bf16")
    # ar_b1_tok_s, ar_b1_tok_s_fp8, ar_b1_tok_s_kvfp8, ar_b1_tok_s_fp8_kvfp8
    suffix = ("" if fmt == "bf16" else f"_{fmt}") + ("" if kv == "bf16" else f"_kv{kv}")
    return {f"ar_b1_tok_s{suffix}": b1.get("tokens_s"), f"ar_b1_floor_ratio{suffix}": b1.get("floor_ratio"),
            f"ar_b24_tok_s{suffix}": b24.get("tokens_s"), f"ar_b24_floor_ratio{suffix}": b24.get("floor_ratio")}


def song_figures(report: dict) -> dict[str, float]:
    """The whole track, and the acoustic and decode stages alone (issue 9's `acoustic_s`, `decode_s`); with
    quantised AR weights only the track's time, as `song_s_<format>` (the other stages do not change; the summary's
    `song_s_quantized` is then the fastest format's)."""
    fmt = report["environment"].get("weight_format", "bf16")
    if fmt != "bf16":
        return {f"song_s_{fmt}": report["environment"]["total_seconds"]}
    seconds = {r["stage"]: r["seconds"] for r in report["rows"]}
    out = {"song_s": report["environment"]["total_seconds"], "acoustic_s": seconds.get("acoustic"),
           "decode_s": seconds.get("decode")}
    for r in report.get("decode_precisions", []):      # decode_fp32_s, decode_tf32_s, decode_tf32x3_mean_abs, …
        out[f"decode_{r['precision']}_s"] = r["seconds"]
        if r["precision"] != "fp32":                      # the others' distances from it
            out |= {f"decode_{r['precision']}_{k}": r[k] for k in ("mean_abs", "max_abs")}
    return out


def quality_figures(report: dict) -> dict[str, float]:
    """quality_<phase>_tv_<variant> and quality_<phase>_top1_<variant>: each format against the BF16 engine
    (variant: floor = the same weights through the plain forward, fp8, fp8_w8a8 (activations quantised too), nvfp4,
    kvfp8, fp8_kvfp8)."""
    names = {"bf16 (other path)": "floor", "fp8 weights": "fp8", "fp8 weights, W8A8": "fp8_w8a8",
             "nvfp4 weights": "nvfp4", "fp8 KV cache": "kvfp8", "fp8 weights + KV": "fp8_kvfp8"}
    out = {}
    for row in report["rows"]:
        name = names[row["variant"]]
        out[f"quality_{row['phase']}_tv_{name}"] = row["mean_tv"]
        out[f"quality_{row['phase']}_top1_{name}"] = row["top1_agreement"]
    return out


def acoustic_figures(report: dict) -> dict[str, float]:
    """The acoustic engine's time per velocity evaluation and its share of the measured matrix-multiply rate."""
    return {"acoustic_eval_ms": report["eval_ms"]["engine"], "acoustic_mfu": report["mfu"]["engine"]}


def album_figures(report: dict) -> dict[str, float]:
    """album<N>_<G>gpu_s: the makespan of N tracks on G cards; _ar_s: first plan start → last semantic end (the
    AR part); _first_stage_s: how long after the render's start the first stage began (Ray, the plan, the
    workers' start); _wall_s: the render's whole wall; and the speed-up over the sequential path when it ran. A
    figure that needs a stage which failed in the run is left out (the AR part and the start stand when only later
    stages failed)."""
    cards = len({c for s in report["stages"] for c in s["cards"]})
    kv = "" if report.get("kv_cache", "bf16") == "bf16" else f"_kv{report['kv_cache']}"
    name = f"album{report['tracks']}{'_mixed' if report.get('mixed') else ''}_{cards}gpu{kv}"
    failed = {e["stage"] for e in report["events"] if not e["ok"]}
    ar = [e for e in report["events"] if e["ok"] and e["stage"] in ("plan", "semantic")]
    out = {}
    if ar and not failed & {"plan", "semantic"}:
        out[f"{name}_ar_s"] = max(e["end"] for e in ar) - min(e["start"] for e in ar)
    if report.get("first_stage_after_s") is not None:
        out[f"{name}_first_stage_s"] = report["first_stage_after_s"]
    if failed:
        return out
    out[f"{name}_s"] = report["album_makespan_s"]
    if report.get("render_wall_s") is not None:
        out[f"{name}_wall_s"] = report["render_wall_s"]
    if "sequential" in report:
        one = f"album{report['tracks']}{'_mixed' if report.get('mixed') else ''}"
        speedup = f"{one}_speedup_vs_sequential" if cards == 1 else f"{name}_speedup_vs_sequential"
        out[speedup] = report["sequential"]["wall_s"] / report["album_makespan_s"]
    return out
