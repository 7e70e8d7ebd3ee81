"""Album specs: every problem reported at once, each naming the file, the track and the field; nothing rendered."""
from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from farm.album import AlbumError, load_album, slugify
from farm.cli import app


def write(tmp_path, body: str, name="album.toml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def problems(path) -> list[str]:
    with pytest.raises(AlbumError) as info:
        load_album(path)
    return info.value.problems


def test_demo_album_loads_with_readable_unique_folders():
    album = load_album("configs/albums/demo.toml")
    assert [t.folder for t in album.tracks] == ["01-paper-boats", "02-harbour-lights", "03-über-den-dächern",
                                               "04-night-bus"]
    assert [t.seed for t in album.tracks] == [831001, 831002, 831003, 831004]
    assert album.tracks[1].cot == "melody" and album.tracks[3].cot == "off"
    assert album.tracks[0].lyrics.startswith("[verse]\nPaper boats")
    assert slugify("東京の夜 / Tokyo Night!") == "東京の夜-tokyo-night"


def test_every_problem_is_reported_at_once(tmp_path):
    path = write(tmp_path, '''
        title = "Bad"
        colour = "red"
        [defaults]
        style = "pop"
        [[tracks]]
        title = "One"
        lyrics = "la"
        tempo = 120
        seed = "seven"
        [[tracks]]
        lyrics = "la"
        [[tracks]]
        title = "Three"
        lyrics = "   "
        [[tracks]]
        title = "Bell\\u0007Ringer"
        lyrics = "la"
        [[tracks]]
        title = "one"
        lyrics_file = "missing.txt"
        [[tracks]]
        title = "Six"
        cot = "loud"
        lyrics = "la"
        [sampling.semantic]
        temprature = 0.9
        ''')
    found = problems(path)
    expected = [
        f"{path}: unknown key 'colour'",
        f'{path}: track 1 "One": unknown key \'tempo\'',
        f'{path}: track 1 "One": seed: must be int, got str \'seven\'',
        f"{path}: track 2: title: required, a non-empty string",
        f'{path}: track 3 "Three": lyrics: empty',
        f'{path}: track 4 "Bell\x07Ringer": title: must be printable text',
        f'{path}: track 5 "one": lyrics_file: file not found: {tmp_path / "missing.txt"}',
        f'{path}: track 6 "Six": cot: must be one of full, melody, off, got \'loud\'',
    ]
    for line in expected:
        assert any(p.startswith(line) for p in found), (line, found)


def test_duplicate_titles_and_folder_collisions(tmp_path):
    path = write(tmp_path, '''
        title = "Dupes"
        [defaults]
        style = "pop"
        [[tracks]]
        title = "Rain"
        lyrics = "a"
        [[tracks]]
        title = "RAIN"
        lyrics = "b"
        ''')
    (line,) = problems(path)
    assert 'track 2 "RAIN": title: the same as track 1 "Rain"' in line


def test_any_printable_title_gets_a_safe_bounded_folder(tmp_path):
    """Titles are metadata: kept as written; folders are unique, bounded in bytes, never a path or a device."""
    titles = ["24/7", "AC/DC Tribute", "...Baby One More Time", "../../etc/passwd", "CON", "???", "!!!",
              "𐍈" * 200, "Rain", "rain!"]
    body = "".join(f'[[tracks]]\ntitle = {t!r}\nlyrics = "la"\n'.replace("'", '"') for t in titles)
    album = load_album(write(tmp_path, f'title = "Odd"\n[defaults]\nstyle = "pop"\n{body}'))
    assert [t.title for t in album.tracks] == titles
    folders = [t.folder for t in album.tracks]
    assert folders[:7] == ["01-24-7", "02-ac-dc-tribute", "03-baby-one-more-time", "04-etc-passwd", "05-con-",
                           "06-track", "07-track"]
    assert len(set(folders)) == len(folders)
    assert all(len(f.encode()) <= 84 and "/" not in f and not f.startswith(".") for f in folders)
    assert len(folders[7].encode()) > 60


@pytest.mark.parametrize("body, message", [
    ('[[tracks]]\ntitle = "x"\nlyrics = "a"\n', "title: required"),
    ('title = "A"\n', "tracks: required"),
    ('title = "A"\n[[tracks]]\ntitle = "x"\nlyrics = "a"\n', 'track 1 "x": style: required'),
    ('title = "A"\n[[tracks]]\ntitle = "x"\nstyle = 3\nlyrics = "a"\n', "style: must be str, got int 3"),
    ('title = "A"\n[[tracks]]\ntitle = "x"\nstyle = "s"\nlyrics = "a"\nlyrics_file = "b"\n', "not both"),
    ('title = "A"\n[[tracks]]\ntitle = "x"\nstyle = "s"\nlyrics = "a"\ncot = "off"\nabc = "X:1"\n',
     "a given score needs cot full or melody"),
    ('title = "A"\n[[tracks]]\ntitle = "x"\nstyle = "s"\nlyrics = "a"\n[tracks.sampling.plan]\ntop_k = 2.5\n',
     "sampling.plan.top_k: must be int"),
    ("title = 'A'\n[[tracks]\n", "not valid TOML"),
    ('title = "A"\n[[tracks]]\ntitle = "x"\nstyle = "s"\nlyrics = "a"\ndecode_precision = "bf16"\n',
     "decode_precision: must be one of fp32, tf32, tf32x3, got 'bf16'"),
])
def test_single_problems_are_named(tmp_path, body, message):
    found = problems(write(tmp_path, body))
    assert any(message in p for p in found), found


def test_cli_reports_problems_and_prompt_over_context_and_renders_nothing(tmp_path, tiny_ckpt_dir):
    path = write(tmp_path, f'''
        title = "Too Long"
        [[tracks]]
        title = "Fine"
        style = "pop"
        lyrics = "short"
        [[tracks]]
        title = "Epic"
        style = "pop"
        lyrics = """{"la " * 200}"""
        ''')
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["render", str(path), "--model", str(tiny_ckpt_dir), "--out", str(out)])
    assert r.exit_code == 2
    assert f'{path}: track 2 "Epic": plan: prompt of' in r.stderr and "exceeds the model context of 512" in r.stderr
    assert not out.exists()
    missing = CliRunner().invoke(app, ["render", str(tmp_path / "nope.toml"), "--out", str(out)])
    assert missing.exit_code == 2 and "no such album spec" in missing.stderr
