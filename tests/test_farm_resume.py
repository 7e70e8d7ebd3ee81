"""The farm on a real local Ray cluster: a stopped driver resumes without redoing finished stages, and workers run
on the cards the planner chose (virtual profiles)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from farm.driver import RenderOptions, render_album

from .conftest import PROFILES, ROOT
from .farm_album import ALBUM, FILES

pytestmark = pytest.mark.slow     # full renders on the session's Ray cluster


BIG_TRACKS = "".join(f'[[tracks]]\ntitle = "Song {i}"\nlyrics = "[verse]\\nline {i}\\n"\n' for i in range(1, 7))


@pytest.fixture(scope="module")
def big_album(ray_cluster, tiny_ckpt_dir, tmp_path_factory):
    """A six-track album and its unbroken render."""
    root = tmp_path_factory.mktemp("big")
    big = root / "big.toml"
    big.write_text(ALBUM.split("[[tracks]]")[0] + BIG_TRACKS)
    unbroken = root / "unbroken"
    render_album(big, RenderOptions(out=str(unbroken), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                    progress=False))
    return big, unbroken


@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -9), (signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["kill", "ctrl-c", "sigterm"])
def test_stopped_driver_resumes_without_redoing_finished_stages(ray_cluster, tiny_ckpt_dir, big_album, tmp_path,
                                                                sig, code):
    """Stop `farm render` mid-album, rerun: no finished stage runs again, files equal an unbroken run. Ctrl-C and
    SIGTERM stop cleanly: exit 130/143, a message that the same command resumes, live.json says `stopped`."""
    big, unbroken = big_album
    out = tmp_path / "stopped"
    cmd = [sys.executable, "-m", "farm", "render", str(big), "--out", str(out), "--model", str(tiny_ckpt_dir),
           "--address", ray_cluster.address, "--cluster", str(PROFILES / "ci.toml")]
    # A shell starts background jobs with SIGINT ignored, and Python then installs no Ctrl-C handler: give the
    # render the terminal's default whatever launched pytest (a script with `&` would otherwise make it deaf).
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline and not list(out.glob("*/.stages/acoustic.json")):
        time.sleep(0.02)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr[-2000:]
    if sig != signal.SIGKILL:
        assert "run the same command again to resume" in stderr and "Traceback" not in stderr
        assert json.loads((out / "live.json").read_text())["state"] == "stopped"
    before = {(m.parent.parent.name, m.stem) for m in out.glob("*/.stages/*.json")}
    assert before and len(before) < 6 * 4, "the driver was stopped with work left"
    result = render_album(big, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                             progress=False))
    assert not result.failures
    redone = {(e["track"], e["stage"]) for e in pq.read_table(out / "metrics.parquet").to_pylist()
              if e["run_id"] == result.run_id}
    assert redone and not (redone & before)
    for track in sorted(p.name for p in unbroken.iterdir() if p.is_dir() and p.name[0].isdigit()):
        for name in FILES:
            assert (out / track / name).read_bytes() == (unbroken / track / name).read_bytes(), (track, name)


def _placed(result) -> dict[str, tuple[str, str]]:
    """stage → (card name, card resource) as the workers themselves reported them."""
    out = {}
    for slot, where in result.workers.items():
        cards = [k for k in where["resources"] if k.startswith("farm_gpu_")]
        out.setdefault(slot.split("@")[0], set()).add((where["gpu"], cards[0] if cards else ""))
    return out


def _planned(plan) -> dict[str, set[tuple[str, str]]]:
    return {s: {(w.model, f"farm_gpu_{w.uuid}") for w in plan.workers_for(s)} for s in
            ("plan", "semantic", "acoustic", "decode")}


def test_heterogeneous_nodes_get_the_stages_the_planner_chose(ray_cluster, tiny_ckpt_dir, tmp_path):
    """Home lab (3050 Laptop, 4090, RTX PRO 6000 on three nodes), 24 tracks: each worker runs on exactly the card
    the plan chose, Ray-assigned by that card's own resource; the 3050 can host decode alone (nothing else fits in
    its 4 GiB; with AR running beside acoustic on the big cards the planner may leave it idle), acoustic and plan
    go to the PRO 6000 (most compute, most bandwidth)."""
    path = tmp_path / "lab.toml"
    tracks = "".join(f'[[tracks]]\ntitle = "Song {i}"\nlyrics = "la {i}"\n' for i in range(1, 25))
    path.write_text(ALBUM.split("[[tracks]]")[0].replace("max_tokens = 40", "max_tokens = 12") + tracks)
    result = render_album(path, RenderOptions(out=str(tmp_path / "lab"), model=str(tiny_ckpt_dir),
                                              cluster=PROFILES / "lab.toml", progress=False))
    assert not result.failures
    plan, planned = result.plan, _planned(result.plan)
    assert _placed(result) == planned
    assert {w.stage for w in plan.workers if w.model == "RTX 3050 Laptop"} <= {"decode"}
    assert ("RTX PRO 6000 Blackwell", "farm_gpu_VIRT-lab-workstation-0") in planned["acoustic"]
    assert ("RTX PRO 6000 Blackwell", "farm_gpu_VIRT-lab-workstation-0") in planned["plan"]
    events = pq.read_table(tmp_path / "lab" / "metrics.parquet").to_pylist()
    for e in events:   # every call ran on a card planned for its stage
        assert (e["gpu"], f"farm_gpu_{e['gpu_uuid']}") in planned[e["stage"]], e
    assert {e["stage"] for e in events if e["gpu"] == "RTX 3050 Laptop"} <= {"decode"}


def test_one_node_with_two_card_models_is_placed_card_by_card(ray_cluster, album, tiny_ckpt_dir, tmp_path):
    """A 4090 and a 3050 Laptop in one host: each worker runs on its own card model. (Pinned: with AR running beside
    acoustic on the 4090, the planner may keep decode there too and leave the 3050 idle.)"""
    pins = ("plan=mixed-desk/0", "semantic=mixed-desk/0", "acoustic=mixed-desk/0", "decode=mixed-desk/1")
    result = render_album(album, RenderOptions(out=str(tmp_path / "mixed"), model=str(tiny_ckpt_dir),
                                               cluster=PROFILES / "mixed.toml", progress=False, pins=pins))
    assert not result.failures
    placed = _placed(result)
    assert placed == _planned(result.plan)
    assert ("RTX 3050 Laptop", "farm_gpu_VIRT-mixed-desk-1") in placed["decode"]
    assert placed["acoustic"] == placed["plan"] == {("RTX 4090", "farm_gpu_VIRT-mixed-desk-0")}
    reports = {w["gpu"]: w for w in result.workers.values()}
    assert reports["RTX 3050 Laptop"]["engines"] == ["decode"]
    # the mixed host runs one Ray node per GPU model, both labelled as that host
    import ray

    labels = {n["NodeID"]: n.get("Labels", {}) for n in ray.nodes()}
    small, big = (labels[reports[g]["node_id"]] for g in ("RTX 3050 Laptop", "RTX 4090"))
    assert small["farm-node"] == big["farm-node"] == "mixed-desk" and small["gpu-model"] != big["gpu-model"]
