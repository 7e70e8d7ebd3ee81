"""`farm bench song`: one forced-length track through the sequential path, as a table against the H200 floors.

With random weights generation never ends by itself, so lengths are forced: the end id is masked until the target
length and generation stops there. Every printed table says so.
"""
from __future__ import annotations

import datetime
import json
import platform
import statistics
import time
from pathlib import Path

# The reference track (4,540 plan + 5,371 semantic tokens, 5,371 frames) on one H200 (docs/benchmarks.md).
FLOOR_SECONDS = {"plan": 4540 * 3.58e9 / 4.1e12, "semantic": 5371 * 3.58e9 / 4.1e12, "acoustic": 1.35,
                 "decode": 0.3}      # AR at batch 1: the weights are read once per token (3.58 GB at 4.1 TB/s)
REFERENCE_RUNTIME_SECONDS = {"plan": 29.2, "semantic": 36.5, "acoustic": 5.5, "decode": 1.1}
BENCH_STYLE = "cinematic pop, female vocal, piano and strings, 96 bpm, warm, emotional"


def bench_lyrics(layout) -> str:
    """~850 characters of lyrics for full-size models; the short demo lyric fits tiny's 512-token context."""
    from ..models import configs_dir

    name = "bench.txt" if layout.tokenizer == "tiktoken" else "demo.txt"
    return (configs_dir() / "lyrics" / name).read_text(encoding="utf-8")


def environment(device: str) -> dict:
    import torch

    env = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "python": platform.python_version(), "device": device,
           "cpu_threads": torch.get_num_threads()}
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def check_forced_lengths(ckpt, request, settings, plan_tokens: int, semantic_tokens: int) -> None:
    """The forced lengths must fit the model's context (stages.requests.validate): checked before any engine loads,
    and named by their flags."""
    from stages.protocol import ProtocolError
    from stages.requests import validate

    from ..errors import UserError

    try:
        validate(ckpt, request, settings)
    except ProtocolError as exc:
        raise UserError(f"--plan-tokens {plan_tokens} / --semantic-tokens {semantic_tokens}: {exc}") from None


def run_song_bench(*, model: str, vae: str | None, plan_tokens: int, semantic_tokens: int, device: str,
                   repeats: int, json_out: Path | None, weight_format: str = "bf16") -> list[dict]:
    from stages.protocol import SongRequest
    from stages.requests import default_settings, open_checkpoint
    from stages.song import SongEngines, render_song

    from ..devices import pick_device
    from ..models import resolve_model

    device = pick_device(device)
    paths = resolve_model(model, vae)
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    request = SongRequest(style=BENCH_STYLE, lyrics=bench_lyrics(ckpt.cfg.tokens), cot="full")
    settings = default_settings(ckpt.cfg, plan_tokens=plan_tokens, semantic_tokens=semantic_tokens)
    check_forced_lengths(ckpt, request, settings, plan_tokens, semantic_tokens)
    start = time.perf_counter()
    engines = SongEngines(ckpt, device=device, fast=device.startswith("cuda"), ar_format=weight_format)
    load_seconds = time.perf_counter() - start
    warm = default_settings(ckpt.cfg, plan_tokens=min(plan_tokens, 32), semantic_tokens=min(semantic_tokens, 64))
    render_song(engines, request, warm)                      # kernels, allocator and graphs warm
    runs = [render_song(engines, request, settings) for _ in range(max(1, repeats))]
    rows = [_row(stage, [r.timings[stage] for r in runs], ckpt.cfg.name) for stage in runs[0].timings]
    total = sum(r["seconds"] for r in rows)
    from stages.protocol import plan_prefix

    env = {**environment(device), "model": ckpt.cfg.name, "load_seconds": load_seconds, "repeats": len(runs),
           "plan_tokens": plan_tokens, "semantic_tokens": semantic_tokens, "total_seconds": total,
           "weight_format": weight_format, "decode_precision": settings.decode_precision,
           "prompt_tokens": len(plan_prefix(request, ckpt.tokenizer, ckpt.cfg.tokens))}
    print_table(rows, env)
    precisions = decode_precisions(engines, runs[-1].latents, settings, device)
    report = {"environment": env, "rows": rows, "decode_precisions": precisions}
    if json_out:
        Path(json_out).write_text(json.dumps(report, indent=2) + "\n")
    return report


def decode_precisions(engines, latents, settings, device: str) -> list[dict]:
    """The song's latents decoded in every VAE precision (best of two, device synchronised), each against FP32:
    the speed a faster mode buys and the error it costs, printed side by side."""
    import numpy as np
    import torch

    from stages.vae import PRECISIONS, decode_audio

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    out, reference = [], None
    for precision in PRECISIONS:
        best = float("inf")
        for _ in range(2):
            sync()
            start = time.perf_counter()
            audio = decode_audio(engines.decoder, latents, settings.vae_core_frames, settings.vae_halo_frames,
                                 precision)
            sync()
            best = min(best, time.perf_counter() - start)
        reference = audio if reference is None else reference
        diff = np.abs(audio - reference)
        out.append({"precision": precision, "seconds": best, "max_abs": float(diff.max()),
                    "mean_abs": float(diff.mean())})
    for r in out:
        print(f"decode in {r['precision']}: {r['seconds']:.3f} s; audio vs FP32 max abs {r['max_abs']:.3g}, "
              f"mean abs {r['mean_abs']:.3g}")
    return out


def _row(stage: str, timings: list, model_name: str) -> dict:
    seconds = statistics.median(t.seconds for t in timings)
    peaks = [t.peak_bytes for t in timings if t.peak_bytes is not None]
    row = {"stage": stage, "units": timings[0].units, "unit": "tokens" if stage in ("plan", "semantic") else "frames",
           "seconds": seconds, "per_second": timings[0].units / seconds,
           "peak_gib": max(peaks) / 2**30 if peaks else None}
    if model_name == "yue2-3b":
        row["floor_seconds"] = FLOOR_SECONDS[stage]
        row["x_floor"] = seconds / FLOOR_SECONDS[stage]
        row["reference_runtime_seconds"] = REFERENCE_RUNTIME_SECONDS[stage]
    return row


def print_table(rows: list[dict], env: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    title = (f"farm bench song — {env['model']} on {env.get('gpu', env['device'])}, torch {env['torch']}, "
             f"{env['date']} — FORCED lengths: plan {env['plan_tokens']}, semantic {env['semantic_tokens']} "
             f"(end id masked until then; random weights; AR weights {env.get('weight_format', 'bf16')})")
    table = Table(title=title, title_justify="left")
    for col in ("stage", "units", "seconds", "rate", "peak GiB", "H200 floor s", "× floor", "reference runtime s"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for r in rows:
        table.add_row(r["stage"], f"{r['units']} {r['unit']}", f"{r['seconds']:.3f}",
                      f"{r['per_second']:.1f} {r['unit']}/s", _fmt(r["peak_gib"], ".2f"),
                      _fmt(r.get("floor_seconds"), ".2f"), _fmt(r.get("x_floor"), ".1f"),
                      _fmt(r.get("reference_runtime_seconds"), ".1f"))
    table.add_row("total", "", f"{env['total_seconds']:.3f}", "", "", _fmt(
        sum(FLOOR_SECONDS.values()) if env["model"] == "yue2-3b" else None, ".2f"), "",
        "72.3" if env["model"] == "yue2-3b" else "—")
    Console(width=160).print(table)
    print(f"load {env['load_seconds']:.1f} s (weights + CUDA graphs), median of {env['repeats']} run(s) after a "
          f"warm-up, sequential one-song path, one process")


def _fmt(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)
