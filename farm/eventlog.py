"""Stage events → Parquet: `metrics/run=<id>/part-<n>.parquet` while a render runs, `metrics.parquet` after.

A Parquet file is unreadable until its footer is written, so a render never appends to one: each flush is a small
part file of its own (a killed driver loses at most the events since its last flush), and the album's
`metrics.parquet` is compacted from every run's parts at the end of each render. While a run goes on, every
`COMPACT_EVERY` parts are folded into one `chunk-00000-<last>.parquet` holding the run's events up to part <last>
(written before the parts it covers are deleted, and a reader ignores parts a chunk covers), so a run of thousands
of calls keeps under `COMPACT_EVERY` + 1 files; `PartsReader` reads each file once and only new ones afterwards.
A stage call that finished after its driver died has no row; its stage marker holds the event, and the next render
logs it under `run=<that run>-recovered` (`recover_events`). NVML samples of real cards go to
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


COMPACT_EVERY = 64


class EventLog:
    """Collects one render's events and flushes them as part files, folding them into a chunk as they grow."""

    def __init__(self, store: Store, run_id: str):
        self.store, self.run_id = store, run_id
        self.events: list[StageEvent] = []
        self.flushed = 0
        self.parts = 0

    def add(self, event: StageEvent) -> None:
        self.events.append(event)

    def flush(self, strict: bool = False) -> None:
        """Write the events not yet written as a part file. A store that cannot take it (a full disk) keeps them for
        the next flush, unless `strict` (the render's last flush: then the error is the caller's to report). The
        stage markers hold every event too, so a later run can rebuild what never reached the log."""
        fresh = self.events[self.flushed:]
        if not fresh:
            return
        folder = f"metrics/run={self.run_id}"
        try:
            self.store.write_bytes(f"{folder}/part-{self.parts:05d}.parquet",
                                   parquet_bytes(events_table(self.run_id, fresh)))
        except OSError:
            if strict:
                raise
            return
        self.flushed, self.parts = len(self.events), self.parts + 1
        if self.parts % COMPACT_EVERY == 0:
            self._compact(folder)

    def _compact(self, folder: str) -> None:
        chunk = f"chunk-00000-{self.parts - 1:05d}.parquet"
        try:
            self.store.write_bytes(f"{folder}/{chunk}", parquet_bytes(events_table(self.run_id, self.events)))
        except OSError:            # no room for the chunk: the parts stay, and are read as they are
            return
        for name in self.store.listdir(folder):      # what the new chunk covers, now that it is whole
            if name != chunk and _covered(name, self.parts - 1):
                self.store.remove_tree(f"{folder}/{name}")


def _part_index(name: str) -> int | None:
    if name.startswith("part-") and name.endswith(".parquet"):
        return int(name[5:10])
    return None


def _chunk_last(name: str) -> int | None:
    if name.startswith("chunk-") and name.endswith(".parquet"):
        return int(name[12:17])
    return None


def _covered(name: str, last: int) -> bool:
    index = _part_index(name)
    chunk = _chunk_last(name)
    return (index is not None and index <= last) or (chunk is not None and chunk < last)


def _live_files(names: list[str]) -> list[str]:
    """A run folder's files to read: its newest chunk and the parts after it (a chunk written by a driver that died
    before deleting what it covers leaves covered parts behind: they are skipped, never counted twice)."""
    chunks = sorted((c, n) for n in names if (c := _chunk_last(n)) is not None)
    last = chunks[-1][0] if chunks else -1
    parts = sorted(n for n in names if (i := _part_index(n)) is not None and i > last)
    return ([chunks[-1][1]] if chunks else []) + parts


class PartsReader:
    """Reads every run's metric files, each file once: a poll reads only the files that are new since the last."""

    def __init__(self, store: Store):
        self.store = store
        self.cache: dict[str, pa.Table] = {}

    def table(self) -> pa.Table:
        """Every run's events, concatenated (runs in name order: their ids start with a timestamp)."""
        wanted = []
        for run in self.store.listdir("metrics"):
            wanted += [f"metrics/{run}/{name}" for name in _live_files(self.store.listdir(f"metrics/{run}"))]
        for path in wanted:
            if path not in self.cache:
                self.cache[path] = _conform(pq.read_table(io.BytesIO(self.store.read_bytes(path))))
        self.cache = {path: self.cache[path] for path in wanted}
        tables = list(self.cache.values())
        return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def read_parts(store: Store) -> pa.Table:
    """Every run's events as the part and chunk files hold them."""
    return PartsReader(store).table()


def recover_events(store: Store, run_id: str, markers: dict[str, dict[str, dict]]) -> int:
    """Stage calls whose marker holds an event that no metric file has (their driver died before it flushed them):
    log them under `run=<run_id>-recovered`. markers: track → stage → marker. → how many."""
    seen = {(r["track"], r["stage"], round(r["start"].timestamp() * 1000))
            for r in read_parts(store).select(["track", "stage", "start"]).to_pylist()}
    lost = []
    for stages in markers.values():
        for m in stages.values():
            e = m.get("event")
            if e and (e["track"], e["stage"], int(e["start"] * 1000)) not in seen:
                lost.append(StageEvent(**{f.name: e[f.name] for f in dataclasses.fields(StageEvent) if f.name in e}))
    if lost:
        log = EventLog(store, f"{run_id}-recovered")
        for event in sorted(lost, key=lambda x: x.start):
            log.add(event)
        log.flush()
    return len(lost)


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
