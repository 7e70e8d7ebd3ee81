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
        """Names (not paths) directly under rel; [] when it does not exist."""
        self.fs.invalidate_cache()
        try:
            entries = self.fs.ls(self.path(rel), detail=False)
        except FileNotFoundError:
            return []
        return sorted(e.rstrip("/").rsplit("/", 1)[-1] for e in entries)

    def is_empty(self) -> bool:
        return not self.fs.exists(self.root) or not self.listdir("")

    def check_writable(self, flag: str) -> None:
        """Write and remove a probe file, so a location that cannot take the songs fails now, in one line, and not
        after the album has been computed. (A missing local folder is created: it is where the songs will go.)"""
        from .errors import UserError

        if self.local and os.path.exists(self.root) and not os.path.isdir(self.root):
            raise UserError(f"{flag} {self.url}: is a file, not a folder")
        probe = f".farm-write-check-{uuid.uuid4().hex}"
        try:
            self.write_bytes(probe, b"")
            self.fs.rm_file(self.path(probe))
        except Exception as exc:   # OSError locally; each object store raises its own kinds
            reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            raise UserError(f"{flag} {self.url}: cannot write there ({reason})") from None


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
