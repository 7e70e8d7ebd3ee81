"""Figures from stage events: per-stage throughput and queues over time, per-card busy time, the bottleneck, the ETA.

Pure functions over plain rows (the metrics.parquet schema as dicts) plus optional live facts from the driver;
the live dashboard, the JSON endpoint, the Prometheus export and the album report all read `album_stats`. Knows
nothing about Ray, files or HTTP.
"""
from __future__ import annotations

from collections import defaultdict

from cluster.workload import FRAMES_PER_SECOND, STAGES
from cluster.workload import STAGE_UNITS as UNITS

from .takes import AWAITING
WINDOW_S = 10.0               # sliding window of the "now" rates


def ts(value) -> float:
    """A timestamp from Parquet (datetime) or from an event (epoch seconds) → epoch seconds."""
    return value.timestamp() if hasattr(value, "timestamp") else float(value)


def normalise(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        r = dict(r)
        r["start"], r["end"] = ts(r["start"]), ts(r["end"])
        r.setdefault("queue_wait", 0.0)
        out.append(r)
    return sorted(out, key=lambda r: (r["start"], r["track"]))


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    total, last = 0.0, None
    for a, b in sorted(intervals):
        if last is None or a > last[1]:
            if last:
                total += last[1] - last[0]
            last = [a, b]
        else:
            last[1] = max(last[1], b)
    return total + (last[1] - last[0] if last else 0.0)


def rate_between(rows: list[dict], t0: float, t1: float) -> float:
    """Units per second produced in [t0, t1], each call's units spread evenly over its own interval."""
    if t1 <= t0:
        return 0.0
    units = 0.0
    for r in rows:
        span = r["end"] - r["start"]
        overlap = min(t1, r["end"]) - max(t0, r["start"])
        if overlap > 0 and span > 0:
            units += r["units"] * overlap / span
    return units / (t1 - t0)


def series(rows: list[dict], t0: float, t1: float, points: int = 60) -> dict:
    """Throughput and queue depth per stage sampled at `points` times between t0 and t1. The rate window is
    WINDOW_S, shortened for short albums so that a 2 s album still shows its shape."""
    step = max((t1 - t0) / points, 1e-6)
    window = min(WINDOW_S, max(0.25, (t1 - t0) / 12))
    times = [t0 + step * (i + 1) for i in range(points)]
    by_stage = {s: [r for r in rows if r["stage"] == s and r.get("ok", True)] for s in STAGES}
    out = {"t": [round(t - t0, 3) for t in times], "window_s": window, "throughput": {}, "queue": {}}
    for stage, mine in by_stage.items():
        out["throughput"][stage] = [round(rate_between(mine, t - min(window, t - t0), t), 3) for t in times]
        waits = [(r["start"] - r.get("queue_wait", 0.0), r["start"]) for r in mine]
        out["queue"][stage] = [sum(1 for a, b in waits if a <= t < b) for t in times]
    return out


def album_stats(rows: list[dict], *, now: float | None = None, live: dict | None = None,
                gpu_samples: list[dict] | None = None, title: str = "", tracks: list[dict] | None = None) -> dict:
    """Everything the dashboard and the report show, as one JSON-ready dict (the keys below; the page reads them in
    farm/dashboard/static/app.js)."""
    rows = normalise(rows)
    live = live or {}
    ok = [r for r in rows if r.get("ok", True)]
    t0 = min([r["start"] - r.get("queue_wait", 0.0) for r in rows] + [live.get("started", float("inf"))]) \
        if rows or live.get("started") else 0.0
    t1 = now or max([r["end"] for r in rows] + [t0])
    span = max(t1 - t0, 1e-9)
    stages = [stage_row(s, [r for r in ok if r["stage"] == s], t1, span, live) for s in STAGES]
    cards = card_rows(ok, span, live, gpu_samples or [])
    track_rows = timeline(rows, tracks or live.get("tracks") or [])
    done = sum(1 for t in track_rows if t["status"] == "done")
    eta = eta_seconds(stages, track_rows)
    eta_source = "observed" if eta is not None else None
    if eta is None and live.get("forecast_s") is not None and live.get("started"):
        # before every stage has a pace of its own: the planner's simulated makespan, less the time since the start
        # (past it, unknown: 0 would read as done)
        left = live["forecast_s"] - (t1 - live["started"])
        if left > 0:
            eta, eta_source = left, "forecast"
    return {
        "album": title or live.get("album", ""), "run_id": live.get("run_id", ""),
        "state": live.get("state", "finished" if rows else "waiting"), "now": t1, "started": t0,
        "elapsed_s": span, "tracks_total": len(track_rows), "tracks_done": done,
        "stages": stages, "cards": cards, "tracks": track_rows, "series": series(ok, t0, t1),
        "bottleneck": bottleneck(stages, cards), "eta_s": eta, "eta_source": eta_source,
        "gpu_note": gpu_note(cards),
    }


def stage_row(stage: str, mine: list[dict], t1: float, span: float, live: dict) -> dict:
    units = sum(r["units"] for r in mine)
    busy = union_seconds([(r["start"], r["end"]) for r in mine])
    audio = stage != "plan"          # semantic codes, latents and decoded frames all count 25 per second
    window = rate_between(mine, t1 - WINDOW_S, t1)
    first = min((r["start"] for r in mine), default=None)
    active = (t1 - first) if first is not None else 0.0
    return {
        "stage": stage, "unit": UNITS[stage], "calls": len(mine), "units": units,
        "busy_s": busy, "busy_fraction": busy / span,
        "rate_now": window, "rate_mean": units / active if active > 0 else 0.0,
        "audio_seconds_per_s": window / FRAMES_PER_SECOND if audio else None,
        "realtime_factor": (units / FRAMES_PER_SECOND) / busy if audio and busy else None,
        "mean_call_s": sum(r["end"] - r["start"] for r in mine) / len(mine) if mine else None,
        "mean_queue_wait_s": sum(r.get("queue_wait", 0.0) for r in mine) / len(mine) if mine else None,
        "queue_now": live.get("queues", {}).get(stage, 0), "running_now": live.get("running", {}).get(stage, 0),
        "max_batch": max((r.get("batch", 1.0) for r in mine), default=None),
        "peak_bytes": max((r.get("peak_bytes", 0) for r in mine), default=0),
    }


def card_rows(rows: list[dict], span: float, live: dict, samples: list[dict]) -> list[dict]:
    cards: dict[str, dict] = {}
    for c in live.get("cards", []):
        cards[c["uuid"]] = {**c, "stages": list(c.get("stages", [])), "intervals": []}
    for r in rows:
        c = cards.setdefault(r["gpu_uuid"], {"uuid": r["gpu_uuid"], "card": r["gpu_uuid"], "model": r["gpu"],
                                              "stages": [], "virtual": r["gpu_uuid"].startswith(("VIRT", "CPU")),
                                              "intervals": []})
        c["intervals"].append((r["start"], r["end"]))
        if r["stage"] not in c["stages"]:
            c["stages"].append(r["stage"])
    latest: dict[str, dict] = {}
    for s in samples:
        if s["uuid"] not in latest or s["t"] >= latest[s["uuid"]]["t"]:
            latest[s["uuid"]] = s
    out = []
    for uuid, c in cards.items():
        s = latest.get(uuid, {})
        out.append({"card": c.get("card", uuid), "model": c.get("model", ""), "uuid": uuid,
                    "stages": c["stages"], "virtual": c.get("virtual", False),
                    "busy_fraction": union_seconds(c["intervals"]) / span,
                    "memory_used": s.get("memory_used"), "util_percent": s.get("util_percent"),
                    "memory_total": c.get("memory_total")})
    return sorted(out, key=lambda c: c["card"])


def timeline(rows: list[dict], tracks: list[dict]) -> list[dict]:
    """One row per track: its stages' (start, end, card), the stages it needs this run, and its status.

    `tracks` (from the driver) gives each track's key, title, needed stages and live status; without it (a report
    from metrics.parquet alone) a track is done once its decode stage is there.
    """
    by_track: dict[str, dict] = defaultdict(dict)
    for r in rows:
        by_track[r["track"]][r["stage"]] = {"start": r["start"], "end": r["end"], "gpu": r["gpu"],
                                            "worker": r["worker"], "ok": r.get("ok", True),
                                            "queue_wait": r.get("queue_wait", 0.0)}
    meta = {t["key"]: t for t in tracks}
    keys = [t["key"] for t in tracks] + sorted(k for k in by_track if k not in meta)
    out = []
    for key in keys:
        stages, m = by_track.get(key, {}), meta.get(key, {})
        if any(not v["ok"] for v in stages.values()):
            status = "failed"
        elif "status" in m:
            status = m["status"]
        else:
            status = "done" if stages.get("decode") else "incomplete"
        out.append({"key": key, "title": m.get("title", key), "status": status, "stages": stages,
                    "needs": m.get("needs", [s for s in STAGES if s in stages])})
    return out


def eta_seconds(stages: list[dict], tracks: list[dict]) -> float | None:
    """Time until the album is done if every stage keeps its observed pace: for each stage, its remaining tracks at
    its pace so far, plus one track's time through the stages after it; the largest of these. None until every
    stage that still has work has finished at least one call."""
    resting = ("done", "failed", AWAITING)
    if all(t["status"] in resting for t in tracks):
        return 0.0
    eta = 0.0
    for i, s in enumerate(stages):
        remaining = sum(1 for t in tracks if t["status"] not in resting and s["stage"] in t["needs"]
                        and s["stage"] not in t["stages"])
        if not remaining:
            continue
        if not s["calls"]:
            return None
        tail = sum((x["mean_call_s"] or 0.0) for x in stages[i + 1:])
        eta = max(eta, remaining * s["busy_s"] / s["calls"] + tail)
    return eta


def bottleneck(stages: list[dict], cards: list[dict]) -> str:
    """One sentence: the busiest stage, its cards, and how long the next stage sat idle waiting for it."""
    active = [s for s in stages if s["calls"]]
    if not active:
        return "Waiting for the first stage to finish."
    worst = max(active, key=lambda s: s["busy_fraction"])
    where = ", ".join(f"{c['model']} ({c['card']})" for c in cards if worst["stage"] in c["stages"]) or "its cards"
    text = f"{worst['stage']} on {where} was busy {worst['busy_fraction']:.0%} of the album"
    later = [s for s in stages[STAGES.index(worst["stage"]) + 1:] if s["calls"]]
    if later:
        nxt = later[0]
        text += f"; {nxt['stage']} sat idle {1 - nxt['busy_fraction']:.0%} of the time waiting for it"
    earlier = [s for s in stages[:STAGES.index(worst["stage"])] if s["calls"]]
    if earlier and worst.get("mean_queue_wait_s"):
        text += f"; tracks queued {worst['mean_queue_wait_s']:.1f} s on average before {worst['stage']}"
    return text + "."


def gpu_note(cards: list[dict]) -> str:
    virtual = [c["card"] for c in cards if c["virtual"]]
    if virtual and len(virtual) == len(cards):
        return "All cards are virtual or CPUs: NVML has nothing to report (no utilisation or memory figures)."
    if virtual:
        return f"Virtual cards report no NVML figures: {', '.join(virtual)}."
    if cards and all(c["memory_used"] is None for c in cards):
        return "NVML figures come from the driver's host only; these cards are elsewhere."
    return ""
