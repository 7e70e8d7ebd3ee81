"""Losing a node mid-album: a two-node local Ray cluster of its own (in a subprocess: a test session's process
is already connected to the session cluster); one node is removed once the album is under way. The album must finish on the survivor, byte-identical to an unbroken render (farm/recovery.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import PROFILES, ROOT

pytestmark = pytest.mark.slow     # a Ray cluster of its own, renders twice per layout

SCRIPT = textwrap.dedent("""
    import json, sys, threading, time
    from pathlib import Path
    import ray
    from ray.cluster_utils import Cluster
    from cluster.profiles import load_profile
    from farm.driver import RenderOptions, render_album
    from farm.raycluster import profile_devices, profile_nodes

    ckpt, profile_path, spec, root, layout = sys.argv[1:6]
    profile = load_profile(Path(profile_path))
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes = {}
    for args in profile_nodes(profile, profile_devices(profile)):
        nodes[args["labels"]["farm-node"]] = cluster.add_node(**args)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False)
    if layout == "both":          # every stage on both cards: the survivor's workers carry on
        pins = tuple(f"{s}={n}/0" for s in ("plan", "semantic", "acoustic", "decode") for n in ("pair-a", "pair-b"))
    else:                         # AR on pair-a only, acoustic and decode on pair-b only: those must move
        pins = ("plan=pair-a/0", "semantic=pair-a/0", "acoustic=pair-b/0", "decode=pair-b/0")
    opts = dict(model=ckpt, cluster=Path(profile_path), pins=pins, progress=False)
    unbroken = render_album(Path(spec), RenderOptions(out=f"{root}/unbroken", **opts))
    out = Path(f"{root}/broken")

    def remove_b():
        while not list(out.glob(f"*/.stages/{'plan' if layout == 'both' else 'acoustic'}.json")):
            time.sleep(0.02)
        cluster.remove_node(nodes["pair-b"], allow_graceful=False)

    threading.Thread(target=remove_b, daemon=True).start()
    started = time.time()
    broken = render_album(Path(spec), RenderOptions(out=str(out), **opts))
    done = {(e.track, e.stage) for e in broken.events if e.ok}
    print(json.dumps({"failures": broken.failures, "unbroken_failures": unbroken.failures,
                      "seconds": time.time() - started, "stages_done": len(done),
                      "acoustic_on": sorted({e.worker for e in broken.events if e.ok and e.stage == "acoustic"})}))
""")


@pytest.mark.parametrize("layout", ["both", "split"])
def test_an_album_finishes_on_the_surviving_node(tiny_ckpt_dir, tmp_path, layout):
    """both: every stage also runs on the surviving card. split: the lost card held the only acoustic and decode
    workers, so those stages move to the survivor (its worker restarts with their engines)."""
    from .farm_album import ALBUM, FILES

    spec = tmp_path / "album.toml"
    tracks = "".join(f'[[tracks]]\ntitle = "Lost {i}"\nlyrics = "[verse]\\nline {i}\\n"\n' for i in range(1, 7))
    spec.write_text(ALBUM.split("[[tracks]]")[0].replace("max_tokens = 40", "max_tokens = 200") + tracks)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_ckpt_dir), str(PROFILES / "pair.toml"), str(spec),
                          str(tmp_path), layout], env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["failures"] == {} and report["unbroken_failures"] == {}, report
    if layout == "split":          # acoustic ran on pair-b before the loss and on pair-a after it
        assert any("pair-a" in w for w in report["acoustic_on"]) and any("pair-b" in w for w in report["acoustic_on"])
    for track in sorted(p.name for p in (tmp_path / "unbroken").iterdir() if p.is_dir() and p.name[0].isdigit()):
        for name in FILES:
            assert (tmp_path / "broken" / track / name).read_bytes() == \
                (tmp_path / "unbroken" / track / name).read_bytes(), (track, name)
