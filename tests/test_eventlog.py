"""The event log (farm/eventlog.py): compaction as it grows, incremental reading, events rebuilt from markers."""
from __future__ import annotations

import dataclasses

from farm import eventlog
from farm.jobs import StageEvent
from farm.store import Store


def _event(i: int) -> StageEvent:
    return StageEvent(track=f"{i // 4:02d}-song", stage=("plan", "semantic", "acoustic", "decode")[i % 4], worker="w",
                      host="h", pid=1, gpu="cpu", gpu_uuid="", start=1_700_000_000.0 + i * 0.37,
                      end=1_700_000_000.5 + i * 0.37, units=10, batch=1.0, batch_shape="", peak_bytes=0)


def test_a_long_run_keeps_few_files_and_reads_back_every_event_once(tmp_path):
    store = Store(str(tmp_path))
    log = eventlog.EventLog(store, "run-a")
    for i in range(150):                       # one flush per call, as the driver does
        log.add(_event(i))
        log.flush()
    folder = "metrics/run=run-a"
    names = store.listdir(folder)
    assert len(names) <= eventlog.COMPACT_EVERY + 1 and any(n.startswith("chunk-") for n in names)
    rows = eventlog.read_parts(store).to_pylist()
    assert [(r["track"], r["stage"]) for r in rows] == [(e.track, e.stage) for e in map(_event, range(150))]
    # a driver killed between writing a chunk and deleting what it covers: the covered part is never read twice
    store.write_bytes(f"{folder}/part-00003.parquet", eventlog.parquet_bytes(eventlog.events_table("run-a",
                                                                                                 [_event(3)])))
    assert eventlog.read_parts(store).num_rows == 150


def test_the_reader_reads_only_new_files(tmp_path, monkeypatch):
    store = Store(str(tmp_path))
    log = eventlog.EventLog(store, "run-b")
    reader = eventlog.PartsReader(store)
    reads = []
    original = store.read_bytes
    monkeypatch.setattr(store, "read_bytes", lambda rel: reads.append(rel) or original(rel))
    for i in range(5):
        log.add(_event(i))
        log.flush()
        assert reader.table().num_rows == i + 1
    assert len(reads) == len(set(reads)) == 5            # each part file read once, over five polls


def test_events_lost_with_their_driver_come_back_from_the_markers(tmp_path):
    store = Store(str(tmp_path))
    events = [_event(i) for i in range(6)]
    log = eventlog.EventLog(store, "run-c")
    for e in events[:4]:                        # the driver logged four calls, then died
        log.add(e)
    log.flush()
    markers = {}
    for e in events:                            # … but all six calls left their markers
        markers.setdefault(e.track, {})[e.stage] = {"stage": e.stage, "event": dataclasses.asdict(e)}
    markers["99-old"] = {"plan": {"stage": "plan"}}       # a marker from before markers kept events
    assert eventlog.recover_events(store, "run-d", markers) == 2
    rows = eventlog.read_parts(store).to_pylist()
    assert sorted((r["track"], r["stage"]) for r in rows) == sorted((e.track, e.stage) for e in events)
    assert {r["run_id"] for r in rows if (r["track"], r["stage"]) in {("01-song", "plan"), ("01-song", "semantic")}} \
        == {"run-d-recovered"}
    assert eventlog.recover_events(store, "run-e", markers) == 0
