"""Bad input, table-driven, across every command: each case must end with exit code 2 and one readable message
naming the file, track and field (or the flag), with no traceback, nothing written to the output, and neither Ray
started nor a model loaded (both are made to explode if anything reaches them)."""
from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from farm.cli import app

GOOD = '''title = "Good"
[defaults]
style = "pop"
[[tracks]]
title = "One"
lyrics_file = "lyrics.txt"
'''


def album(world: Path, name: str, text: str) -> str:
    path = world / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def track(extra: str, head: str = 'title = "Bad"\n[defaults]\nstyle = "pop"\n') -> str:
    return head + '[[tracks]]\ntitle = "One"\nlyrics = "la la"\n' + extra


@pytest.fixture(scope="module")
def world(tmp_path_factory, tiny_ckpt_dir):
    """Files every case may point at: good and bad specs, lyrics, scores, checkpoints and profiles."""
    from safetensors.torch import load_file, save_file

    w = tmp_path_factory.mktemp("world")
    (w / "lyrics.txt").write_text("[verse]\nla la la\n")
    (w / "empty.txt").write_text("  \n")
    (w / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (w / "huge.txt").write_bytes(b"a" * ((1 << 20) + 1))
    (w / "adir").mkdir()
    (w / "live-album").mkdir()
    (w / "live-album" / "live.json").write_text("{}")      # what makes a folder the dashboard's to serve
    os.mkfifo(w / "pipe")
    (w / "file.out").write_text("not a folder")
    (w / "full").mkdir()
    (w / "full" / "thesis.docx").write_text("someone's work")
    np.save(w / "plan2d.npy", np.zeros((2, 3), dtype=np.int32))
    (w / "broken.abc").write_text('X:1\nM:4/4\nL:1/8\nK:G\nGABc d2B2|\n"D A2F2 D4|]\n')
    (w / "profile.toml").write_text('name = "x"\n[[nodes]]\nname = "a"\ncpus = 4\ngpus = ["Voodoo 3"]\n')
    (w / "broken.toml").write_text("name = [\n")
    for name, damage in (("missing", "drop"), ("misshaped", "shape"), ("truncated", "cut"), ("vaecut", "vae")):
        root = w / f"ckpt-{name}"
        shutil.copytree(tiny_ckpt_dir, root)
        weights = root / ("vae" if damage == "vae" else "model") / "model.safetensors"
        if damage in ("cut", "vae"):
            with open(weights, "r+b") as f:
                f.truncate(weights.stat().st_size - 100)
            continue
        tensors = load_file(weights)
        victim = "model.layers.1.mlp.down_proj.weight"
        if damage == "drop":
            del tensors[victim]
        else:
            tensors[victim] = tensors[victim][:, :-1].contiguous()
        save_file(tensors, weights)
    typo = w / "ckpt-typo"                      # a misspelled key in config.json is refused, not ignored
    shutil.copytree(tiny_ckpt_dir, typo)
    config = json.loads((typo / "model" / "config.json").read_text())
    config["num_hiden_layers"] = config.pop("num_hidden_layers")
    (typo / "model" / "config.json").write_text(json.dumps(config))
    from stages.ar_checkpoint import quantize_checkpoint
    from stages.config_json import from_checkpoint

    cfg = from_checkpoint(tiny_ckpt_dir / "model", tiny_ckpt_dir / "vae")
    quantize_checkpoint(tiny_ckpt_dir / "model", cfg, w / "ar-fp8")
    shutil.copytree(w / "ar-fp8", w / "ar-wide")
    config = json.loads((w / "ar-wide" / "config.json").read_text())
    (w / "ar-wide" / "config.json").write_text(json.dumps({**config, "hidden_size": 128}))
    return w


@pytest.fixture
def no_work(monkeypatch):
    """Anything that would start Ray or load a model fails the case loudly (exit code 1, not 2)."""
    import ray

    import farm.raycluster
    import stages.song

    def explode(*args, **kwargs):
        raise AssertionError("bad input reached Ray or the model")

    monkeypatch.setattr(farm.raycluster, "start", explode)
    monkeypatch.setattr(ray, "init", explode)
    monkeypatch.setattr(stages.song.SongEngines, "__init__", explode)


def busy_port() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


HELD = busy_port()       # held for the whole module: the dashboard case must find it taken
MEASURED = Path(__file__).resolve().parents[1] / "docs" / "measured"

# (id, argv with {w} = the world folder and {out} = a fresh output path, expected text in the message)
RENDER = [
    ("render-kv-cache", ["{w}/good.toml", "--kv-cache", "int8"],
     "Invalid value for '--kv-cache': 'int8' is not one of 'bf16', 'fp8'"),
    ("spec-kv-cache", ["@kvspec=" + GOOD.replace('[defaults]', 'kv_cache = "fp4"\n[defaults]')],
     "kv_cache: must be one of bf16, fp8, got 'fp4'"),
    ("render-ar-format", ["{w}/good.toml", "--ar-format", "int8"],
     "Invalid value for '--ar-format': 'int8' is not one of 'bf16', 'fp8', 'nvfp4'"),
    ("spec-ar-format", ["@arfmt=" + GOOD.replace('[defaults]', 'ar_format = "fp4"\n[defaults]')],
     "ar_format: must be one of bf16, fp8, nvfp4, got 'fp4'"),
    ("spec-ar-checkpoint-type", ["@arnum=" + GOOD.replace('[defaults]', 'ar_checkpoint = 3\n[defaults]')],
     "ar_checkpoint: must be a directory path"),
    ("spec-ar-checkpoint-missing", ["@armissing=" + GOOD.replace('[defaults]', 'ar_checkpoint = "nope"\n[defaults]')],
     "ar_checkpoint: {w}/nope is not a directory"),
    ("spec-ar-checkpoint-wrong-shape", ["@arwide=" + GOOD.replace('[defaults]', 'ar_checkpoint = "ar-wide"\n[defaults]')],
     "{w}/ar-wide/config.json: hidden_size is 128, the MoT checkpoint has 64"),
    ("render-ar-checkpoint-wrong-shape", ["{w}/good.toml", "--ar-checkpoint", "{w}/ar-wide"],
     "{w}/ar-wide/config.json: hidden_size is 128, the MoT checkpoint has 64"),
    ("spec-missing", ["{w}/nope.toml"], "no such album spec"),
    ("spec-is-dir", ["{w}/adir"], "is a directory"),
    ("spec-is-pipe", ["{w}/pipe"], "not a regular file"),
    ("spec-not-toml", ["@notoml=title = = 3"], "not valid TOML"),
    ("spec-latin1", ["{w}/latin1.txt"], "not a UTF-8 text file"),
    ("unknown-key", ["@unknown=" + GOOD + "colour = 1\n"], "unknown key 'colour'"),
    ("master-lufs", ["@masterlufs=" + GOOD + "[master]\nlufs = 3\n"],
     "master.lufs: must be a number in [-40, -5], got 3"),
    ("master-key", ["@masterkey=" + GOOD + "[master]\nloudness = -14\n"], "master.loudness: unknown key"),
    ("master-type", ["@mastertype=master = \"loud\"\n" + GOOD], "master: a [master] table, or false"),
    ("artist-type", ["@artist=artist = 3\n" + GOOD], "artist: must be printable text"),
    ("no-title", ["@notitle=[[tracks]]\ntitle = \"x\"\nlyrics = \"a\"\nstyle = \"s\"\n"], "title: required"),
    ("no-tracks", ["@notracks=title = \"A\"\n"], "tracks: required"),
    ("no-lyrics", ["@nolyrics=title = \"A\"\n[[tracks]]\ntitle = \"x\"\nstyle = \"s\"\n"], "lyrics: required"),
    ("lyrics-missing", ["@lmiss=" + GOOD.replace("lyrics.txt", "gone.txt")], 'track 1 "One": lyrics_file: file not'),
    ("lyrics-dir", ["@ldir=" + GOOD.replace("lyrics.txt", "adir")], "lyrics_file: {w}/adir is a directory"),
    ("lyrics-pipe", ["@lpipe=" + GOOD.replace("lyrics.txt", "pipe")], "lyrics_file: {w}/pipe is not a regular"),
    ("lyrics-huge", ["@lhuge=" + GOOD.replace("lyrics.txt", "huge.txt")], "at most 1,048,576"),
    ("lyrics-latin1", ["@llat=" + GOOD.replace("lyrics.txt", "latin1.txt")], "lyrics_file: not a UTF-8"),
    ("lyrics-empty", ["@lempty=" + GOOD.replace("lyrics.txt", "empty.txt")], "lyrics: empty"),
    ("lyrics-outside", ["@lout=" + GOOD.replace("lyrics.txt", "../../../etc/passwd")],
     "lyrics_file: ../../../etc/passwd lies outside the album's folder"),
    ("abc-outside", ["@aout=" + track('abc_file = "/etc/hostname"\n')], "abc_file: /etc/hostname lies outside"),
    ("seed-string", ["@seeds=" + track('seed = "42"\n')], "seed: must be int, got str"),
    ("abc-broken", ["@abcb=" + track('abc_file = "broken.abc"\n')],
     'track 1 "One": abc_file: the ABC score is broken: line 6: a chord symbol opened with " is not closed'),
    ("abc-no-key", ["@abck=" + track('abc = "X:1\\nL:1/8\\nCDEF|"\n')],
     "abc: the ABC score is broken: line 3: music before the K: (key) field"),
    ("plans-zero", ["@plans0=" + track("plans = 0\n")], "plans: must be in [1, 16], got 0"),
    ("choose-unknown", ["@choosex=" + track('plans = 2\nchoose = "best"\n')], "choose: must be one of first, length"),
    ("choose-length-no-target", ["@chooselen=" + track('plans = 2\nchoose = "length"\n')],
     'target_seconds: required by choose = "length"'),
    ("seed-string-defaults", ["@seedd=" + track("", 'title = "B"\n[defaults]\nstyle = "p"\nseed = "42"\n')],
     "defaults: seed: must be int"),
    ("seed-negative", ["@seedn=" + track("seed = -1\n")], "seed: must be in [0, 2**63)"),
    ("cot-bad", ["@cot=" + track('cot = "loud"\n')], "cot: must be one of full, melody, off"),
    ("guidance-string", ["@guid=" + track('guidance = "high"\n')], "guidance: must be float"),
    ("max-semantic-zero", ["@msz=" + track("max_semantic_tokens = 0\n")], "max_semantic_tokens: must be >= 1"),
    ("sampling-unknown", ["@samu=" + track("[tracks.sampling.plan]\ntemprature = 1.0\n")],
     "sampling.plan.temprature: unknown key"),
    ("sampling-type", ["@samt=" + track('[tracks.sampling.plan]\ntemperature = "hot"\n')],
     "sampling.plan.temperature: must be float"),
    ("top-k-zero", ["@tk0=" + track("[tracks.sampling.plan]\ntop_k = 0\n")], "top_k must be >= 1"),
    ("top-k-over-fast", ["@tkbig=" + track("[tracks.sampling.semantic]\ntop_k = 500\n")], "top_k must be <= 256"),
    ("window-over-fast", ["@win=" + track("[tracks.sampling.semantic]\npenalty_window = 400\n")],
     "penalty_window must be <= 256"),
    ("abc-npy-missing", ["@abcm=" + track('abc_file = "gone.npy"\n')], "abc_file: cannot read"),
    ("abc-npy-2d", ["@abc2=" + track('abc_file = "plan2d.npy"\n')], "non-empty 1-D integer array"),
    ("abc-with-cot-off", ["@abco=" + track('abc = "X:1"\ncot = "off"\n')], "a given score needs cot full"),
    ("duplicate-titles", ["@dup=" + track('[[tracks]]\ntitle = "one"\nlyrics = "b"\n')], "titles must be unique"),
    ("title-control", ["@ctl=" + track('[[tracks]]\ntitle = "a\\u0007b"\nlyrics = "b"\n')], "must be printable"),
    ("prompt-over-context", ["@long=" + track("", 'title = "L"\n[defaults]\nstyle = "' + "s" * 600 + '"\n')],
     "exceeds the model context"),
    ("album-model-missing", ["@amod=model = \"/nonexistent\"\n" + GOOD], "amod.toml: model /nonexistent"),
    ("model-missing", ["{w}/good.toml", "--model", "/nonexistent"], "--model /nonexistent: not 'tiny'"),
    ("model-dir-without-vae", ["{w}/good.toml", "--model", "{w}/ckpt-missing/model"], "without a VAE"),
    ("ckpt-missing-tensor", ["{w}/good.toml", "--model", "{w}/ckpt-missing"],
     "missing tensor 'model.layers.1.mlp.down_proj.weight'"),
    ("ckpt-misshaped", ["{w}/good.toml", "--model", "{w}/ckpt-misshaped"],
     "tensor 'model.layers.1.mlp.down_proj.weight' has shape"),
    ("ckpt-truncated", ["{w}/good.toml", "--model", "{w}/ckpt-truncated"], "not a readable safetensors file"),
    ("ckpt-config-typo", ["{w}/good.toml", "--model", "{w}/ckpt-typo"],
     "ckpt-typo/model/config.json: unknown key 'num_hiden_layers' (did you mean 'num_hidden_layers'?)"),
    ("vae-truncated", ["{w}/good.toml", "--model", "{w}/ckpt-vaecut"], "vae/model.safetensors: not a readable"),
    ("out-is-file", ["{w}/good.toml", "--out", "{w}/file.out"], "--out {w}/file.out: is a file"),
    ("out-unknown-protocol", ["{w}/good.toml", "--out", "foo://bucket/x"], "--out foo://bucket/x:"),
    ("out-memory", ["{w}/good.toml", "--out", "memory://x"], "--out memory://x: fsspec's memory"),
    ("out-unwritable", ["{w}/good.toml", "--out", "/proc/farm-out"], "--out /proc/farm-out: cannot write"),
    ("out-foreign-folder", ["{w}/good.toml", "--out", "{w}/full"], "holds files that are not this album's"),
    ("threads-zero", ["{w}/good.toml", "--threads", "0"], "--threads"),
    ("profile-missing", ["{w}/good.toml", "--cluster", "{w}/nope-profile.toml"], "nope-profile.toml: cannot read"),
    ("profile-broken", ["{w}/good.toml", "--cluster", "{w}/broken.toml"], "broken.toml: not valid TOML"),
    ("profile-unknown-gpu", ["{w}/good.toml", "--cluster", "{w}/profile.toml"], "unknown GPU model 'Voodoo 3'"),
    ("pin-syntax", ["{w}/good.toml", "--pin", "plan"], "--pin plan: expected STAGE=CARD"),
    ("pin-stage", ["{w}/good.toml", "--pin", "mix=0"], "--pin mix=0: expected STAGE=CARD"),
    ("port-invalid", ["{w}/good.toml", "--dashboard", "--port", "70000"], "--port 70000"),
    ("port-busy", ["{w}/good.toml", "--dashboard", "--port", str(HELD.getsockname()[1])], "cannot serve"),
    ("address-refused", ["{w}/good.toml", "--address", "127.0.0.1:1"], "--address 127.0.0.1:1: no Ray cluster"),
    ("address-garbage", ["{w}/good.toml", "--address", "nowhere"], "--address nowhere: expected auto"),
]

SONG = [
    ("song-lyrics-missing", ["--lyrics-file", "{w}/gone.txt"], "--lyrics-file: file not found"),
    ("song-lyrics-dir", ["--lyrics-file", "{w}/adir"], "--lyrics-file: {w}/adir is a directory"),
    ("song-lyrics-pipe", ["--lyrics-file", "{w}/pipe"], "is not a regular file"),
    ("song-lyrics-empty", ["--lyrics-file", "{w}/empty.txt"], "--lyrics-file {w}/empty.txt: empty"),
    ("song-lyrics-latin1", ["--lyrics-file", "{w}/latin1.txt"], "--lyrics-file: not a UTF-8"),
    ("song-abc-dir", ["--abc-file", "{w}/adir"], "--abc-file: {w}/adir is a directory"),
    ("song-abc-2d", ["--abc-file", "{w}/plan2d.npy"], "--abc-file {w}/plan2d.npy: expected a 1-D"),
    ("song-abc-broken", ["--abc-file", "{w}/broken.abc"],
     "--abc-file {w}/broken.abc: the ABC score is broken: line 6: a chord symbol"),
    ("song-device-tpu", ["--device", "tpu"], "--device tpu: expected auto, cpu"),
    ("song-device-cuda", ["--device", "cuda:7"], "--device cuda:7"),
    ("song-cot", ["--cot", "loud"], "Invalid value for '--cot': 'loud' is not one of 'full', 'melody', 'off'"),
    ("song-out-memory", ["--out", "memory://x"], "--out memory://x"),
    ("song-out-file-force", ["--out", "{w}/file.out", "--force"], "--out {w}/file.out: is a file"),
    ("song-out-not-empty", ["--out", "{w}/full"], "is not empty; pass --force"),
    ("song-out-unwritable", ["--out", "/proc/farm-song"], "cannot write"),
    ("song-model-missing", ["--model", "/nonexistent"], "--model /nonexistent"),
    ("song-ckpt-truncated", ["--model", "{w}/ckpt-truncated"], "not a readable safetensors file"),
    ("song-max-semantic-zero", ["--max-semantic-tokens", "0"], "Invalid value for '--max-semantic-tokens'"),
    ("song-max-semantic-context", ["--max-semantic-tokens", "100000"],
     "--max-semantic-tokens 100000: semantic: prompt of"),
    ("song-seed-negative", ["--seed", "-5"], "Invalid value for '--seed'"),
    ("song-kv-cache", ["--kv-cache", "fp4"], "Invalid value for '--kv-cache': 'fp4' is not one of 'bf16', 'fp8'"),
    ("song-ar-checkpoint-missing", ["--ar-checkpoint", "{w}/nope"], "--ar-checkpoint {w}/nope: not a directory"),
    ("song-ar-checkpoint-not-one", ["--ar-checkpoint", "{w}/adir"], "{w}/adir/config.json: missing"),
    ("song-ar-checkpoint-wrong-shape", ["--ar-checkpoint", "{w}/ar-wide"],
     "{w}/ar-wide/config.json: hidden_size is 128, the MoT checkpoint has 64"),
]

OTHERS = [
    ("plan-profile-missing", ["plan", "--cluster", "{w}/nope-profile.toml"], "cannot read"),
    ("plan-profile-unknown-gpu", ["plan", "--cluster", "{w}/profile.toml"], "unknown GPU model"),
    ("plan-album-missing", ["plan", "--album", "{w}/nope.toml", "--cluster", "configs/clusters/home-lab.toml"],
     "no such album spec"),
    ("plan-output", ["plan", "--cluster", "configs/clusters/h200.toml", "--output", "yaml"],
     "Invalid value for '--output': 'yaml' is not one of 'table', 'json'"),
    ("simulate-tracks-negative", ["simulate", "--tracks", "-3"], "--tracks"),
    ("simulate-tracks-zero", ["simulate", "--tracks", "0"], "--tracks"),
    ("simulate-mean-seconds", ["simulate", "--tracks", "2", "--mean-seconds", "-5"],
     "Invalid value for '--mean-seconds'"),
    ("plan-mean-seconds", ["plan", "--tracks", "2", "--mean-seconds", "400"], "Invalid value for '--mean-seconds'"),
    ("simulate-profile-broken", ["simulate", "--cluster", "{w}/broken.toml", "--tracks", "2"], "not valid TOML"),
    ("inventory-profile-broken", ["inventory", "--cluster", "{w}/broken.toml"], "not valid TOML"),
    ("init-checkpoint-config", ["init-checkpoint", "{out}", "--config", "huge"], "huge"),
    ("report-no-album", ["report", "{w}/adir"], "adir"),
    ("quantize-format", ["quantize", "{out}", "--format", "int4"], "'--format': 'int4' is not one of 'fp8', 'nvfp4'"),
    ("bench-format", ["bench", "song", "--format", "int4"], "'--ar-format': 'int4' is not one of 'bf16', 'fp8', 'nvfp4'"),
    ("quantize-out-unwritable", ["quantize", "/proc/farm-q"], "Invalid value for 'out': /proc/farm-q: cannot write"),
    ("quantize-out-file", ["quantize", "{w}/lyrics.txt"], "{w}/lyrics.txt is a file, not a folder"),
    ("init-checkpoint-unwritable", ["init-checkpoint", "/proc/farm-ck"], "/proc/farm-ck: cannot write in /proc"),
    ("quantize-model-missing", ["quantize", "{out}", "--model", "/nonexistent"], "--model /nonexistent"),
    ("quantize-out-exists", ["quantize", "{w}/ar-fp8"], "{w}/ar-fp8 already exists"),
    ("dashboard-no-album", ["dashboard", "{w}/adir"], "adir"),
    ("dashboard-port-invalid", ["dashboard", "{w}/live-album", "--port", "70000"], "--port 70000: must be 0…65535"),
    ("dashboard-port-busy", ["dashboard", "{w}/live-album", "--port", str(HELD.getsockname()[1])], "cannot serve"),
    ("bench-ar-rows-zero", ["bench", "ar", "--rows", "1", "--rows", "0"], "--rows: each value must be 1…32"),
    ("bench-ar-rows-beyond-slots", ["bench", "ar", "--rows", "40"], "--rows: each value must be 1…32"),
    ("bench-ar-blocks", ["bench", "ar", "--blocks", "0"], "Invalid value for '--blocks'"),
    ("bench-ar-numerics", ["bench", "ar", "--numerics-tokens", "1"], "Invalid value for '--numerics-tokens'"),
    ("bench-song-plan", ["bench", "song", "--plan-tokens", "0"], "Invalid value for '--plan-tokens'"),
    ("bench-song-repeats", ["bench", "song", "--repeats", "0"], "Invalid value for '--repeats'"),
    ("bench-acoustic-evals", ["bench", "acoustic", "--evals", "0"], "Invalid value for '--evals'"),
    ("bench-acoustic-frames", ["bench", "acoustic", "--frames", "-5"], "Invalid value for '--frames'"),
    ("bench-quality-semantic", ["bench", "quality", "--semantic-tokens", "0"],
     "Invalid value for '--semantic-tokens'"),
    ("bench-album-tracks", ["bench", "album", "--tracks", "0"], "Invalid value for '--tracks'"),
    ("bench-album-context", ["bench", "album", "--tracks", "2", "--no-sequential"],
     "--plan-tokens 4540 / --semantic-tokens 5371: plan: prompt of"),
    ("bench-json-unwritable", ["bench", "ar", "--json", "/proc/farm-report.json"],
     "Invalid value for '--json': /proc/farm-report.json: cannot write in /proc"),
    ("bench-json-folder", ["bench", "song", "--json", "{w}/adir"], "Invalid value for '--json': {w}/adir is a folder"),
    ("bench-summary-no-folder", ["bench", "acoustic", "--summary", "{w}/nope/summary.json"],
     "Invalid value for '--summary': {w}/nope/summary.json: cannot write in {w}/nope"),
    ("bench-gantt-unwritable", ["bench", "album", "--gantt", "/proc/gantt.png"], "Invalid value for '--gantt'"),
    ("bench-calibrate-unwritable", ["bench", "song", "--calibrate", "/proc/c.toml"], "Invalid value for '--calibrate'"),
    ("calibrate-out-unwritable", ["calibrate", "{w}/lyrics.txt", "--out", "/proc/c.toml"], "Invalid value for '--out'"),
    ("bench-song-context", ["bench", "song"], "--plan-tokens 4540 / --semantic-tokens 5371: plan: prompt of"),
    ("bench-quality-context", ["bench", "quality", "--plan-tokens", "100", "--semantic-tokens", "300"],
     "--plan-tokens 100 / --semantic-tokens 300: semantic: prompt of"),
    ("model-check-song-report", ["bench", "model-check", str(MEASURED / "2026-12-05-h200-s48-bench-song-fa4.json")],
     "not a `farm bench album --json` report (no tracks, plan_tokens"),
    ("calibrate-summary", ["calibrate", str(MEASURED / "summary.json")],
     "summary.json: not a `farm bench song --json` report (no environment, rows)"),
    ("bench-album-semantic", ["bench", "album", "--semantic-tokens", "0"], "Invalid value for '--semantic-tokens'"),
]


def run(argv, world: Path, out: Path):
    args = []
    for a in argv:
        if a.startswith("@"):
            name, _, text = a[1:].partition("=")
            a = album(world, name, text)
        args.append(a.replace("{w}", str(world)).replace("{out}", str(out)))
    return CliRunner().invoke(app, args)


def check(result, expected: str, world: Path, out: Path) -> None:
    text = result.output
    assert result.exit_code == 2, (result.exit_code, text, result.exception)
    assert "Traceback" not in text and isinstance(result.exception, SystemExit), text
    assert expected.replace("{w}", str(world)) in text, text
    assert not out.exists(), f"{out} was written"


@pytest.mark.parametrize("case, argv, expected", RENDER, ids=[c[0] for c in RENDER])
def test_render_refuses_bad_input_before_any_work(world, no_work, tmp_path, case, argv, expected):
    (world / "good.toml").write_text(GOOD)
    out = tmp_path / "out"
    if "--out" not in argv:
        argv = [*argv, "--out", str(out)]
    check(run(["render", *argv], world, out), expected, world, out)


@pytest.mark.parametrize("case, argv, expected", SONG, ids=[c[0] for c in SONG])
def test_song_refuses_bad_input_before_any_work(world, no_work, tmp_path, case, argv, expected):
    out = tmp_path / "song"
    base = {"--style": "pop", "--lyrics-file": str(world / "lyrics.txt"), "--out": str(out)}
    given = dict(zip(argv[::2], argv[1::2]))
    flags = [a for a in argv if a == "--force"]
    pairs = {**base, **{k: v for k, v in given.items() if k != "--force"}}
    args = ["song", *[x for kv in pairs.items() for x in kv], *flags]
    check(run(args, world, out), expected, world, out)


@pytest.mark.parametrize("case, argv, expected", OTHERS, ids=[c[0] for c in OTHERS])
def test_other_commands_refuse_bad_input(world, no_work, tmp_path, case, argv, expected):
    out = tmp_path / "elsewhere"
    check(run(argv, world, out), expected, world, out)


@pytest.mark.parametrize("argv, expected", [
    (["song", "--lyrics-file", "lyrics.txt"], "song: Missing option '--style'."),
    (["render", "album.toml", "--bogus"], "render: No such option: --bogus"),
    (["simulate", "--tracks", "many"], "simulate: Invalid value for '--tracks'"),
    (["bench", "ar", "--rows", "1,x"], "bench ar: "),
    (["mix"], "No such command 'mix'."),
], ids=["missing-option", "unknown-option", "bad-value", "bad-value-nested", "unknown-command"])
def test_a_command_line_mistake_is_one_line_and_exit_2(argv, expected):
    """What the parser refuses (before any command runs) ends like every user error: one line, naming the flag."""
    result = CliRunner().invoke(app, argv)
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert expected in lines[0] and lines[0].endswith("-h)") and not result.stdout, lines[0]


def test_the_table_is_wide():
    assert len(RENDER) + len(SONG) + len(OTHERS) >= 60


def test_a_second_render_into_a_busy_folder_is_refused(world, no_work, tmp_path):
    """The folder's lock names the render holding it (another host here, so it cannot be judged dead)."""
    import json

    out = tmp_path / "busy"
    out.mkdir()
    (out / ".farm-render.lock").write_text(json.dumps({"host": "studio-7", "pid": 4242, "started": 0}))
    (world / "good.toml").write_text(GOOD)
    result = run(["render", "{w}/good.toml", "--out", str(out)], world, out)
    assert result.exit_code == 2 and "is being rendered by pid 4242 on studio-7" in result.output, result.output
    assert sorted(p.name for p in out.iterdir()) == [".farm-render.lock"]


def test_a_store_that_never_answers_is_refused_within_the_preflight_deadline(world, no_work, tmp_path,
                                                                            monkeypatch):
    """An S3 endpoint that takes the connection and then says nothing (a black hole): refused in one line once the
    write check's deadline passes, not after botocore's minutes of retries."""
    import time

    import farm.store

    hole = busy_port()                      # the kernel completes the handshake; nobody ever answers
    host, port = hole.getsockname()
    for key, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
                       "AWS_ENDPOINT_URL": f"http://{host}:{port}"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(farm.store, "PREFLIGHT_TIMEOUT_S", 2.0)
    (world / "good.toml").write_text(GOOD)
    started = time.monotonic()
    result = run(["render", "{w}/good.toml", "--out", "s3://albums/x"], world, tmp_path / "none")
    assert result.exit_code == 2, result.output
    assert "--out s3://albums/x: no answer from the store within 2 s" in result.output, result.output
    assert time.monotonic() - started < 30
    hole.close()


def test_an_address_is_checked_to_be_a_ray_clusters_gcs(ray_cluster, monkeypatch):
    """The session's real cluster passes; an HTTP server (say Ray's dashboard port, a real user's slip) and a port
    that takes connections and never answers are refused at once, where Ray would keep trying for minutes."""
    import http.server
    import threading

    import farm.raycluster
    from farm.errors import UserError

    farm.raycluster.check_address(ray_cluster.address)
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UserError, match="something answers there, but not a Ray cluster's GCS"):
            farm.raycluster.check_address(f"127.0.0.1:{web.server_address[1]}")
    finally:
        web.shutdown()
    monkeypatch.setattr(farm.raycluster, "ADDRESS_TIMEOUT_S", 1.0)
    with pytest.raises(UserError, match="the port takes connections but nothing answered within 1 s"):
        farm.raycluster.check_address(f"127.0.0.1:{HELD.getsockname()[1]}")


def test_an_address_that_answers_but_is_no_ray_cluster_is_a_user_error(monkeypatch):
    """Something listens at --address (a proxy, another service), so the port check passes, and Ray's connect then
    fails: that is the user's address, not a bug (seen on 2026-12-07 with a proxy's HTTP/2 404). Ray's own failure
    is stood in for here: a real one needs a server that answers gRPC with an error."""
    import ray

    import farm.raycluster
    from farm.errors import UserError

    def refuse(**kwargs):
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.9:6379")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refuse)
    with pytest.raises(UserError, match="^--address 10.0.0.9:6379: Failed to connect to Ray cluster"):
        farm.raycluster.start("10.0.0.9:6379", None)


def test_a_bug_is_one_line_pointing_at_its_traceback_in_a_log(tmp_path):
    """Not a user's mistake: exit 1, one line on the terminal naming the error and the log file, which holds the
    whole traceback and the command line."""
    import subprocess
    import sys

    code = ("import farm.cli as cli\n"
            "def broken():\n    raise RuntimeError('kaboom in the driver')\n"
            "cli.app = broken\ncli.main()\n")
    run = subprocess.run([sys.executable, "-c", code, "render", "x.toml"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1],
                         env={**os.environ, "FARM_LOG_DIR": str(tmp_path / "logs")}, timeout=120)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert "internal error (RuntimeError: kaboom in the driver)" in line and "please report it" in line
    (log,) = (tmp_path / "logs").iterdir()
    assert str(log) in line
    text = log.read_text()
    assert "Traceback" in text and "kaboom in the driver" in text and "render x.toml" in text
