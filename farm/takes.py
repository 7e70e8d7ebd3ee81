"""A track's takes and the score each one used: `farm rerender` (an edited score, or another plan candidate) and
`farm approve` (best of N, chosen by a person).

The top of a track's folder is its current take. `take.json` says which take that is and which score it used;
without one it is take 1, made from the score the plan stage wrote (or the album spec gave). Choosing another score
first moves a finished take's files to `takes/<n>/` — a song is never lost — then writes the new `take.json`, and
the render redoes the track from the semantic stage with the same seed and settings: nothing upstream runs again.
The plan stage's own scores stay in `plans/<k>/` (it writes them there when it makes more than one; the first
rerender saves a lone plan there too), so any of them can be chosen again.

`farm render` honours `take.json`: a score that was chosen stays chosen when the album is rendered again.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import replace

from . import artifacts
from .errors import UserError
from .store import Store

TAKE, TAKES, PLANS = "take.json", "takes", "plans"
AWAITING = "awaiting approval"      # a track's status while its scores wait for `farm approve`
# what a take is made of, below the plan stage (plan.npy: the score ids its semantic stage read)
TAKE_FILES = (artifacts.SCORE, artifacts.PLAN, artifacts.SEMANTIC, artifacts.LATENTS, artifacts.AUDIO,
              "audio.master.flac", "score.mid", artifacts.SETTINGS)


def candidate_path(key: str, candidate: int, name: str) -> str:
    """`plans/<k>/score.abc` or `plans/<k>/plan.npy` of a track; k from 1."""
    return f"{key}/{PLANS}/{candidate}/{name}"


def candidate_files(candidates: list[tuple[str, bytes]]) -> dict[str, bytes]:
    """The plan stage's files for N > 1 candidates (text, ids .npy bytes), relative to the track's folder."""
    files = {}
    for k, (text, ids) in enumerate(candidates, start=1):
        files[f"{PLANS}/{k}/{artifacts.SCORE}"] = text.encode("utf-8")
        files[f"{PLANS}/{k}/{artifacts.PLAN}"] = ids
    return files


def read_take(store: Store, key: str) -> dict | None:
    try:
        return json.loads(store.read_bytes(f"{key}/{TAKE}"))
    except (FileNotFoundError, NotADirectoryError):
        return None
    except ValueError as exc:
        raise UserError(f"{store.uri(f'{key}/{TAKE}')}: damaged ({exc}); delete it to go back to the plan stage's "
                        f"score") from None


def with_choices(store: Store, album, override: tuple[str, dict] | None = None):
    """The album with every track's chosen score (its `take.json`, or `override`: (folder, a new choice)) in place
    of the one the spec or the plan gives."""
    tracks = []
    for track in album.tracks:
        take = override[1] if override and override[0] == track.folder else read_take(store, track.folder)
        if take is not None and take["score"] == "edited":
            track = replace(track, abc=take["abc"], abc_ids=None)
        elif take is not None and take["score"] == "candidate":
            track = replace(track, abc=None, abc_ids=tuple(int(i) for i in _candidate_ids(store, track.folder,
                                                                                          take["candidate"])))
        tracks.append(track)
    return replace(album, tracks=tuple(tracks))


def _candidate_ids(store: Store, key: str, candidate: int):
    """Candidate k's ids: from plans/<k>/, or — for the first choice of a track whose plan stage wrote one score,
    before `keep_lone_plan` saved it there — the plan stage's own plan.npy."""
    path = candidate_path(key, candidate, artifacts.PLAN)
    if candidate == 1 and not store.exists(path) and read_take(store, key) is None:
        path = f"{key}/{artifacts.PLAN}"
    try:
        return artifacts.read_npy(store.read_bytes(path))
    except FileNotFoundError:
        raise UserError(f"{store.uri(f'{key}/{TAKE}')} chooses plan candidate {candidate}, but "
                        f"{candidate_path(key, candidate, artifacts.PLAN)} is gone") from None


def candidates(store: Store, key: str) -> list[int]:
    """The plan candidates a track has, ascending: those in `plans/`, or — while a plan stage that wrote one score
    still gives the track its score (no take.json) — that score, as candidate 1."""
    found = [int(n) for n in store.listdir(f"{key}/{PLANS}") if n.isdigit()]
    kept = sorted(k for k in found if store.exists(candidate_path(key, k, artifacts.PLAN)))
    if kept or read_take(store, key) is not None or not store.exists(f"{key}/{artifacts.PLAN}"):
        return kept
    return [1]


def keep_lone_plan(store: Store, key: str, tokenizer) -> None:
    """Before the first choice: the plan stage's single score (root plan.npy, while the track's score still comes
    from the plan stage) becomes candidate 1, so it can be chosen again after an edit replaced it."""
    if store.listdir(f"{key}/{PLANS}") or read_take(store, key) is not None \
            or not store.exists(f"{key}/{artifacts.PLAN}"):
        return
    ids = artifacts.read_npy(store.read_bytes(f"{key}/{artifacts.PLAN}"))
    store.write_bytes(candidate_path(key, 1, artifacts.PLAN), artifacts.npy_bytes(ids))
    store.write_bytes(candidate_path(key, 1, artifacts.SCORE), tokenizer.decode(ids.tolist()).encode("utf-8"))


def choice(*, edited: str | None = None, candidate: int | None = None) -> dict:
    """A take.json body, less its number: an edited score's text, or a plan candidate (from 1)."""
    if edited is not None:
        return {"score": "edited", "abc": edited, "score_sha256": _sha(edited.encode("utf-8"))}
    return {"score": "candidate", "candidate": candidate}


def same_choice(a: dict | None, b: dict) -> bool:
    return a is not None and {k: a.get(k) for k in ("score", "abc", "candidate")} == \
        {k: b.get(k) for k in ("score", "abc", "candidate")}


def begin(store: Store, key: str, new: dict, tokenizer, from_plan_stage: bool, finished: bool) -> int:
    """Make `new` the track's score: keep the current take in `takes/<n>/` if it `finished` (every stage's marker
    matches its keys: a take that stopped half-way is no song, and its files are partly the take before), write
    take.json. Choosing the current choice again (a rerender that stopped) only resumes it. `from_plan_stage`: the
    track's score comes from its plan stage (not the spec), so a lone plan is kept as candidate 1 first. → the
    take number now rendering."""
    if from_plan_stage:
        keep_lone_plan(store, key, tokenizer)
    current = read_take(store, key)
    if same_choice(current, new):
        return current["take"]
    number = current["take"] if current else 1
    if finished:
        _archive(store, key, number, current or {"take": 1, "score": "plan"}, tokenizer)
        number += 1
    store.write_bytes(f"{key}/{TAKE}", artifacts.json_bytes({"take": number, **new, "chosen_at": _now()}))
    return number


def _archive(store: Store, key: str, number: int, record: dict, tokenizer) -> None:
    """The current take's files → takes/<number>/, its score text as its semantic stage read it (score.abc at the
    top may already hold the user's edit)."""
    folder = f"{key}/{TAKES}/{number}"
    for name in TAKE_FILES:
        if name != artifacts.SCORE and store.exists(f"{key}/{name}"):
            store.write_bytes(f"{folder}/{name}", store.read_bytes(f"{key}/{name}"))
    if store.exists(f"{key}/{artifacts.PLAN}"):
        ids = artifacts.read_npy(store.read_bytes(f"{key}/{artifacts.PLAN}"))
        text = record.get("abc") or tokenizer.decode(ids.tolist())
        store.write_bytes(f"{folder}/{artifacts.SCORE}", text.encode("utf-8"))
    store.write_bytes(f"{folder}/{TAKE}", artifacts.json_bytes({**record, "take": number, "kept_at": _now()}))


def history(store: Store, key: str) -> list[dict]:
    """The takes kept in `takes/`, in order: number, score and its sha256, folder."""
    kept = []
    for n in sorted(int(x) for x in store.listdir(f"{key}/{TAKES}") if x.isdigit()):
        folder = f"{key}/{TAKES}/{n}"
        record = json.loads(store.read_bytes(f"{folder}/{TAKE}")) if store.exists(f"{folder}/{TAKE}") else {}
        score = store.read_bytes(f"{folder}/{artifacts.SCORE}") if store.exists(f"{folder}/{artifacts.SCORE}") else b""
        kept.append({"take": n, "score": describe(record), "score_sha256": _sha(score) if score else None,
                     "folder": f"{TAKES}/{n}"})
    return kept


def describe(take: dict | None, plan_marker: dict | None = None, given: bool = False) -> str:
    """Which score a take used, in words (the manifest's `score`)."""
    if take and take.get("score") == "edited":
        return "edited"
    if take and take.get("score") == "candidate":
        return f"plan candidate {take['candidate']} (chosen)"
    if plan_marker and plan_marker.get("candidates", 1) > 1:
        return (f"plan candidate {plan_marker['chosen']} of {plan_marker['candidates']} "
                f"(rule {plan_marker['rule']})")
    return "album spec" if given else "plan"


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
