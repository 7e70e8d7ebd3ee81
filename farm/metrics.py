"""Stage events → Parquet: `metrics/run=<id>/part-<n>.parquet` while a render runs, `metrics.parquet` after.

A Parquet file is unreadable until its footer is written, so a render never appends to one: each flush is a small
part file of its own (a killed driver loses at most the events since its last flush), and the album's
`metrics.parquet` is compacted from every run's parts at the end of each render. NVML samples of real cards go to
`gpu_samples.parquet` beside it (another row shape: time, card, utilisation, memory, memory per process).

Schema (one row per stage call):
| column | type | meaning |
|---|---|---|
| run_id | string | the render that made the call |
| track | string | the track's folder (NN-slug) |
| stage | dictionary<string> | plan, semantic, acoustic or decode |
| worker, host, gpu, gpu_uuid | string | who ran it, where, on which card ("cpu" for CPU workers) |
| pid | int64 | worker process |
| start, end | timestamp[ms, UTC] | wall clock |
| seconds | float64 | end − start |
| units | int64 | tokens (plan, semantic) or latent frames (acoustic, decode) |
| batch | float64 | mean requests sharing the worker's batch during the call |
| batch_shape | string | the worker's batch geometry (AR rows and key buckets, acoustic chunks, decode tiles) |
| peak_bytes | int64 | the worker process's peak device memory so far (0 on CPU) |
| ok | bool | false when the call failed |
| error | string | why it failed |
| queue_wait | float64 | seconds between the track becoming ready for the stage and the call starting |

Reading: `pq.read_table(dir)` is wrong for the album folder (it holds other files); use `read_metrics(store)`
or `pq.read_table("<album>/metrics.parquet")`. Older part files without `queue_wait` read as 0.
"""
from __future__ import annotations

import dataclasses
import io
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from .jobs import StageEvent
from .store import Store

SCHEMA = pa.schema([
    ("run_id", pa.string()), ("track", pa.string()), ("stage", pa.dictionary(pa.int32(), pa.string())),
    ("worker", pa.string()), ("host", pa.string()), ("pid", pa.int64()), ("gpu", pa.string()),
    ("gpu_uuid", pa.string()), ("start", pa.timestamp("ms", tz="UTC")), ("end", pa.timestamp("ms", tz="UTC")),
    ("seconds", pa.float64()), ("units", pa.int64()), ("batch", pa.float64()), ("batch_shape", pa.string()),
    ("peak_bytes", pa.int64()), ("ok", pa.bool_()), ("error", pa.string()), ("queue_wait", pa.float64()),
])
METRICS = "metrics.parquet"


def new_run_id() -> str:
    import datetime

    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]


def events_table(run_id: str, events: list[StageEvent]) -> pa.Table:
    rows = [dataclasses.asdict(e) for e in events]
    columns = {name: [r.get(name) for r in rows] for name in SCHEMA.names if name not in ("run_id", "seconds")}
    columns["start"] = [int(r["start"] * 1000) for r in rows]
    columns["end"] = [int(r["end"] * 1000) for r in rows]
    columns["seconds"] = [r["end"] - r["start"] for r in rows]
    columns["run_id"] = [run_id] * len(rows)
    return pa.table({name: columns[name] for name in SCHEMA.names}, schema=SCHEMA)


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


class EventLog:
    """Collects one render's events and flushes them as part files."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.run_id = store, run_id
        self.events: list[StageEvent] = []
        self.flushed = 0
        self.parts = 0

    def add(self, event: StageEvent) -> None:
        self.events.append(event)

    def flush(self) -> None:
        fresh = self.events[self.flushed:]
        if not fresh:
            return
        name = f"metrics/run={self.run_id}/part-{self.parts:05d}.parquet"
        self.store.write_bytes(name, parquet_bytes(events_table(self.run_id, fresh)))
        self.flushed, self.parts = len(self.events), self.parts + 1


def read_parts(store: Store) -> pa.Table:
    """Every run's part files, concatenated (runs in name order: their ids start with a timestamp)."""
    tables = []
    for run in store.listdir("metrics"):
        for part in store.listdir(f"metrics/{run}"):
            if part.endswith(".parquet"):
                tables.append(_conform(pq.read_table(io.BytesIO(store.read_bytes(f"metrics/{run}/{part}")))))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def _conform(table: pa.Table) -> pa.Table:
    """A part written by an older schema: missing columns filled with their neutral value."""
    for field in SCHEMA:
        if field.name not in table.column_names:
            table = table.append_column(field, pa.array([0.0] * table.num_rows, field.type))
    return table.select(SCHEMA.names).cast(SCHEMA)


def event_rows(run_id: str, events: list[StageEvent]) -> list[dict]:
    """Events as plain rows (the Parquet schema's columns, times as epoch seconds) for the aggregates."""
    return [{**dataclasses.asdict(e), "run_id": run_id, "seconds": e.end - e.start} for e in events]


def compact(store: Store) -> pa.Table:
    """Rewrite metrics.parquet from all parts; returns the table."""
    table = read_parts(store)
    store.write_bytes(METRICS, parquet_bytes(table))
    return table


GPU_SAMPLES = "gpu_samples.parquet"
GPU_SCHEMA = pa.schema([("run_id", pa.string()), ("time", pa.timestamp("ms", tz="UTC")), ("gpu_uuid", pa.string()),
                        ("util_percent", pa.float64()), ("memory_used", pa.int64()), ("pid", pa.int64()),
                        ("pid_memory", pa.int64())])


def write_gpu_samples(store: Store, run_id: str, samples) -> None:
    """NVML samples of a render (one row per card per sample, one per process on it) → `gpu/run=<id>.parquet`,
    then `gpu_samples.parquet` compacted from every run. Kept beside metrics.parquet: another row shape."""
    rows = [(s, pid, used) for s in samples for pid, used in (s.processes.items() or [(None, None)])]
    table = pa.table({"run_id": [run_id] * len(rows), "time": [int(s.t * 1000) for s, _, _ in rows],
                      "gpu_uuid": [s.uuid for s, _, _ in rows], "util_percent": [s.util_percent for s, _, _ in rows],
                      "memory_used": [s.memory_used for s, _, _ in rows], "pid": [p for _, p, _ in rows],
                      "pid_memory": [u for _, _, u in rows]}, schema=GPU_SCHEMA)
    store.write_bytes(f"gpu/run={run_id}.parquet", parquet_bytes(table))
    parts = [pq.read_table(io.BytesIO(store.read_bytes(f"gpu/{name}"))) for name in store.listdir("gpu")]
    store.write_bytes(GPU_SAMPLES, parquet_bytes(pa.concat_tables(parts)))


def read_metrics(store: Store) -> pa.Table:
    return pq.read_table(io.BytesIO(store.read_bytes(METRICS)))
