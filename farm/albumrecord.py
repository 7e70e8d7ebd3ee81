"""The album folder's own copy of what it renders (`spec.json`): the album spec as the render read it (every
lyric and score inline, every default applied) and the weights and AR options it ran with.

`farm rerender` and `farm approve` work from the album folder alone, wherever the spec file has gone since: they
read this record, never the spec. Every render writes it again, so it always says what the folder holds now.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from . import artifacts
from .album import AlbumSpec, TrackSpec
from .errors import UserError
from .mastering import MasterSpec
from .store import Store

RECORD = "spec.json"
VERSION = 1


def save(store: Store, album: AlbumSpec, paths, opts) -> None:
    """`paths`: the resolved checkpoint (models.ModelPaths); `opts`: the render's options, AR options resolved."""
    spec = dataclasses.asdict(album)
    spec.update(path=str(album.path), ar_checkpoint=_text(album.ar_checkpoint))
    render = {"model": str(paths.model_dir), "vae": str(paths.vae_dir), "ar_checkpoint": _text(opts.ar_checkpoint),
              "ar_format": opts.ar_format, "kv_cache": opts.kv_cache, "exact": opts.exact, "approve": opts.approve}
    store.write_bytes(RECORD, artifacts.json_bytes({"version": VERSION, "album": spec, "render": render}))


def load(store: Store, flag: str = "OUT") -> tuple[AlbumSpec, dict]:
    """→ (the album as rendered, the render's options: model, vae, ar_checkpoint, ar_format, kv_cache, exact,
    approve)."""
    try:
        record = json.loads(store.read_bytes(RECORD))
    except FileNotFoundError:
        raise UserError(f"{flag} {store.url}: no {RECORD} here — not an album folder that `farm render` wrote (or "
                        f"one rendered before {RECORD} existed: render it once more with the same spec)") from None
    except ValueError as exc:
        raise UserError(f"{flag} {store.uri(RECORD)}: damaged ({exc}); render the album again to rewrite it") from None
    if record.get("version") != VERSION:
        raise UserError(f"{flag} {store.uri(RECORD)}: version {record.get('version')!r}, expected {VERSION}")
    spec = dict(record["album"])
    tracks = tuple(TrackSpec(**{**t, "abc_ids": tuple(t["abc_ids"]) if t["abc_ids"] is not None else None})
                   for t in spec.pop("tracks"))
    master = spec.pop("master")
    album = AlbumSpec(**{**spec, "path": Path(spec["path"]), "tracks": tracks,
                         "master": MasterSpec(**master) if master is not None else None,
                         "ar_checkpoint": Path(spec["ar_checkpoint"]) if spec["ar_checkpoint"] else None})
    return album, record["render"]


def _text(path: Path | None) -> str | None:
    return str(path) if path is not None else None
