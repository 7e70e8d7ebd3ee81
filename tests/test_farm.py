"""The farm on a real local Ray cluster (started once per session): equality with the sequential path, reruns,
failures, storage. Resume after a stopped driver and card-by-card placement: tests/test_farm_resume.py."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from farm import artifacts
from farm.cli import app
from farm.driver import RenderOptions, render_album
from farm.jobs import track_request, track_settings

from .conftest import PROFILES
from .farm_album import FILES, same_content

pytestmark = pytest.mark.slow     # full renders on the session's Ray cluster

@pytest.fixture(scope="module")
def rendered(ray_cluster, album, tiny_ckpt_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("render") / "album"
    result = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                               progress=False))
    return out, result


def test_render_log_holds_the_plan_each_call_and_the_workers_lines(rendered):
    text = (rendered[0] / "render.log").read_text()
    assert "INFO    farm: render of" in text and "Plan:" in text
    for track in ("01-one", "02-two", "03-three"):
        assert f"{track} decode done in" in text, track
    assert "worker " in text and "engines " in text and "loaded" in text     # a line drained from a worker


def test_mastered_tracks_album_flac_cue_and_tags(rendered):
    """The album step: each track at -14 LUFS (±0.5 LU) under -1 dBTP, measured on the written files; album.flac is
    the mastered tracks in order, its cue indexes on their boundaries to the sample; tags read back; the raw renders'
    audio stays as it was (the test above compares their samples with the sequential path)."""
    import io

    import pyloudnorm
    import soundfile as sf
    from mutagen.flac import FLAC
    from scipy.signal import resample_poly

    out = rendered[0]
    folders = ["01-one", "02-two", "03-three"]
    lengths = []
    for number, folder in enumerate(folders, start=1):
        audio, rate = sf.read(out / folder / "audio.master.flac", always_2d=True)
        assert abs(pyloudnorm.Meter(rate).integrated_loudness(audio) - (-14.0)) <= 0.5, folder
        assert 20 * np.log10(np.abs(resample_poly(audio, 4, 1, axis=0)).max()) <= -1.0 + 0.05, folder
        assert len(audio) % 640 == 0                      # whole CD frames: the cue indexes are exact
        tags = FLAC(out / folder / "audio.master.flac")
        assert tags["TRACKNUMBER"] == [str(number)] and tags["TRACKTOTAL"] == ["3"] and tags["ALBUM"] == ["Farm Test"]
        assert tags["YUE2_SEED"][0].isdigit() and len(tags["YUE2_SETTINGS"][0]) == 64
        lengths.append(len(audio))
    album, _ = sf.read(out / "album.flac", always_2d=True)
    assert len(album) == sum(lengths)
    starts = [0] + list(np.cumsum(lengths)[:-1])
    indexes = [line.split()[-1] for line in (out / "album.cue").read_text().splitlines() if "INDEX 01" in line]
    as_samples = [(int(m) * 60 * 75 + int(s) * 75 + int(f)) * 640 for m, s, f in (i.split(":") for i in indexes)]
    assert as_samples == starts
    assert "TRACK 03 AUDIO" in FLAC(out / "album.flac")["CUESHEET"][0]
    first, _ = sf.read(io.BytesIO((out / "01-one" / "audio.master.flac").read_bytes()), always_2d=True)
    assert np.array_equal(album[:len(first)], first)
    report = json.loads((out / "mastering.json").read_text())
    assert report["album_samples"] == sum(lengths) and set(report["tracks"]) == set(folders)


def sequential_songs(album, tiny_ckpt_dir, sampler: str, threads: int = 1, ar_checkpoint=None,
                     kv_cache: str = "bf16", ar_format: str = "bf16") -> dict:
    """Each track through the in-process sequential path, same seeds and settings, on `threads` torch threads:
    folder → file bytes."""
    import torch

    from farm.album import load_album
    from stages.requests import open_checkpoint
    from stages.song import SongEngines, render_song

    ckpt = open_checkpoint(tiny_ckpt_dir / "model", tiny_ckpt_dir / "vae")
    engines = SongEngines(ckpt, sampler=sampler, ar_checkpoint=ar_checkpoint, kv_cache=kv_cache, ar_format=ar_format)
    out, saved = {}, torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for track in load_album(album).tracks:
            song = render_song(engines, track_request(track), track_settings(track, ckpt.cfg, sampler),
                               key=track.folder)
            out[track.folder] = artifacts.song_files(song)
    finally:
        torch.set_num_threads(saved)
    return out


@pytest.fixture(scope="module")
def sequential(album, tiny_ckpt_dir):
    return sequential_songs(album, tiny_ckpt_dir, "fast")


def test_album_renders_byte_identical_to_the_sequential_path(rendered, sequential):
    out, result = rendered
    assert not result.failures and [r["status"] for r in result.rows] == ["done"] * 3
    for folder, files in sequential.items():
        for name in FILES:
            assert same_content(name, (out / folder / name).read_bytes(), files[name]), (folder, name)
    events = pq.read_table(out / "metrics.parquet").to_pylist()
    assert {(e["track"], e["stage"]) for e in events} == {
        ("01-one", s) for s in ("plan", "semantic", "acoustic", "decode")} | {
        ("02-two", s) for s in ("plan", "semantic", "acoustic", "decode")} | {
        ("03-three", s) for s in ("semantic", "acoustic", "decode")}
    # songs shared the AR engine's batch (continuous batching) and still equal the one-song path
    assert max(e["batch"] for e in events if e["stage"] == "plan") > 1
    assert all(e["batch_shape"].startswith("ar slots=") for e in events if e["stage"] in ("plan", "semantic"))


def test_bytes_do_not_depend_on_the_thread_count(ray_cluster, album, tiny_ckpt_dir, sequential, tmp_path):
    """`farm render --threads 2` gives the bytes of the one-song path on one thread (and `farm song` on two)."""
    out = tmp_path / "two-threads"
    result = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                               progress=False, threads=2))
    assert not result.failures
    two = sequential_songs(album, tiny_ckpt_dir, "fast", threads=2)
    for folder, files in sequential.items():
        for name in FILES:
            assert same_content(name, (out / folder / name).read_bytes(), files[name]), (folder, name)
            assert files[name] == two[folder][name], (folder, name)


def test_album_outputs(rendered):
    out, result = rendered
    manifest = pq.read_table(out / "manifest.parquet").to_pylist()
    assert [m["folder"] for m in manifest] == ["01-one", "02-two", "03-three"]
    for m in manifest:
        audio = (out / m["folder"] / "audio.flac").read_bytes()
        assert m["sha256_audio_flac"] == hashlib.sha256(audio).hexdigest()
        assert m["decode_gpu"] == "cpu" and m["acoustic_seconds"] > 0
    # the tiny model's random scores are no ABC music21 reads: no score.mid, and the manifest says why
    assert all(m["score_midi"].startswith(("music21 could not read", "the score holds no notes", "no score"))
               for m in manifest)
    assert not any((out / m["folder"] / "score.mid").exists() for m in manifest)
    playlist = (out / "playlist.m3u8").read_text().splitlines()
    assert playlist[0] == "#EXTM3U" and playlist[2] == "01-one/audio.flac"
    settings = (out / "02-two" / "settings.json").read_text()
    assert '"cot": "melody"' in settings and '"seed": 12' in settings


def test_render_writes_settings_json_like_farm_song(rendered, tiny_ckpt_dir, tmp_path):
    """One builder for settings.json: a rendered track's has every key `farm song` writes (and which track it is),
    and its audio length follows the VAE's rule."""
    lyrics = tmp_path / "lyrics.txt"
    lyrics.write_text("[verse]\nNight bus\n")
    r = CliRunner().invoke(app, ["song", "--model", str(tiny_ckpt_dir), "--style", "x", "--lyrics-file", str(lyrics),
                                 "--out", str(tmp_path / "song"), "--device", "cpu", "--max-semantic-tokens", "16"])
    assert r.exit_code == 0, r.output
    single = json.loads((tmp_path / "song" / "settings.json").read_text())
    farmed = json.loads((rendered[0] / "02-two" / "settings.json").read_text())
    assert set(farmed) == set(single) | {"track"}
    assert farmed["device"] == "cpu" and farmed["dtype"] == single["dtype"] and farmed["versions"] == single["versions"]
    assert farmed["kernels"] == single["kernels"] == {"acoustic_attention": "sdpa"}    # FA4 only on Hopper+
    assert set(farmed["truncated"]) == {"plan", "semantic"} and farmed["audio"]["samples"] == (
        1920 * farmed["audio"]["frames"] - 64)


def test_exact_mode_is_the_sequential_path_too(ray_cluster, album, tiny_ckpt_dir, sequential, tmp_path):
    """--exact: the reference sampler in the farm equals the sequential path with the reference sampler, and the
    two samplers give different songs for the same seed."""
    out = tmp_path / "exact"
    result = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), exact=True,
                                               cluster=PROFILES / "ci.toml", progress=False))
    assert not result.failures
    assert all(e.batch == 1.0 for e in result.events)
    for folder, files in sequential_songs(album, tiny_ckpt_dir, "exact").items():
        assert same_content("audio.flac", (out / folder / "audio.flac").read_bytes(), files["audio.flac"])
        assert (out / folder / "semantic.npy").read_bytes() != sequential[folder]["semantic.npy"]


def test_quantised_ar_weights_and_kv_cache_render_like_the_sequential_path(ray_cluster, album, tiny_ckpt_dir, rendered,
                                                                    tmp_path):
    """--ar-checkpoint (`farm quantize --format fp8`) and --kv-cache fp8: the farm's songs equal the sequential
    path's with the same options, their stage keys differ from the BF16 render's from the plan stage on (resume
    never mixes the two; on the tiny model the FP8 draws may well equal the BF16 ones), and settings.json says
    which AR weights and KV cache ran."""
    ar_dir = tmp_path / "ar-fp8"
    r = CliRunner().invoke(app, ["quantize", str(ar_dir), "--model", str(tiny_ckpt_dir), "--format", "fp8"])
    assert r.exit_code == 0, r.output
    out = tmp_path / "fp8"
    result = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), ar_checkpoint=ar_dir,
                                               kv_cache="fp8", cluster=PROFILES / "ci.toml", progress=False))
    assert not result.failures
    assert all("weights=fp8 kv=fp8" in e.batch_shape for e in result.events if e.stage in ("plan", "semantic"))
    for folder, files in sequential_songs(album, tiny_ckpt_dir, "fast", ar_checkpoint=ar_dir, kv_cache="fp8").items():
        for name in FILES:
            assert same_content(name, (out / folder / name).read_bytes(), files[name]), (folder, name)
        fp8, bf16 = (json.loads((root / folder / "settings.json").read_text()) for root in (out, rendered[0]))
        assert fp8["checkpoint"]["ar"]["format"] == fp8["checkpoint"]["ar"]["kv_cache"] == "fp8"
        assert "ar" not in bf16["checkpoint"]
        assert all(fp8["stage_keys"][s] != bf16["stage_keys"][s] for s in fp8["stage_keys"]), folder


def test_fp8_ar_format_renders_like_the_sequential_path(ray_cluster, album, tiny_ckpt_dir, rendered, tmp_path):
    """--ar-format fp8 without a checkpoint: each AR worker quantises the MoT's AR weights when it loads; the songs
    equal the sequential path's with the same format, the plan says which format ran, and no stage key is the BF16
    render's."""
    out = tmp_path / "fp8-on-load"
    result = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), ar_format="fp8",
                                               cluster=PROFILES / "ci.toml", progress=False))
    assert not result.failures and result.plan.ar_format == "fp8"
    assert all("weights=fp8 kv=bf16" in e.batch_shape for e in result.events if e.stage in ("plan", "semantic"))
    for folder, files in sequential_songs(album, tiny_ckpt_dir, "fast", ar_format="fp8").items():
        for name in FILES:
            assert same_content(name, (out / folder / name).read_bytes(), files[name]), (folder, name)
        fp8, bf16 = (json.loads((root / folder / "settings.json").read_text()) for root in (out, rendered[0]))
        assert fp8["checkpoint"]["ar"] == {"format": "fp8"}
        assert all(fp8["stage_keys"][s] != bf16["stage_keys"][s] for s in fp8["stage_keys"]), folder


def test_raw_renders_carry_their_tags_and_a_renamed_album_only_retags_them(ray_cluster, album, tiny_ckpt_dir,
                                                                            rendered, tmp_path):
    """Every raw audio.flac names its track, album, style, seed, model and settings; renaming the album and giving
    it an artist runs no stage: the raw renders get the new tags, their samples stay, and the manifest's sha256 and
    the decode markers describe the files now on disk."""
    import shutil

    from farm.tags import read_tags

    out = tmp_path / "album"
    shutil.copytree(rendered[0], out)
    for number, folder in enumerate(["01-one", "02-two", "03-three"], start=1):
        tags = read_tags((out / folder / "audio.flac").read_bytes())
        settings = json.loads((out / folder / "settings.json").read_text())
        assert tags == {"TITLE": ["One", "Two", "Three"][number - 1], "ALBUM": "Farm Test", "TRACKNUMBER": str(number),
                        "TRACKTOTAL": "3", "YUE2_STYLE": "lo-fi pop, warm piano",
                        "YUE2_SEED": str(settings["request"]["seed"]),
                        "YUE2_MODEL": settings["checkpoint"]["id"],
                        "YUE2_SETTINGS": settings["stage_keys"]["decode"]}, folder
    renamed = tmp_path / "renamed.toml"
    spec = album.read_text().replace('title = "Farm Test"', 'title = "Farm Test II"\nartist = "The Rays"', 1)
    renamed.write_text(spec)
    before = {f: (out / f / "audio.flac").read_bytes() for f in ("01-one", "02-two", "03-three")}
    again = render_album(renamed, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                                progress=False))
    assert again.events == [] and [r["status"] for r in again.rows] == ["done"] * 3
    for row in pq.read_table(out / "manifest.parquet").to_pylist():
        data = (out / row["folder"] / "audio.flac").read_bytes()
        assert data != before[row["folder"]] and same_content("audio.flac", data, before[row["folder"]])
        assert read_tags(data)["ARTIST"] == "The Rays" and read_tags(data)["ALBUM"] == "Farm Test II"
        assert row["sha256_audio_flac"] == hashlib.sha256(data).hexdigest() == json.loads(
            (out / row["folder"] / ".stages" / "decode.json").read_text())["files"]["audio.flac"]


def test_rerun_recomputes_nothing(ray_cluster, album, tiny_ckpt_dir, rendered):
    """…even after a render killed on this host left its lock and a half-written temp file: both are cleared."""
    import socket

    out, first = rendered
    (out / ".farm-render.lock").write_text(json.dumps({"host": socket.gethostname(), "pid": 2 ** 22 + 7,
                                                        "started": 0}))
    stale = next(out.glob("*/")) / "audio.flac.tmp-0123abcd"
    stale.write_bytes(b"half a song")
    again = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                              progress=False))
    assert again.events == [] and [r["status"] for r in again.rows] == ["done"] * 3
    runs = {e["run_id"] for e in pq.read_table(out / "metrics.parquet").to_pylist()}
    assert runs == {first.run_id}
    assert not stale.exists() and not (out / ".farm-render.lock").exists()


def test_metrics_lost_with_a_driver_are_rebuilt_from_the_stage_markers(ray_cluster, album, tiny_ckpt_dir, rendered,
                                                                       tmp_path):
    """A finished album whose event log was lost (the driver died before flushing): the rerun recomputes nothing
    and logs every stage call again from the markers."""
    import shutil

    out = tmp_path / "album"
    shutil.copytree(rendered[0], out)
    shutil.rmtree(out / "metrics")
    (out / "metrics.parquet").unlink()
    result = render_album(album, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                               progress=False))
    assert not result.events and not result.failures
    rows = pq.read_table(out / "metrics.parquet").to_pylist()
    before = pq.read_table(rendered[0] / "metrics.parquet").to_pylist()
    key = lambda r: (r["track"], r["stage"], r["start"], r["worker"], r["units"])   # noqa: E731
    assert sorted(map(key, rows)) == sorted(map(key, before))
    assert {r["run_id"] for r in rows} == {f"{result.run_id}-recovered"}


def test_a_failing_stage_fails_its_track_only_and_keeps_the_whole_error(ray_cluster, album, tiny_ckpt_dir,
                                                                         tmp_path):
    """Track 2's folder cannot be made (a file stands in its place): its plan stage fails, the album goes on, the
    worker's full traceback is kept under .failures/ and the manifest points to it; `farm render` exits 3."""
    out = tmp_path / "failing"
    out.mkdir()
    (out / "02-two").write_text("in the way")
    r = CliRunner().invoke(app, ["render", str(album), "--out", str(out), "--model", str(tiny_ckpt_dir),
                                 "--cluster", str(PROFILES / "ci.toml")])
    assert r.exit_code == 3, r.output
    (failed,) = [line for line in r.stderr.splitlines() if line.startswith("failed: ")]
    assert failed.startswith("failed: 02-two: plan: ")
    details = (out / ".failures" / "02-two.plan.txt").read_text()
    assert 'farm/trackstore.py", line' in details and "FileExistsError" in details and "\x1b[" not in details
    rows = {r["folder"]: r for r in json.loads((out / "manifest.json").read_text())["tracks"]}
    assert rows["02-two"]["status"] == "failed" and ".failures/02-two.plan.txt" in rows["02-two"]["error"]
    assert rows["01-one"]["status"] == rows["03-three"]["status"] == "done"


def test_memory_urls_are_refused(tmp_path, album, tiny_ckpt_dir):
    r = CliRunner().invoke(app, ["render", str(album), "--out", "memory://album", "--model", str(tiny_ckpt_dir)])
    assert r.exit_code == 2 and "lives inside one process" in r.stderr


@pytest.fixture()
def s3(monkeypatch):
    """A real S3-compatible server (moto) on 127.0.0.1; workers reach it through the forwarded AWS_* variables."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}.items():
        monkeypatch.setenv(key, value)
    import fsspec

    fs = fsspec.filesystem("s3", skip_instance_cache=True)
    fs.mkdir("albums")
    yield fs
    server.stop()


def test_s3_output_end_to_end_with_resume(ray_cluster, album, tiny_ckpt_dir, rendered, s3):
    out = "s3://albums/farm-test"
    first = render_album(album, RenderOptions(out=out, model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                              progress=False))
    assert not first.failures and len(first.events) == 11
    local, _ = rendered
    for folder in ("01-one", "02-two", "03-three"):
        assert s3.cat_file(f"albums/farm-test/{folder}/audio.flac") == (local / folder / "audio.flac").read_bytes()
    assert s3.exists("albums/farm-test/manifest.parquet") and s3.exists("albums/farm-test/playlist.m3u8")
    s3.rm("albums/farm-test/02-two/.stages/decode.json")       # as if the run had died before that marker
    again = render_album(album, RenderOptions(out=out, model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                              progress=False))
    assert [(e.track, e.stage) for e in again.events] == [("02-two", "decode")]
    assert s3.cat_file("albums/farm-test/02-two/audio.flac") == (local / "02-two" / "audio.flac").read_bytes()
