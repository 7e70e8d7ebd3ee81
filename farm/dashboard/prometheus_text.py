"""The dashboard's figures as Prometheus text exposition (the farm's own /metrics, beside Ray's export)."""
from __future__ import annotations


def render(stats: dict) -> str:
    lines = []

    def metric(name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            text = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
            lines.append(f"{name}{{{text}}} {float(value)!r}" if text else f"{name} {float(value)!r}")

    stages = stats["stages"]
    metric("farm_stage_units_total", "counter", "tokens or latent frames produced",
           [({"stage": s["stage"], "unit": s["unit"]}, s["units"]) for s in stages])
    metric("farm_stage_calls_total", "counter", "finished stage calls", [({"stage": s["stage"]}, s["calls"])
                                                                          for s in stages])
    metric("farm_stage_rate", "gauge", "units per second over the last 10 s",
           [({"stage": s["stage"], "unit": s["unit"]}, s["rate_now"]) for s in stages])
    metric("farm_stage_queue_depth", "gauge", "tracks ready for the stage, not started",
           [({"stage": s["stage"]}, s["queue_now"]) for s in stages])
    metric("farm_card_busy_fraction", "gauge", "share of the album's time the card worked",
           [({"card": c["card"], "model": c["model"]}, c["busy_fraction"]) for c in stats["cards"]])
    metric("farm_album_tracks_done", "gauge", "finished tracks", [({}, stats["tracks_done"])])
    if stats["eta_s"] is not None:
        metric("farm_album_eta_seconds", "gauge", "estimated seconds left", [({}, stats["eta_s"])])
    return "\n".join(lines) + "\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
