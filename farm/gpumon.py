"""NVML sampling of real cards while a render runs: utilisation, memory, and memory per process.

Runs on a daemon thread in the driver and samples the cards of the driver's own host (NVML sees only local
devices; a card on another node reports nothing here). Virtual cards have no NVML device: they are listed with
`virtual = True` and no figures, rather than zeros that would read as "idle".
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field


@dataclass
class CardSample:
    t: float
    uuid: str
    util_percent: float | None
    memory_used: int | None
    processes: dict[int, int] = field(default_factory=dict)    # pid → bytes of device memory


class GpuMonitor:
    def __init__(self, uuids: list[str], interval: float = 1.0):
        self.uuids, self.interval = uuids, interval
        self.samples: list[CardSample] = []
        self._stop = threading.Event()
        self._thread = None
        self.available = False

    def start(self) -> "GpuMonitor":
        try:
            import pynvml

            pynvml.nvmlInit()
            self.handles = {u: pynvml.nvmlDeviceGetHandleByUUID(u) for u in self.uuids}
            self.available = bool(self.handles)
        except Exception:           # no driver, no library, or cards on another host: nothing to sample
            return self
        self._thread = threading.Thread(target=self._run, daemon=True, name="gpu-monitor")
        self._thread.start()
        return self

    def stop(self) -> list[CardSample]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            import pynvml

            pynvml.nvmlShutdown()
        return self.samples

    def _run(self) -> None:
        while not self._stop.is_set():
            for uuid, handle in self.handles.items():
                self.samples.append(sample(handle, uuid))
            self._stop.wait(self.interval)

    def latest(self) -> list[CardSample]:
        """The most recent sample of each card."""
        seen: dict[str, CardSample] = {}
        for sample in reversed(self.samples):
            seen.setdefault(sample.uuid, sample)
            if len(seen) == len(self.uuids):
                break
        return list(seen.values())

    def peak_by_process(self) -> dict[str, dict[int, int]]:
        """uuid → {pid: the most device memory that process held on that card}."""
        out: dict[str, dict[int, int]] = {}
        for s in self.samples:
            card = out.setdefault(s.uuid, {})
            for pid, used in s.processes.items():
                card[pid] = max(card.get(pid, 0), used)
        return out


def sample(handle, uuid: str) -> CardSample:
    import pynvml

    def guarded(call, default=None):
        try:
            return call()
        except pynvml.NVMLError:
            return default

    util = guarded(lambda: pynvml.nvmlDeviceGetUtilizationRates(handle).gpu)
    used = guarded(lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used)
    procs = guarded(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle), [])
    return CardSample(time.time(), uuid, util, used, {p.pid: int(p.usedGpuMemory or 0) for p in procs})
