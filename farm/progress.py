"""The render's live view: a rich table of tracks × stages on a terminal, one log line per event otherwise."""
from __future__ import annotations

import sys

from cluster.workload import STAGES

from .jobs import StageEvent

MARK = {"queued": "·", "running": "▶", "done": "✓", "skipped": "=", "failed": "✗", "-": " "}


class Board:
    def __init__(self, jobs, starts: dict[str, int], enabled: bool | None = None):
        self.jobs = jobs
        self.state = {j.key: {s: ("-" if s not in j.stages else "skipped" if j.stages.index(s) < starts[j.key]
                                   else "queued") for s in STAGES} for j in jobs}
        self.detail: dict[tuple[str, str], str] = {}
        self.live = None
        if enabled if enabled is not None else sys.stdout.isatty():
            from rich.live import Live

            self.live = Live(self._table(), refresh_per_second=4, transient=False)
            self.live.start()

    def running(self, key: str, stage: str) -> None:
        self.state[key][stage] = "running"
        self._refresh()

    def finished(self, event: StageEvent) -> None:
        self.state[event.track][event.stage] = "done" if event.ok else "failed"
        where = f"{event.gpu} ({event.worker})"
        self.detail[(event.track, event.stage)] = f"{event.end - event.start:.1f}s"
        if self.live is None:
            status = "done" if event.ok else f"FAILED: {event.error}"
            print(f"{event.track:<28} {event.stage:<9} {status} in {event.end - event.start:.2f} s, "
                  f"{event.units} units, batch {event.batch:.1f}, on {where}", flush=True)
        self._refresh()

    def note(self, text: str) -> None:
        """A line about the render itself (a worker lost and replaced, …), above the table on a terminal."""
        if self.live is not None:
            self.live.console.print(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.update(self._table())
            self.live.stop()

    def _refresh(self) -> None:
        if self.live is not None:
            self.live.update(self._table())

    def _table(self):
        from rich.table import Table

        table = Table(title="farm render", title_justify="left")
        table.add_column("track")
        for stage in STAGES:
            table.add_column(stage)
        for job in self.jobs:
            cells = [f"{MARK[self.state[job.key][s]]} {self.detail.get((job.key, s), '')}".rstrip() for s in STAGES]
            table.add_row(job.key, *cells)
        return table
