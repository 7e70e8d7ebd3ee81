"""The album report: report.html (self-contained: charts embedded) and PNG charts, from metrics.parquet alone.

Written after every render and by `farm report OUT_DIR`. Covers the latest run (a resumed album's earlier runs are
listed, not drawn). Knows the figures only through aggregate.album_stats.
"""
from __future__ import annotations

import base64
import html
import io

from . import aggregate
from .eventlog import METRICS, read_metrics
from .store import Store

COLOURS = {"plan": "#4c78a8", "semantic": "#f58518", "acoustic": "#54a24b", "decode": "#b279a2"}
CHARTS = ("gantt.png", "throughput.png", "cards.png")


def write_report(store: Store) -> list[str]:
    """Build report.html and the PNGs in the album folder; → the names written."""
    if not store.exists(METRICS):
        from .errors import UserError

        raise UserError(f"{store.uri(METRICS)} is missing: render the album first")
    rows = read_metrics(store).to_pylist()
    runs = sorted({r["run_id"] for r in rows})
    latest = [r for r in rows if r["run_id"] == runs[-1]] if runs else []
    stats = aggregate.album_stats(latest, title=album_title(store))
    pngs = {"gantt.png": gantt_png(stats), "throughput.png": throughput_png(stats), "cards.png": cards_png(stats)}
    for name, data in pngs.items():
        store.write_bytes(name, data)
    store.write_bytes("report.html", report_html(stats, pngs, runs, rows).encode("utf-8"))
    return [*pngs, "report.html"]


def album_title(store: Store) -> str:
    """The album's title from manifest.json when it is there; else the folder's name."""
    import json

    try:
        return json.loads(store.read_bytes("manifest.json"))["album"]
    except (FileNotFoundError, KeyError, ValueError):
        return store.url.rstrip("/").rsplit("/", 1)[-1]


def _figure(height: float):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt, plt.subplots(figsize=(10, height), dpi=100)


def _png(plt, fig) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def gantt_png(stats: dict) -> bytes:
    tracks = stats["tracks"]
    plt, (fig, ax) = _figure(1.2 + 0.35 * max(1, len(tracks)))
    t0 = stats["started"]
    for i, track in enumerate(tracks):
        for stage, seg in track["stages"].items():
            ax.barh(i, seg["end"] - seg["start"], left=seg["start"] - t0, color=COLOURS.get(stage, "#888")
                    if seg["ok"] else "#d62728", height=0.6)
    ax.set_yticks(range(len(tracks)), [t["key"] for t in tracks], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("seconds since the album started")
    ax.set_title("Tracks through the stages")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=s) for s, c in COLOURS.items()], fontsize=8, ncols=4,
              loc="upper center", bbox_to_anchor=(0.5, -0.25 if len(tracks) < 6 else -0.08), frameon=False)
    return _png(plt, fig)


def throughput_png(stats: dict) -> bytes:
    plt, (fig, ax) = _figure(3.2)
    s = stats["series"]
    for stage in aggregate.STAGES:
        ax.plot(s["t"], s["throughput"][stage], color=COLOURS[stage], label=f"{stage} ({aggregate.UNITS[stage]}/s)")
    ax.set_xlabel("seconds since the album started")
    ax.set_ylabel(f"units per second ({s['window_s']:.3g} s window)")
    ax.set_title("Per-stage throughput")
    ax.legend(fontsize=8)
    return _png(plt, fig)


def cards_png(stats: dict) -> bytes:
    cards = stats["cards"]
    plt, (fig, ax) = _figure(1.2 + 0.45 * max(1, len(cards)))
    labels = [f"{c['model']} ({c['card'][:14]})\n{', '.join(c['stages'])}" for c in cards]
    ax.barh(range(len(cards)), [100 * c["busy_fraction"] for c in cards], color="#4c78a8")
    ax.set_yticks(range(len(cards)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("busy, % of the album's wall time")
    ax.set_title("Per-card utilisation")
    return _png(plt, fig)


def report_html(stats: dict, pngs: dict[str, bytes], runs: list[str], rows: list[dict]) -> str:
    def img(name: str) -> str:
        return f'<img alt="{name}" src="data:image/png;base64,{base64.b64encode(pngs[name]).decode()}">'

    def cell(v) -> str:
        return html.escape("—" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v))

    stage_rows = "".join(
        "<tr>" + "".join(f"<td>{cell(v)}</td>" for v in (
            s["stage"], s["calls"], f"{s['units']} {s['unit']}", s["busy_s"], s["busy_fraction"], s["rate_mean"],
            s["audio_seconds_per_s"] and s["rate_mean"] / aggregate.FRAMES_PER_SECOND, s["realtime_factor"],
            s["mean_queue_wait_s"])) + "</tr>" for s in stats["stages"])
    card_rows = "".join(
        "<tr>" + "".join(f"<td>{cell(v)}</td>" for v in (
            c["card"], c["model"], ", ".join(c["stages"]), f"{100 * c['busy_fraction']:.0f}%")) + "</tr>"
        for c in stats["cards"])
    earlier = [r for r in runs[:-1]]
    history = (f"<p>Earlier runs of this album (resumed): {', '.join(html.escape(r) for r in earlier)} — "
               f"{sum(1 for r in rows if r['run_id'] in earlier)} stage calls.</p>") if earlier else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(stats['album'])} — yue2-farm report</title>
<style>body{{font:14px/1.45 system-ui,sans-serif;margin:24px;color:#1d232a}}table{{border-collapse:collapse}}
td,th{{padding:3px 10px;border-bottom:1px solid #ddd;text-align:right}}td:first-child,th:first-child{{text-align:left}}
img{{max-width:100%;display:block;margin:10px 0}}.b{{font-weight:600}}</style></head><body>
<h1>{html.escape(stats['album'])}</h1>
<p>Run {html.escape(runs[-1] if runs else '—')}: {stats['tracks_done']} of {stats['tracks_total']} tracks done,
{len([r for r in rows if runs and r['run_id'] == runs[-1]])} stage calls over {stats['elapsed_s']:.1f} s.</p>
<p class="b" id="bottleneck">{html.escape(stats['bottleneck'])}</p>
{history}
<h2>Stages</h2>
<table><tr><th>stage</th><th>calls</th><th>units</th><th>busy s</th><th>busy share</th><th>mean rate /s</th>
<th>audio s / s</th><th>real-time ×</th><th>mean queue wait s</th></tr>{stage_rows}</table>
<h2>Timeline</h2>{img('gantt.png')}
<h2>Throughput</h2>{img('throughput.png')}
<h2>Cards</h2><table><tr><th>card</th><th>model</th><th>stages</th><th>busy</th></tr>{card_rows}</table>
{img('cards.png')}
<p>{html.escape(stats['gpu_note'])}</p>
</body></html>
"""
