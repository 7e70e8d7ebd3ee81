"""`farm rerender` and `farm approve`: one track of a rendered album again, from another score.

The score is the user's edit of the track's `score.abc` (or another file, `--abc`), or one of the plan stage's
candidates (`--plan K`; `farm approve OUT TRACK K` is the same for a track held by `farm render --approve`). It is
checked before anything runs; then the track's finished take is kept in `takes/<n>/` (farm/takes.py) and the
track renders from the semantic stage with its own seed and settings, through the same farm as `farm render`,
from the album folder's own record of the album (`spec.json`). The album is mastered again afterwards.
"""
from __future__ import annotations

from pathlib import Path

from . import albumrecord, artifacts, takes
from .errors import UserError, read_user_text
from .jobs import track_has_plan_stage
from .store import open_store


def rerender(out: str, track: str, *, abc_file: Path | None = None, plan: int | None = None,
             address: str | None = None, cluster: Path | None = None, log_level: str = "info",
             progress: bool | None = None, flag: str = "--abc", plan_flag: str = "--plan"):
    from stages.requests import open_checkpoint

    from .driver import RenderOptions, render_album
    from .models import resolve_model

    if abc_file is not None and plan is not None:
        raise UserError("--abc and --plan: give one of them (an edited score, or a plan candidate)")
    if plan is not None and plan < 1:
        raise UserError(f"{plan_flag} {plan}: plan candidates are numbered from 1")
    if "://" not in out and not Path(out).is_dir():     # the store's write probe would create a missing folder
        raise UserError(f"OUT {out}: no such album folder")
    store = open_store(out, "OUT")
    album, record = albumrecord.load(store)
    spec = find_track(album, track, out)
    if spec.cot == "off":
        raise UserError(f"{out}: {spec.label} was rendered with cot = off: it has no score to edit")
    paths = resolve_model(record["model"], record["vae"], flag=f"{store.uri(albumrecord.RECORD)}: model")
    ckpt = open_checkpoint(paths.model_dir, paths.vae_dir)
    if plan is not None:
        new = takes.choice(candidate=check_candidate(store, spec, plan, plan_flag))
    else:
        new = takes.choice(edited=edited_score(store, spec, abc_file, ckpt.tokenizer, flag))
    opts = RenderOptions(out=out, model=record["model"], vae=record["vae"], address=address, cluster=cluster,
                         exact=record["exact"], log_level=log_level, progress=progress,
                         ar_checkpoint=Path(record["ar_checkpoint"]) if record["ar_checkpoint"] else None,
                         kv_cache=record["kv_cache"], ar_format=record["ar_format"], only=frozenset({spec.folder}),
                         approve=record["approve"])     # the album's other held tracks stay held
    return render_album(album, opts, choose=(spec.folder, new))


def find_track(album, track: str, out: str):
    """A track by its number, its folder name or its title."""
    for t in album.tracks:
        if track in (str(t.number), t.folder, t.title):
            return t
    raise UserError(f"TRACK {track!r}: {out} has no such track (give a number 1–{len(album.tracks)}, a folder "
                    f"name or a title)")


def check_candidate(store, spec, plan: int, flag: str) -> int:
    if not track_has_plan_stage(spec):
        raise UserError(f"{flag} {plan}: the score of {spec.label} comes from the album spec, not a plan stage; "
                        f"edit it and rerender with --abc instead")
    have = takes.candidates(store, spec.folder)
    if plan not in have:
        shown = ", ".join(map(str, have)) if have else "none yet (its plan stage has not run)"
        raise UserError(f"{flag} {plan}: {spec.label} has plan candidate(s) {shown}")
    return plan


def edited_score(store, spec, abc_file: Path | None, tokenizer, flag: str) -> str:
    """The edited score's text, checked (scores.check_abc); refused when it is the score the current take used."""
    from .scores import check_abc

    if abc_file is not None:
        text, where = read_user_text(abc_file, f"{flag} {abc_file}"), f"{flag} {abc_file}"
    else:
        where = store.uri(f"{spec.folder}/{artifacts.SCORE}")
        if not store.exists(f"{spec.folder}/{artifacts.SCORE}"):
            raise UserError(f"{where}: no score yet (the track's plan stage has not run); render the album first")
        text = store.read_bytes(f"{spec.folder}/{artifacts.SCORE}").decode("utf-8", "replace")
    if text == model_score(store, spec.folder, tokenizer):
        raise UserError(f"{where}: the score the track's current take was rendered from; edit score.abc first, or "
                        f"give another with --abc FILE or a plan candidate with --plan K")
    check_abc(text, where)
    return text


def model_score(store, key: str, tokenizer) -> str | None:
    """The text of the score the current take read when that score came from the model (a plan candidate), else
    None. (An edited take's own text is allowed again: that resumes a rerender that stopped.)"""
    take = takes.read_take(store, key)
    if (take is not None and take["score"] == "edited") or not store.exists(f"{key}/{artifacts.PLAN}"):
        return None
    return tokenizer.decode(artifacts.read_npy(store.read_bytes(f"{key}/{artifacts.PLAN}")).tolist())
