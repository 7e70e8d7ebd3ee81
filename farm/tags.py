"""Vorbis comments on every FLAC the farm writes: the raw renders, the mastered tracks and album.flac.

One home for the tag names. A render's own tags (style, seed, model identity, the decode key as its settings hash)
are fixed by the stage keys, so `farm song` writes them with the audio. An album track also carries its title,
number, the album's title, track total and artist: those can change without the audio changing (a renamed album,
a track added), so the decode stage does not write them; `trackstore.tag_render` brings every finished raw render's
comments up to date when a render ends, rewriting only the comment block (the audio frames stay byte for byte what
the decode stage wrote), and records the new file's sha256 in the decode marker, so the manifest and the markers keep
describing the files on disk. A tag change never costs a GPU stage.
"""
from __future__ import annotations

import io


def render_tags(request, identity: dict, decode_key: str) -> dict[str, str]:
    """What identifies a render: the same stage keys give the same tags."""
    return {"YUE2_STYLE": request.style, "YUE2_SEED": str(request.seed), "YUE2_MODEL": identity["id"],
            "YUE2_SETTINGS": decode_key}


def track_tags(job, album, total: int, identity: dict) -> dict[str, str]:
    """An album track's tags: its render's, plus title, album, track number and total, and the artist if given."""
    names = {"TITLE": job.title, "ALBUM": album.title, "TRACKNUMBER": str(job.number), "TRACKTOTAL": str(total),
             **({"ARTIST": album.artist} if album.artist else {})}
    return {**names, **render_tags(job.request, identity, job.stage_keys["decode"])}


def with_tags(flac: bytes, tags: dict[str, str], cuesheet: str | None = None) -> bytes:
    """The FLAC with its Vorbis comments replaced by `tags` (and the cue sheet as the CUESHEET comment)."""
    from mutagen.flac import FLAC

    buffer = io.BytesIO(flac)
    f = FLAC(buffer)
    if f.tags is None:
        f.add_tags()
    f.tags.clear()
    for key, value in {**tags, **({"CUESHEET": cuesheet} if cuesheet is not None else {})}.items():
        f[key] = value
    buffer.seek(0)
    f.save(buffer, padding=lambda info: 0)       # no padding: the same audio and tags give the same bytes
    return buffer.getvalue()


def read_tags(flac: bytes) -> dict[str, str]:
    """A FLAC's Vorbis comments, one value per name (upper case)."""
    from mutagen.flac import FLAC

    f = FLAC(io.BytesIO(flac))
    comments = f.tags.as_dict() if f.tags is not None else {}
    return {key.upper(): values[0] for key, values in comments.items()}
