"""The farm's Prometheus metrics: one set of names and labels, two ways out.

- Through Ray's metrics agent (`RayMetrics`, fed by the driver as stage calls finish): Ray exports each name with its
  own `ray_` prefix, beside Ray's metrics, wherever the cluster's Prometheus already scrapes.
- Through the dashboard's `/metrics` (`exposition`, for a cluster without Ray's agent, or `farm dashboard OUT` on a
  finished album): the same figures rebuilt from the album's stats (`farm.aggregate.album_stats`), formatted by
  `prometheus_client`.
`METRICS` is the only list of names. `farm_stage_call_seconds` (a histogram of every call) exists only in Ray's
export: the dashboard's stats keep no per-call distribution.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Metric:
    name: str                 # without the unit suffix prometheus_client adds to counters (`_total`)
    kind: str                 # counter, gauge or histogram
    help: str
    labels: tuple[str, ...]


METRICS = {m.name: m for m in (
    Metric("farm_stage_units", "counter", "tokens (plan, semantic) or latent frames (acoustic, decode) produced",
           ("stage",)),
    Metric("farm_stage_calls", "counter", "finished stage calls", ("stage", "ok")),
    Metric("farm_stage_call_seconds", "histogram", "one stage call, wall clock", ("stage",)),
    Metric("farm_stage_rate", "gauge", "units per second over the last 10 s", ("stage",)),
    Metric("farm_stage_queue_depth", "gauge", "tracks ready for the stage, not started", ("stage",)),
    Metric("farm_card_busy_fraction", "gauge", "share of the album's time the card worked", ("card",)),
    Metric("farm_album_tracks_done", "gauge", "finished tracks", ()),
    Metric("farm_album_eta_seconds", "gauge", "estimated seconds left", ()),
)}
CALL_SECONDS_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300)


def gauge_samples(stats: dict) -> dict[str, list[tuple[tuple[str, ...], float]]]:
    """Every gauge's (label values, value) from an album's stats."""
    stages, cards = stats["stages"], stats["cards"]
    out = {"farm_stage_rate": [((s["stage"],), s["rate_now"]) for s in stages],
           "farm_stage_queue_depth": [((s["stage"],), s["queue_now"]) for s in stages],
           "farm_card_busy_fraction": [((c["uuid"],), c["busy_fraction"]) for c in cards],
           "farm_album_tracks_done": [((), stats["tracks_done"])]}
    if stats.get("eta_s") is not None:
        out["farm_album_eta_seconds"] = [((), stats["eta_s"])]
    return out


def exposition(stats: dict) -> bytes:
    """The album's figures in Prometheus' text format."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    class Album:
        def collect(self):
            units, calls = METRICS["farm_stage_units"], METRICS["farm_stage_calls"]
            family = CounterMetricFamily(units.name, units.help, labels=units.labels)
            for s in stats["stages"]:
                family.add_metric((s["stage"],), s["units"])
            yield family
            family = CounterMetricFamily(calls.name, calls.help, labels=calls.labels)
            for s in stats["stages"]:
                family.add_metric((s["stage"], "true"), s["calls"])
            yield family
            for name, samples in gauge_samples(stats).items():
                m = METRICS[name]
                family = GaugeMetricFamily(m.name, m.help, labels=m.labels)
                for values, value in samples:
                    family.add_metric(values, value)
                yield family

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Album())
    return generate_latest(registry)


class RayMetrics:
    """The same metrics through `ray.util.metrics`, so Ray's Prometheus endpoint exports them."""

    @classmethod
    def create(cls) -> "RayMetrics | None":
        try:
            import ray

            return cls() if ray.is_initialized() else None
        except Exception:          # a Ray without the metrics agent: the dashboard's own /metrics still works
            return None

    def __init__(self):
        from ray.util.metrics import Counter, Gauge, Histogram

        def make(m: Metric):
            if m.kind == "counter":
                return Counter(m.name + "_total", m.help, tag_keys=m.labels)
            if m.kind == "histogram":
                return Histogram(m.name, m.help, boundaries=list(CALL_SECONDS_BUCKETS), tag_keys=m.labels)
            return Gauge(m.name, m.help, tag_keys=m.labels)

        self.metrics = {name: make(m) for name, m in METRICS.items()}

    def event(self, e) -> None:
        """One finished stage call (a farm.jobs.StageEvent)."""
        m = self.metrics
        m["farm_stage_calls"].inc(1, tags={"stage": e.stage, "ok": str(e.ok).lower()})
        if e.ok:
            m["farm_stage_units"].inc(e.units, tags={"stage": e.stage})
            m["farm_stage_call_seconds"].observe(e.end - e.start, tags={"stage": e.stage})

    def gauges(self, stats: dict) -> None:
        for name, samples in gauge_samples(stats).items():
            labels = METRICS[name].labels
            for values, value in samples:
                self.metrics[name].set(value, tags=dict(zip(labels, values)))
