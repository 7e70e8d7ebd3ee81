"""Faults during a render on the real local Ray cluster: a worker killed past its restarts, a frozen worker. The
album must complete with every file byte-identical to an unbroken render (farm/recovery.py)."""
from __future__ import annotations

import os
import signal
import time

import pytest

from farm.driver import RenderOptions, render_album

from .conftest import PROFILES
from .farm_album import ALBUM, FILES

pytestmark = pytest.mark.slow     # renders with killed and frozen workers


def _card_workers() -> set[int]:
    """PIDs of this machine's farm worker processes (Ray titles them `ray::CardWorker…`)."""
    pids = set()
    for proc in os.listdir("/proc"):
        if proc.isdigit():
            try:
                with open(f"/proc/{proc}/cmdline", "rb") as f:
                    if f.read().startswith(b"ray::CardWorker"):
                        pids.add(int(proc))
            except OSError:
                continue
    return pids


SLOW_TRACKS = "".join(f'[[tracks]]\ntitle = "Slow {i}"\nlyrics = "[verse]\\nline {i}\\n"\n' for i in range(1, 9))


@pytest.fixture(scope="module")
def slow_album(ray_cluster, tiny_ckpt_dir, tmp_path_factory):
    """Eight tracks with long semantic stages (a render of ~20 s on two cores), and their unbroken render."""
    root = tmp_path_factory.mktemp("slow")
    spec = root / "slow.toml"
    spec.write_text(ALBUM.split("[[tracks]]")[0].replace("max_tokens = 40", "max_tokens = 280") + SLOW_TRACKS)
    unbroken = root / "unbroken"
    render_album(spec, RenderOptions(out=str(unbroken), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                     progress=False))
    return spec, unbroken


def _same_files(out, unbroken) -> None:
    for track in sorted(p.name for p in unbroken.iterdir() if p.is_dir() and p.name[0].isdigit()):
        for name in FILES:
            assert (out / track / name).read_bytes() == (unbroken / track / name).read_bytes(), (track, name)


def _render_while(spec, out, tiny_ckpt_dir, act, **extra):
    """Render `spec` into `out` while `act(stop_event)` runs in a thread once the album is under way."""
    import threading

    done = threading.Event()

    def run():
        while not done.is_set() and not list(out.glob("*/.stages/plan.json")):
            time.sleep(0.02)
        act(done)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        return render_album(spec, RenderOptions(out=str(out), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                                                progress=False, **extra))
    finally:
        done.set()
        thread.join()


def test_a_worker_killed_three_times_is_replaced_and_the_album_is_byte_identical(tiny_ckpt_dir, slow_album,
                                                                                   tmp_path):
    """Ray restarts a killed worker twice; the third kill is past its restarts, and the driver starts a fresh
    worker and sends it the lost tracks. Nothing fails, and every file equals an unbroken render's."""
    spec, unbroken = slow_album
    seen, rounds = _card_workers(), []

    def kill_three_times(done):
        while not done.is_set() and len(rounds) < 3:
            fresh = _card_workers() - seen
            if fresh:
                time.sleep(1.0 if rounds else 0.0)   # a restarted worker: let it load and take work
                for pid in fresh:
                    os.kill(pid, signal.SIGKILL)
                seen.update(fresh)
                rounds.append(sorted(fresh))
            time.sleep(0.05)

    result = _render_while(spec, tmp_path / "killed", tiny_ckpt_dir, kill_three_times)
    assert len(rounds) == 3, f"only {len(rounds)} kill rounds: the album ended first"
    assert not result.failures, result.failures
    _same_files(tmp_path / "killed", unbroken)


def test_a_stuck_worker_is_stopped_by_the_watchdog_and_replaced(tiny_ckpt_dir, slow_album, tmp_path):
    """A worker frozen mid-album (SIGSTOP) answers no ping: after --stall-timeout it is killed, a fresh worker
    takes its tracks, and the album completes byte-identical."""
    spec, unbroken = slow_album
    before, frozen = _card_workers(), []

    def freeze(done):
        while not done.is_set() and not frozen:
            for pid in _card_workers() - before:
                os.kill(pid, signal.SIGSTOP)
                frozen.append(pid)
            time.sleep(0.05)

    started = time.time()
    result = _render_while(spec, tmp_path / "stuck", tiny_ckpt_dir, freeze, stall_seconds=3.0)
    assert frozen and not result.failures, result.failures
    assert not any(os.path.exists(f"/proc/{pid}") and open(f"/proc/{pid}/stat").read().split()[2] != "Z"
                   for pid in frozen), "the frozen worker was not stopped"
    assert time.time() - started < 120
    _same_files(tmp_path / "stuck", unbroken)
