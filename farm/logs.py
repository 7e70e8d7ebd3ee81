"""The farm's logs: the standard `logging` module, one file per album folder (`render.log`), worker lines included.

The driver logs under "farm" (the plan, every stage call, every failure with its details file, lost and replaced
workers). The terminal keeps its progress view and shows only warnings and errors from the log; `--log-level`
decides what `render.log` keeps. A worker process logs into a bounded in-memory buffer (`WorkerLog`) that the driver
drains every few seconds and at the end, so the workers' lines reach `render.log` wherever they run; an exception
that escapes a worker thread is logged there too instead of vanishing. The album folder may be any fsspec URL, so
the driver writes a local file while it renders and appends it to the store's `render.log` when the render ends.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

LEVELS = ("debug", "info", "warning", "error")
FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
LOG_FILE = "render.log"
WORKER_LINES = 10_000          # a worker keeps at most this many undrained lines (the oldest go first)

log = logging.getLogger("farm")


SHOWN = {"shown": True}       # extra= for a record the progress view already put on the terminal


def level_of(name: str) -> int:
    if name.lower() not in LEVELS:
        from .errors import UserError

        raise UserError(f"--log-level must be one of {', '.join(LEVELS)}, got {name!r}")
    return getattr(logging, name.upper())


def _terminal() -> None:
    """Warnings and errors on stderr, once per process."""
    if not any(getattr(h, "farm_terminal", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setLevel(logging.WARNING)
        handler.setFormatter(logging.Formatter("farm: %(levelname)s: %(message)s"))
        handler.addFilter(lambda record: not getattr(record, "shown", False))
        handler.farm_terminal = True
        log.addHandler(handler)
    log.propagate = False


@contextlib.contextmanager
def album_log(store, level: str = "info") -> Iterator[logging.Handler]:
    """Log into the album folder's render.log (appended to, one run after another) while the block runs."""
    _terminal()
    log.setLevel(min(level_of(level), logging.WARNING))
    with tempfile.TemporaryDirectory(prefix="farm-log-") as tmp:
        path = Path(tmp) / LOG_FILE
        handler = logging.FileHandler(path, encoding="utf-8")
        handler.setLevel(level_of(level))
        handler.setFormatter(logging.Formatter(FORMAT))
        log.addHandler(handler)
        try:
            yield handler
        finally:
            log.removeHandler(handler)
            handler.close()
            _append(store, path.read_bytes())


def _append(store, data: bytes) -> None:
    """render.log += data; a store that cannot take it (a full disk) loses the log, never the album."""
    try:
        try:
            before = store.read_bytes(LOG_FILE)
        except FileNotFoundError:
            before = b""
        store.write_bytes(LOG_FILE, before + data)
    except OSError as exc:
        log.warning("could not write %s in the album folder: %s", LOG_FILE, exc)


class WorkerLog(logging.Handler):
    """A worker process's log lines, kept until the driver drains them (`drain`)."""

    def __init__(self, worker: str, level: int = logging.INFO):
        super().__init__(level)
        self.worker = worker
        self.lines: collections.deque[str] = collections.deque(maxlen=WORKER_LINES)
        self.setFormatter(logging.Formatter(f"%(asctime)s %(levelname)-7s worker {worker} %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def drain(self) -> list[str]:
        out = []
        while self.lines:
            out.append(self.lines.popleft())
        return out


def worker_logging(worker: str) -> WorkerLog:
    """Route this worker process's "farm" and "stages" loggers into a `WorkerLog`, and log any exception that
    escapes a thread (Python would print it to a stderr nobody reads)."""
    handler = WorkerLog(worker)
    for name in ("farm", "stages"):
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False

    def on_thread_error(args: threading.ExceptHookArgs) -> None:
        log.error("thread %s stopped: %s", args.thread.name if args.thread else "?", args.exc_value,
                  exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    threading.excepthook = on_thread_error
    return handler


def write_worker_lines(lines: list[str]) -> None:
    """Lines drained from a worker, into the driver's render.log as they are (each names its worker)."""
    for handler in log.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.stream.write("".join(f"{line}\n" for line in lines))
            handler.flush()
