"""A plain `farm render` keeps Ray to itself: it starts its own cluster even when the machine's shared
ray_current_cluster file names another (here a dead one, as a killed render leaves behind), and that cluster asks
for a token — a client without it is refused, one with it gets in (checked against the running render)."""
from __future__ import annotations

import pytest

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .conftest import ROOT

pytestmark = pytest.mark.slow     # starts Ray clusters of its own

ALBUM = '''title = "Private"
model = "tiny"
[defaults]
style = "pop"
''' + "".join(f'[[tracks]]\ntitle = "Song {i}"\nlyrics = "[verse]\\nline {i}\\n"\n' for i in range(1, 41))

PROBE = "import ray; ray.init(address={addr!r}); print('joined', len(ray.nodes()))"


def probe(address: str, env: dict, patience: float = 12.0) -> str:
    """A client that tries to join the cluster; what it printed within `patience` seconds (Ray retries a refused
    client for minutes, so a refusal is read from its log lines rather than waited out)."""
    client = subprocess.Popen([sys.executable, "-c", PROBE.format(addr=address)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = client.communicate(timeout=patience)
    except subprocess.TimeoutExpired:
        client.kill()
        out, _ = client.communicate()
    return out


def test_local_render_owns_its_cluster_and_keeps_authentication_on(tmp_path, tiny_ckpt_dir):
    home = tmp_path / "home"
    home.mkdir()
    ray_tmp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))          # Ray's socket paths must stay short
    (ray_tmp / "ray_current_cluster").write_text("127.0.0.1:1")          # someone else's (dead) cluster
    spec = tmp_path / "album.toml"
    spec.write_text(ALBUM)
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}    # the product's own default
    env.update(HOME=str(home), RAY_TMPDIR=str(ray_tmp), PYTHONUNBUFFERED="1")
    render = subprocess.Popen([sys.executable, "-m", "farm", "render", str(spec), "--out", str(tmp_path / "out"),
                               "--model", str(tiny_ckpt_dir)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        while not seen or not (seen[-1].startswith("Ray: ") or seen[-1] == ""):
            seen.append(render.stdout.readline())
        line = seen[-1]
        assert line.startswith("Ray: local cluster at ") and "token authentication on" in line, "".join(seen)
        address = line.split(" at ")[1].split(",")[0]
        said = probe(address, {**env, "RAY_AUTH_MODE": "token"})                           # the render's token
        assert "joined 1" in said, said[-2000:]
        said = probe(address, {**env, "RAY_AUTH_MODE": "disabled", "HOME": str(tmp_path)})   # no token
        assert "joined" not in said and "InvalidAuthToken" in said, said[-2000:]
        rest, _ = render.communicate(timeout=300)
    finally:
        render.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert render.returncode == 0, rest[-3000:]
    assert "40/40 tracks done" in rest
    assert (home / ".ray" / "auth_token").stat().st_mode & 0o077 == 0


def test_profile_cluster_render_keeps_authentication_on(tmp_path, tiny_ckpt_dir):
    """The local multi-node cluster of a --cluster profile is started the `ray start` way, where Ray switches token
    authentication on only when a token exists: the farm makes sure one does."""
    home = tmp_path / "home"
    home.mkdir()
    spec = tmp_path / "album.toml"
    spec.write_text(ALBUM.split("[[tracks]]")[0] + '[[tracks]]\ntitle = "One"\nlyrics = "la"\n')
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env.update(HOME=str(home))
    done = subprocess.run([sys.executable, "-m", "farm", "render", str(spec), "--out", str(tmp_path / "out"),
                           "--model", str(tiny_ckpt_dir), "--cluster", str(ROOT / "configs/clusters/cpu.toml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "token authentication on" in done.stdout and "1/1 tracks done" in done.stdout


def test_storage_credentials_never_enter_a_runtime_env(monkeypatch):
    """Ray's state API lists each actor's runtime_env: the credentials go as a constructor argument whose repr
    names the variables only."""
    from farm.workers import CardRef, Secrets, WorkerSpec, actor_options

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    spec = WorkerSpec(("ar",), "m", "v", "s3://bucket/album", CardRef("n", "cpu", "", True, True), 1, 2)
    assert "runtime_env" not in actor_options(spec) and "s3cr3t" not in repr(actor_options(spec))
    secrets = Secrets.from_environment()
    assert secrets.values["AWS_SECRET_ACCESS_KEY"] == "s3cr3t-value"
    assert "AWS_SECRET_ACCESS_KEY" in repr(secrets) and "s3cr3t" not in repr(secrets)
