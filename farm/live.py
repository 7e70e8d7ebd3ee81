"""What a render shows while it runs: live.json in the album folder, NVML samples, Prometheus metrics, the page.

`LiveView` is fed by the driver (each finished stage call, and a tick about once a second). It keeps the figures in
one place — `stats()`, built by aggregate.album_stats — for the dashboard server, the `/api/stats` endpoint, the
Prometheus export through Ray (`farm/prometheus.py`), and `live.json` (which `farm dashboard OUT_DIR` reads from another
process).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable

from . import aggregate
from .eventlog import PartsReader, event_rows
from .gpumon import GpuMonitor
from .jobs import StageEvent
from .prometheus import RayMetrics
from .store import Store

LIVE = "live.json"


class LiveView:
    def __init__(self, store: Store, run_id: str, title: str, cards: list[dict], state_fn,
                 dashboard: tuple[str, int] | None = None, forecast_s: float | None = None):
        self.store, self.run_id, self.title, self.cards, self.state_fn = store, run_id, title, cards, state_fn
        self.forecast_s = forecast_s     # the simulator's makespan for this render: the ETA until stages have a pace
        self.events: list[StageEvent] = []
        self.started, self.finished, self.outcome = time.time(), False, "finished"
        real = [c["uuid"] for c in cards if not c["virtual"]]
        self.monitor = GpuMonitor(real, interval=1.0).start()
        self.prometheus = RayMetrics.create()
        self.server, self.url, self._last = None, None, 0.0
        if dashboard is not None:
            from .dashboard.server import serve

            self.server, self.url = serve(self.stats, host=dashboard[0], port=dashboard[1])
            print(f"dashboard: {self.url}", flush=True)

    def live(self) -> dict:
        state = self.state_fn()
        return {"album": self.title, "run_id": self.run_id, "started": self.started, "forecast_s": self.forecast_s,
                "state": self.outcome if self.finished else "running", "cards": self.cards,
                "gpu_samples": [vars(s) for s in self.monitor.latest()], **state}

    def stats(self) -> dict:
        live = self.live()
        return aggregate.album_stats(event_rows(self.run_id, self.events), now=None if self.finished else time.time(),
                                     live=live, gpu_samples=live["gpu_samples"], title=self.title)

    def event(self, event: StageEvent) -> None:
        self.events.append(event)
        if self.prometheus:
            self.prometheus.event(event)
        self.tick(force=True)

    def tick(self, force: bool = False) -> None:
        """Write live.json (and the Prometheus gauges) at most once a second."""
        if not force and time.time() - self._last < 1.0:
            return
        self._last = time.time()
        live = self.live()
        try:
            self.store.write_bytes(LIVE, (json.dumps(live, default=str) + "\n").encode())
        except OSError:        # a full disk: the page is a view, the next tick tries again
            pass
        if self.prometheus:
            self.prometheus.gauges(self.stats())

    def close(self, outcome: str = "finished") -> None:
        """The last live.json: `finished`, or `stopped` when the render was interrupted (a rerun resumes it)."""
        self.finished, self.outcome = True, outcome
        self.tick(force=True)
        self.monitor.stop()
        if self.monitor.samples:
            from .eventlog import write_gpu_samples

            write_gpu_samples(self.store, self.run_id, self.monitor.samples)

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.shutdown()


def read_live(store: Store) -> dict:
    try:
        return json.loads(store.read_bytes(LIVE))
    except (FileNotFoundError, ValueError):
        return {}


def album_stats_fn(out: str) -> Callable[[], dict]:
    """Figures of an album folder (a render running elsewhere, or finished): its metric parts and live.json."""
    store = Store(out)
    reader = PartsReader(store)          # each metric file is read once, however often the page polls

    def stats() -> dict:
        live = read_live(store)
        rows = reader.table().to_pylist()
        running = live.get("state") == "running"
        return aggregate.album_stats(rows, now=time.time() if running else None, live=live,
                                     gpu_samples=live.get("gpu_samples", []), title=live.get("album", ""))
    return stats
