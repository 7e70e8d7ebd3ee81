"""Metrics, aggregates, the album report, the live page in headless Chromium, and the Prometheus export."""
from __future__ import annotations

import html.parser
import shutil
import struct
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from farm import aggregate
from farm.driver import RenderOptions, render_album
from farm.eventlog import SCHEMA

from .conftest import PROFILES, free_port

pytestmark = pytest.mark.slow     # a render and a real browser

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def album_text(tracks: int, semantic: int) -> str:
    body = "".join(f'[[tracks]]\ntitle = "Track {i}"\nlyrics = "la la {i}"\n' for i in range(1, tracks + 1))
    return (f'title = "Dash"\n[defaults]\nstyle = "lo-fi"\nseed = 5\n'
            f"[defaults.sampling.semantic]\nmin_tokens = {semantic}\nmax_tokens = {semantic}\n" + body)


@pytest.fixture(scope="module")
def rendered(ray_cluster, tiny_ckpt_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("dash")
    (root / "album.toml").write_text(album_text(4, 40))
    result = render_album(root / "album.toml", RenderOptions(out=str(root / "out"), model=str(tiny_ckpt_dir),
                                                             cluster=PROFILES / "ci.toml", progress=False))
    return root / "out", result


def test_metrics_schema_and_aggregates_match_the_raw_events(rendered):
    out, result = rendered
    table = pq.read_table(out / "metrics.parquet")
    assert table.schema.equals(SCHEMA)
    rows = table.to_pylist()
    assert len(rows) == len(result.events) == 16 and all(r["queue_wait"] >= 0 for r in rows)
    stats = aggregate.album_stats(rows)
    for s in stats["stages"]:
        mine = [r for r in rows if r["stage"] == s["stage"]]
        assert s["calls"] == len(mine) and s["units"] == sum(r["units"] for r in mine)
        starts = sorted((r["start"].timestamp(), r["end"].timestamp()) for r in mine)
        assert s["busy_s"] <= sum(b - a for a, b in starts) + 1e-9 and s["busy_s"] >= max(b - a for a, b in starts)
        assert 0 < s["busy_fraction"] <= 1
    semantic = next(s for s in stats["stages"] if s["stage"] == "semantic")
    assert semantic["units"] == 4 * 40 and semantic["realtime_factor"] == pytest.approx(
        160 / 25 / semantic["busy_s"])
    assert stats["tracks_done"] == 4 and stats["eta_s"] == 0.0 and len(stats["tracks"]) == 4
    assert stats["cards"][0]["virtual"] and "NVML has nothing to report" in stats["gpu_note"]
    assert "was busy" in stats["bottleneck"]


def test_the_eta_is_the_plans_forecast_until_every_stage_has_a_pace():
    """Before each stage with work left has finished a call, the observed ETA has nothing to go on: the live view
    then counts down the simulator's makespan for the render (`forecast_s`), and says so; after, the observed pace."""
    tracks = [{"key": k, "title": k, "status": "running", "needs": ["plan", "semantic", "acoustic", "decode"]}
              for k in ("a", "b")]
    live = {"started": 1000.0, "forecast_s": 90.0, "tracks": tracks}
    early = aggregate.album_stats([], now=1030.0, live=live)
    assert early["eta_s"] == pytest.approx(60.0) and early["eta_source"] == "forecast"
    late = aggregate.album_stats([], now=1200.0, live=live)
    assert late["eta_s"] is None and late["eta_source"] is None    # past the forecast: unknown, not "done"
    assert aggregate.album_stats([], now=1030.0, live={**live, "forecast_s": None})["eta_s"] is None
    from farm.eventlog import event_rows
    from farm.jobs import StageEvent

    paced = event_rows("r", [StageEvent(track="a", stage=s, worker="w", host="h", pid=1, gpu="cpu", gpu_uuid="CPU-0",
                                        start=1000.0 + i, end=1001.0 + i, units=1, batch=1.0, batch_shape="",
                                        peak_bytes=0) for i, s in enumerate(("plan", "semantic", "acoustic", "decode"))])
    observed = aggregate.album_stats(paced, now=1030.0, live=live)
    assert observed["eta_source"] == "observed" and observed["eta_s"] is not None


class _Html(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.text = [], []

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_report_from_metrics_parquet_alone(rendered, tmp_path):
    out, _ = rendered
    for name in ("report.html", "gantt.png", "throughput.png", "cards.png"):
        assert (out / name).exists(), name
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(out / "metrics.parquet", alone / "metrics.parquet")
    from typer.testing import CliRunner

    from farm.cli import app

    r = CliRunner().invoke(app, ["report", str(alone)])
    assert r.exit_code == 0, r.output
    page = _Html()
    page.feed((alone / "report.html").read_text())
    assert len(page.images) == 3 and all(src.startswith("data:image/png;base64,") for src in page.images)
    text = "".join(page.text)
    assert "was busy" in text and all(stage in text for stage in ("plan", "semantic", "acoustic", "decode"))
    for name in ("gantt.png", "throughput.png", "cards.png"):
        data = (alone / name).read_bytes()
        width, height = _png_size(data)
        assert len(data) > 5000 and width >= 600 and height >= 150, name
        assert len(set(data[100:2000])) > 50, name          # not a blank image
    missing = CliRunner().invoke(app, ["report", str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "metrics.parquet is missing" in missing.stderr


@pytest.mark.skipif(not (CHROMIUM.exists() and DRIVER.exists()), reason="Debian chromium + chromium-driver "
                    "are not installed (.ci/run installs them)")
def test_live_page_in_headless_chromium_while_an_album_renders(ray_cluster, tiny_ckpt_dir, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    (tmp_path / "album.toml").write_text(album_text(10, 64))
    port, done = free_port(), {}
    opts = RenderOptions(out=str(tmp_path / "out"), model=str(tiny_ckpt_dir), cluster=PROFILES / "ci.toml",
                         progress=False, dashboard=("127.0.0.1", port))
    thread = threading.Thread(target=lambda: done.setdefault("r", render_album(tmp_path / "album.toml", opts)))
    thread.start()
    options = Options()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1800"):
        options.add_argument(flag)
    browser = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and "r" not in done:
            try:
                browser.get(f"http://127.0.0.1:{port}/")
                break
            except Exception:
                time.sleep(0.3)

        def read() -> tuple:
            # one script call reads the page atomically (it redraws every second; element handles go stale)
            return tuple(browser.execute_script("""
                const q = (sel) => Array.from(document.querySelectorAll(sel));
                return [q('#stages td.stage-name').map((e) => e.textContent), q('#gantt .track-row').length,
                        document.getElementById('stages').innerText + document.getElementById('elapsed').innerText,
                        document.getElementById('state').innerText];"""))

        first = None
        while time.time() < deadline and "r" not in done:
            stages, rows, numbers, state = read()
            if stages == ["plan", "semantic", "acoustic", "decode"] and rows == 10 and "running" in state:
                first = numbers
                break
            time.sleep(0.2)
        assert first is not None, "the page never showed the running album"
        time.sleep(2.5)
        stages, rows, second, _ = read()
        assert second != first, "the figures did not change between two reads"
        assert stages == ["plan", "semantic", "acoustic", "decode"] and rows == 10
        browser.save_screenshot(str(tmp_path / "dashboard.png"))
        assert (tmp_path / "dashboard.png").stat().st_size > 10_000
    finally:
        browser.quit()
        thread.join()
    assert not done["r"].failures


def test_prometheus_export_through_ray_and_the_farm_endpoint(rendered, ray_cluster):
    """The dashboard's own /metrics (for clusters without Ray's metrics agent) renders the album's figures; Ray's
    endpoint exports every one of them under the same name (Ray adds its ray_ prefix) and labels."""
    out, result = rendered
    from farm.dashboard.server import serve
    from farm.live import album_stats_fn

    server, page = serve(album_stats_fn(str(out)), port=0)
    try:
        mine = urllib.request.urlopen(page + "metrics", timeout=5).read().decode()
    finally:
        server.shutdown()
    assert 'farm_stage_units_total{stage="semantic"} 160.0' in mine
    assert "farm_album_tracks_done 4.0" in mine and 'farm_card_busy_fraction{card="CPU-ci"}' in mine
    names = {line.split()[2] for line in mine.splitlines() if line.startswith("# TYPE ")}
    wanted = {"ray_" + n + ("_total" if n in ("farm_stage_units", "farm_stage_calls") else "") for n in names}
    url = f"http://127.0.0.1:{ray_cluster.metrics_port}/metrics"
    deadline, missing, text = time.time() + 60, wanted, ""
    while time.time() < deadline and missing:           # Ray's agent exports every few seconds
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        missing = {n for n in wanted if n + "{" not in text and n + " " not in text}
        time.sleep(1)
    assert not missing, sorted(missing)
    assert any(line.startswith("ray_farm_stage_units_total{") and 'stage="semantic"' in line
               for line in text.splitlines())


def test_nvml_samples_are_kept_beside_the_metrics(tmp_path):
    """The sampler's records (as GpuMonitor makes them on a GPU host) → gpu_samples.parquet, one row per process."""
    from farm.gpumon import CardSample
    from farm.eventlog import GPU_SAMPLES, GPU_SCHEMA, write_gpu_samples
    from farm.store import Store

    store = Store(str(tmp_path))
    first = [CardSample(100.0, "GPU-a", 55.0, 3 << 30, {4242: 2 << 30, 4343: 1 << 30}), CardSample(101.0, "GPU-a", 0.0,
                                                                                                   1 << 30, {})]
    write_gpu_samples(store, "run-1", first)
    write_gpu_samples(store, "run-2", [CardSample(200.0, "GPU-b", None, None, {})])
    table = pq.read_table(tmp_path / GPU_SAMPLES)
    assert table.schema.equals(GPU_SCHEMA) and table.num_rows == 4
    rows = table.to_pylist()
    assert {(r["pid"], r["pid_memory"]) for r in rows if r["run_id"] == "run-1"} == {
        (4242, 2 << 30), (4343, 1 << 30), (None, None)}
    assert rows[-1]["gpu_uuid"] == "GPU-b" and rows[-1]["util_percent"] is None
