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
