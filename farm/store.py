"""The artifact store: one fsspec URL (a local path by default; s3://, gs://, memory:// …) with atomic writes.

Atomic means a reader sees either the old file or the new one, never half: local paths write a temp file next to
the target and rename it; object stores publish an object only when its single upload completes. Knows nothing
about songs (see artifacts.py).
"""
from __future__ import annotations

import os
import uuid

import fsspec
from fsspec.implementations.local import LocalFileSystem


PREFLIGHT_TIMEOUT_S = 20.0     # the longest the write check waits for a store's first answer


class Store:
    def __init__(self, url: str):
        self.url = str(url)
        # Our own instance: other processes (the workers) write here too, so no listing may be cached across uses.
        self.fs, self.root = fsspec.core.url_to_fs(self.url, skip_instance_cache=True)
        self.local = isinstance(self.fs, LocalFileSystem)
        self.root = self.root.rstrip("/")

    def path(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    def uri(self, rel: str) -> str:
        """A URL another process can open (the protocol kept)."""
        return self.fs.unstrip_protocol(self.path(rel))

    def exists(self, rel: str) -> bool:
        self.fs.invalidate_cache()
        return self.fs.exists(self.path(rel))

    def read_bytes(self, rel: str) -> bytes:
        return self.fs.cat_file(self.path(rel))

    def write_bytes(self, rel: str, data: bytes) -> None:
        target = self.path(rel)
        if not self.local:
            self.fs.pipe_file(target, data)   # one PUT: the object appears whole or not at all
            return
        self.fs.makedirs(os.path.dirname(target), exist_ok=True)
        tmp = f"{target}.tmp-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def listdir(self, rel: str = "") -> list[str]:
        """Names (not paths) directly under rel; [] when it does not exist (or a file stands where its folder
        would be)."""
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(self.path(rel), detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def is_empty(self) -> bool:
        return not self.fs.exists(self.root) or not self.listdir("")

    def remove_tree(self, rel: str) -> None:
        if self.exists(rel):
            self.fs.rm(self.path(rel), recursive=True)

    def remove_temp_files(self) -> int:
        """Delete the temp files a killed writer left (`*.tmp-<hex>`, local folders only; object stores never hold
        half a file). Safe only under the render lock. → how many."""
        if not self.local or not os.path.isdir(self.root):
            return 0
        gone = 0
        for folder, _, files in os.walk(self.root):
            for name in files:
                if ".tmp-" in name:
                    os.unlink(os.path.join(folder, name))
                    gone += 1
        return gone

    def check_writable(self, flag: str, timeout: float | None = None) -> None:
        """Write and remove a probe file, so a location that cannot take the songs fails now, in one line, and not
        after the album has been computed. (A missing local folder is created: it is where the songs will go.)
        A store that does not answer within `timeout` seconds is refused too: a black-holed host would otherwise
        keep the client retrying its connects for minutes (botocore: 60 s per attempt, several attempts)."""
        import threading

        from .errors import UserError

        if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
            raise UserError(f"{flag} {self.url}: is a file, not a folder")
        probe = f".farm-write-check-{uuid.uuid4().hex}"
        timeout = PREFLIGHT_TIMEOUT_S if timeout is None else timeout
        outcome: list = []

        def write_and_remove() -> None:
            try:
                self.write_bytes(probe, b"")
                self.fs.rm_file(self.path(probe))
                outcome.append(None)
            except Exception as exc:   # OSError locally; each object store raises its own kinds
                outcome.append(exc)

        # A daemon thread: a probe still hanging when we give up must not keep the process from exiting.
        check = threading.Thread(target=write_and_remove, daemon=True, name="store-check")
        check.start()
        check.join(timeout)
        if not outcome:
            raise UserError(f"{flag} {self.url}: no answer from the store within {timeout:.0f} s (is the endpoint "
                            f"reachable?)")
        if outcome[0] is not None:
            exc = outcome[0]
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise UserError(f"{flag} {self.url}: cannot write there ({reason})")


LOCK = ".farm-render.lock"


class RenderLock:
    """One render at a time per album folder. The lock file names its owner (host, pid, start time); a lock whose
    owner was on this host and is gone (killed) is taken over, one held elsewhere is reported, not broken."""

    def __init__(self, store: Store, flag: str = "--out"):
        import json
        import socket
        import time

        from .errors import UserError

        self.store = store
        me = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()}
        if not self._create(json.dumps(me).encode()):
            other = self._owner()
            if other.get("host") != me["host"] or _alive(other.get("pid")):
                since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(other.get("started", 0)))
                raise UserError(f"{flag} {store.url} is being rendered by pid {other.get('pid')} on "
                                f"{other.get('host')} since {since}; wait for it to finish (or, if that render is "
                                f"gone, delete {store.uri(LOCK)})")
            store.write_bytes(LOCK, json.dumps(me).encode())       # its owner died on this host: ours now
        self.stale_temp_files_removed = store.remove_temp_files()

    def _create(self, data: bytes) -> bool:
        path = self.store.path(LOCK)
        try:
            if self.store.local:
                self.store.fs.makedirs(self.store.root, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            else:                                   # object stores: create-only where the backend offers it
                with self.store.fs.open(path, "xb") as f:
                    f.write(data)
            return True
        except FileExistsError:
            return False

    def _owner(self) -> dict:
        import json

        try:
            return json.loads(self.store.read_bytes(LOCK))
        except (OSError, ValueError):
            return {}

    def release(self) -> None:
        try:
            self.store.fs.rm_file(self.store.path(LOCK))
        except FileNotFoundError:
            pass


def _alive(pid) -> bool:
    try:
        os.kill(int(pid), 0)
    except (TypeError, ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def open_store(url: str, flag: str = "--out") -> Store:
    """The output location, checked before any work: a protocol fsspec knows and has installed, not the in-process
    memory filesystem (the workers are other processes), and writable."""
    from .errors import UserError

    url = str(url)
    if url.startswith("memory://"):
        raise UserError(f"{flag} {url}: fsspec's memory filesystem lives inside one process, and the stage workers "
                        f"are other processes; use a local path or an object store (s3://, gs://)")
    try:
        store = Store(url)
    except (ValueError, ImportError) as exc:   # unknown protocol; a protocol whose package is not installed
        raise UserError(f"{flag} {url}: {exc}") from None
    store.check_writable(flag)
    return store
