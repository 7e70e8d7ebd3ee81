"""Edit a score and re-render, best of N with approval (farm/takes.py, farm/rerender.py) on the session's Ray
cluster with the tiny model: what is recomputed, what is kept, which score each take used, and that the seed
stays the track's own."""
from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from farm.cli import app
from farm.driver import RenderOptions, render_album

from .conftest import PROFILES
from .farm_album import ALBUM, FILES, same_content

pytestmark = pytest.mark.slow     # full renders on the session's Ray cluster

EDITED = 'X:1\nT:Edited\nM:4/4\nL:1/8\nQ:1/4=96\nK:G\n"G"GABc d2B2|"D"A2F2 D4|]\n'
BROKEN = 'X:1\nT:Broken\nM:4/4\nL:1/8\nK:G\n"G"GABc d2B2|\n"D A2F2 D4|]\n'      # line 7: a chord symbol left open


def invoke(*args: str):
    return CliRunner().invoke(app, [*map(str, args)])


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def manifest_row(out, folder: str) -> dict:
    return next(r for r in json.loads((out / "manifest.json").read_text())["tracks"] if r["folder"] == folder)


@pytest.fixture(scope="module")
def first(ray_cluster, album, tiny_ckpt_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("takes") / "album"
    render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                      progress=False))
    return out, {folder.name: snapshot(folder) for folder in out.iterdir() if folder.is_dir()}


def test_rerender_from_an_edited_score_redoes_semantic_on_and_keeps_the_take(first, album, tiny_ckpt_dir):
    out, before = first
    one = out / "01-one"
    r = invoke("rerender", out, "1", "--cluster", PROFILES / "ci.toml")
    assert r.exit_code == 2 and "the score the track's current take was rendered from" in r.output, r.output

    (one / "score.abc").write_text(EDITED)
    album_flac = (out / "album.flac").read_bytes()
    r = invoke("rerender", out, "1", "--cluster", PROFILES / "ci.toml")
    assert r.exit_code == 0, r.output
    assert "take 2, score edited" in r.output

    kept = before["01-one"]
    # the first take, whole, in takes/1 (its score as its semantic stage read it, not the edit on top)
    for name in ("semantic.npy", "latents.npy", "audio.flac", "audio.master.flac", "settings.json", "plan.npy"):
        assert (one / "takes" / "1" / name).read_bytes() == kept[name], name
    assert (one / "takes" / "1" / "score.abc").read_bytes() == kept["score.abc"]
    # upstream untouched: the plan stage's marker, and its ids saved as candidate 1
    assert (one / ".stages" / "plan.json").read_bytes() == kept[".stages/plan.json"]
    assert (one / "plans" / "1" / "plan.npy").read_bytes() == kept["plan.npy"]
    # downstream redone from the edited score
    assert (one / "score.abc").read_text() == EDITED
    for name in ("semantic.npy", "latents.npy", "audio.flac", "audio.master.flac"):
        assert (one / name).read_bytes() != kept[name], name
    settings = json.loads((one / "settings.json").read_text())
    old = json.loads(kept["settings.json"])
    assert settings["request"]["abc"] == EDITED and settings["request"]["seed"] == old["request"]["seed"]
    assert settings["settings"] == old["settings"]
    # the other tracks are as they were (their mastered files are rewritten with the same bytes)
    for folder in ("02-two", "03-three"):
        assert snapshot(out / folder) == before[folder], folder
    assert (out / "album.flac").read_bytes() != album_flac
    row = manifest_row(out, "01-one")
    assert (row["take"], row["score"]) == (2, "edited")
    assert row["score_sha256"] == hashlib.sha256(EDITED.encode()).hexdigest()
    assert [(t["take"], t["score"]) for t in row["takes_kept"]] == [(1, "plan")]

    # the same seed: the edited take is what the sequential path makes from that score and the track's seed
    from dataclasses import replace

    from farm.album import load_album
    from farm.jobs import track_request, track_settings
    from stages.requests import open_checkpoint
    from stages.song import SongEngines, render_song

    ckpt = open_checkpoint(tiny_ckpt_dir / "model", tiny_ckpt_dir / "vae")
    track = replace(load_album(album).tracks[0], abc=EDITED)
    song = render_song(SongEngines(ckpt), track_request(track), track_settings(track, ckpt.cfg), key="01-one")
    assert np.array_equal(np.load(one / "semantic.npy"), song.codes)

    # rendering the album again from its spec keeps the chosen score: nothing runs
    again = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                              progress=False))
    assert again.events == [] and manifest_row(out, "01-one")["take"] == 2

    # back to the plan stage's own score: take 3 is take 1 again
    r = invoke("rerender", out, "01-one", "--plan", "1", "--cluster", PROFILES / "ci.toml")
    assert r.exit_code == 0, r.output
    for name in ("semantic.npy", "latents.npy", "audio.flac"):     # (the FLAC's settings tag names the new key)
        assert same_content(name, (one / name).read_bytes(), kept[name]), name
    assert (one / "takes" / "2" / "score.abc").read_text() == EDITED
    row = manifest_row(out, "01-one")
    assert (row["take"], row["score"]) == (3, "plan candidate 1 (chosen)")
    assert [t["score"] for t in row["takes_kept"]] == ["plan", "edited"]

    # a take that stopped before its decode stage is no song: another score replaces it, nothing is kept of it
    (one / ".stages" / "decode.json").unlink()
    (one / "score.abc").write_text(EDITED.replace("d2B2", "e2c2"))
    r = invoke("rerender", out, "1", "--cluster", PROFILES / "ci.toml")
    assert r.exit_code == 0 and "take 3, score edited" in r.output, r.output
    assert sorted(p.name for p in (one / "takes").iterdir()) == ["1", "2"]


def test_a_broken_or_impossible_rerender_is_refused_and_changes_nothing(first, tmp_path):
    out, _ = first
    take = (out / "01-one" / "take.json").read_bytes() if (out / "01-one" / "take.json").exists() else None
    broken = tmp_path / "broken.abc"
    broken.write_text(BROKEN)
    cases = [(["1", "--abc", broken], f"--abc {broken}: the ABC score is broken: line 7: a chord symbol"),
             (["3"], 'track 3 "Three" was rendered with cot = off'),
             (["9"], "TRACK '9': "),
             (["2", "--plan", "4"], '--plan 4: track 2 "Two" has plan candidate(s) 1'),
             (["2", "--plan", "0"], "--plan 0: plan candidates are numbered from 1"),
             (["1", "--abc", broken, "--plan", "1"], "--abc and --plan: give one")]
    for args, message in cases:
        r = invoke("rerender", out, *args)
        assert r.exit_code == 2 and message in r.output, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1, r.output
    after = (out / "01-one" / "take.json").read_bytes() if (out / "01-one" / "take.json").exists() else None
    assert after == take
    r = invoke("rerender", tmp_path, "1")
    assert r.exit_code == 2 and "no spec.json here" in r.output
    r = invoke("rerender", tmp_path / "gone", "1")
    assert r.exit_code == 2 and "no such album folder" in r.output and not (tmp_path / "gone").exists()
    r = invoke("approve", out, "1", "0")
    assert r.exit_code == 2 and r.output.strip() == "error: K 0: plan candidates are numbered from 1"


# the shared album's first two tracks (same seeds and settings, so its renders are the reference), the first with
# three candidate scores
BEST_OF = (ALBUM[:ALBUM.index('[[tracks]]\ntitle = "Three"')]
           .replace('title = "Farm Test"', 'title = "Best Of"')
           .replace('title = "One"\n', 'title = "One"\nplans = 3\n'))


def test_best_of_n_waits_for_approval_and_goes_on_with_the_chosen_score(ray_cluster, first, tiny_ckpt_dir,
                                                                        tmp_path):
    rendered, before = first
    spec = tmp_path / "best.toml"
    spec.write_text(BEST_OF)
    out = tmp_path / "best"
    r = invoke("render", spec, "--out", out, "--model", tiny_ckpt_dir, "--cluster", PROFILES / "ci.toml",
               "--approve")
    assert r.exit_code == 0, r.output
    assert "0/2 tracks done" in r.output and "2 track(s) await a score" in r.output
    one = out / "01-one"
    scores = [(one / "plans" / str(k) / "score.abc").read_bytes() for k in (1, 2, 3)]
    assert len(set(scores)) == 3
    # candidate 1 is the track's own seed: the plan a one-candidate album made (same track in `first`)
    assert (one / "plans" / "1" / "plan.npy").read_bytes() == before["01-one"]["plan.npy"]
    assert not (one / "semantic.npy").exists() and not (out / "02-two" / "semantic.npy").exists()
    assert [r["status"] for r in json.loads((out / "manifest.json").read_text())["tracks"]] == \
        ["awaiting approval"] * 2

    r = invoke("approve", out, "1", "2", "--cluster", PROFILES / "ci.toml")
    assert r.exit_code == 0, r.output
    assert (one / "plan.npy").read_bytes() == (one / "plans" / "2" / "plan.npy").read_bytes()
    assert (one / "score.abc").read_bytes() == scores[1]
    for name in FILES[2:]:
        assert (one / name).exists(), name
    row = manifest_row(out, "01-one")
    assert (row["status"], row["take"], row["score"]) == ("done", 1, "plan candidate 2 (chosen)")
    assert manifest_row(out, "02-two")["status"] == "awaiting approval"
    assert not (out / "album.flac").exists()

    r = invoke("approve", out, "Two", "1", "--cluster", PROFILES / "ci.toml")
    assert r.exit_code == 0, r.output
    # a lone plan approved is the track a plain render makes (byte for byte; the FLAC's tags name another album)
    for name in FILES:
        assert same_content(name, (out / "02-two" / name).read_bytes(), before["02-two"][name]), name
    assert (out / "album.flac").exists()
    shutil.rmtree(out)
