"""A full disk under the album folder: a tmpfs of a few hundred KiB in a private mount namespace (`unshare`), mostly
taken by a filler file. The render must fail only the stages that found no room (their tracks, with the reason),
never crash; once the filler is gone, a rerun completes, byte-identical to an unbroken render. Skipped where
user or mount namespaces are not allowed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from .conftest import ROOT

pytestmark = pytest.mark.slow     # renders in a private mount namespace

SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from farm.driver import RenderOptions, render_album
    from farm.errors import UserError

    ckpt, spec, disk, unbroken = sys.argv[1:5]
    result = {}
    render_album(Path(spec), RenderOptions(out=unbroken, model=ckpt, progress=False))
    filler = Path(disk) / "filler"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    with open(filler, "wb") as f:                  # leave ~40 KiB: a plan fits, a track's audio does not
        f.write(b"\\0" * max(0, free - 40 * 1024))
    out = str(Path(disk) / "album")
    try:
        first = render_album(Path(spec), RenderOptions(out=out, model=ckpt, progress=False))
        result["first"] = {"failures": first.failures}
    except UserError as exc:       # the album's own files found no room either
        result["first"] = {"error": str(exc)}
    result["kept"] = sorted(str(p.relative_to(out)) for p in Path(out).glob("*/.stages/*.json"))
    filler.unlink()
    again = render_album(Path(spec), RenderOptions(out=out, model=ckpt, progress=False))
    result["again_failures"] = again.failures
    result["again_stages"] = sorted(f"{e.track}/{e.stage}" for e in again.events if e.ok)
    print(json.dumps(result))
""")


def test_a_full_disk_fails_only_what_found_no_room_and_a_rerun_completes(tiny_ckpt_dir, tmp_path):
    from .farm_album import ALBUM, FILES

    if shutil.which("unshare") is None or subprocess.run(
            ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {tmp_path}"],
            capture_output=True).returncode != 0:
        pytest.skip("no unprivileged mount namespace here (unshare -rm with a tmpfs mount was refused)")
    spec, disk = tmp_path / "album.toml", tmp_path / "disk"
    spec.write_text(ALBUM)
    disk.mkdir()
    unbroken, script = tmp_path / "unbroken", tmp_path / "render.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # 8 MiB: the whole album with its mastered copies and album.flac fits once the filler is gone
    command = (f"mount -t tmpfs -o size=8m tmpfs {disk} && {sys.executable} {script} {tiny_ckpt_dir} {spec} "
               f"{disk} {unbroken} && cp -r {disk}/album {tmp_path}/after")
    run = subprocess.run(["unshare", "-rm", "sh", "-c", command], env=env, capture_output=True, text=True,
                         timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    first = report["first"]
    assert "No space left on device" in first.get("error", "") + " ".join(first.get("failures", {}).values()), report
    assert report["kept"], "nothing that fitted was kept"
    assert report["again_failures"] == {}, report
    assert len(report["again_stages"]) < 11, "the rerun did everything again"     # 11 stages in ALBUM
    for track in sorted(p.name for p in unbroken.iterdir() if p.is_dir() and p.name[0].isdigit()):
        for name in FILES:
            assert (tmp_path / "after" / track / name).read_bytes() == (unbroken / track / name).read_bytes(), \
                (track, name)
