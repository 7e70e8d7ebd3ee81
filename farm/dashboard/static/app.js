// The live page: poll /api/stats every second and redraw. Plain DOM and SVG; nothing is fetched from elsewhere.
"use strict";
const STAGES = ["plan", "semantic", "acoustic", "decode"];
const COLOURS = { plan: "#4c78a8", semantic: "#f58518", acoustic: "#54a24b", decode: "#b279a2" };
const SVG = "http://www.w3.org/2000/svg";

const fmt = (x, d = 1) => (x === null || x === undefined ? "—" : Number(x).toFixed(d));
const pct = (x) => (x === null || x === undefined ? "—" : `${Math.round(100 * x)}%`);
const secs = (s) => (s === null || s === undefined ? "—" : s < 90 ? `${s.toFixed(0)} s` : `${(s / 60).toFixed(1)} min`);
const gib = (b) => (b === null || b === undefined ? "—" : `${(b / 2 ** 30).toFixed(2)} GiB`);

function el(tag, attrs = {}, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function header(s) {
  document.getElementById("album").textContent = s.album || "yue2-farm";
  document.getElementById("state").textContent = `state: ${s.state}`;
  document.getElementById("progress").textContent = `tracks: ${s.tracks_done} / ${s.tracks_total}`;
  document.getElementById("elapsed").textContent = `elapsed: ${secs(s.elapsed_s)}`;
  const source = s.eta_source === "forecast" ? " (the plan's forecast)" : "";
  document.getElementById("eta").textContent = `ETA: ${s.eta_s === 0 ? "done" : secs(s.eta_s)}${source}`;
  document.getElementById("bottleneck").textContent = s.bottleneck;
  document.getElementById("gpu-note").textContent = s.gpu_note;
  document.getElementById("updated").textContent = new Date().toLocaleTimeString();
}

function stageTable(s) {
  const body = document.querySelector("#stages tbody");
  body.replaceChildren(...s.stages.map((x) => {
    const row = el("tr", { "data-stage": x.stage });
    const cells = [x.stage, x.calls, `${x.units} ${x.unit}`, `${fmt(x.rate_now)} ${x.unit}/s`,
      `${fmt(x.rate_mean)} ${x.unit}/s`, fmt(x.audio_seconds_per_s, 2), fmt(x.realtime_factor),
      pct(x.busy_fraction), x.queue_now, x.running_now, x.mean_queue_wait_s === null ? "—" : `${fmt(x.mean_queue_wait_s)} s`];
    cells.forEach((c, i) => row.appendChild(el("td", i === 0 ? { class: "stage-name" } : {}, String(c))));
    return row;
  }));
}

function lines(svgId, t, seriesByStage) {
  const svg = document.getElementById(svgId);
  const W = 600, H = 220, L = 40, B = 20;
  const all = STAGES.flatMap((k) => seriesByStage[k] || []);
  const top = Math.max(1e-9, ...all);
  const tmax = Math.max(1e-9, ...t);
  const x = (v) => L + (W - L - 8) * (v / tmax);
  const y = (v) => H - B - (H - B - 8) * (v / top);
  const kids = [el("svg:line", { x1: L, y1: H - B, x2: W - 8, y2: H - B, stroke: "#999" }),
    el("svg:text", { x: 4, y: 14, "font-size": 11 }, fmt(top, top < 10 ? 2 : 0)),
    el("svg:text", { x: W - 60, y: H - 4, "font-size": 11 }, `${fmt(tmax, 0)} s`)];
  for (const k of STAGES) {
    const ys = seriesByStage[k] || [];
    if (!ys.length) continue;
    const pts = ys.map((v, i) => `${x(t[i]).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
    kids.push(el("svg:polyline", { points: pts, fill: "none", stroke: COLOURS[k], "stroke-width": 2, "data-stage": k }));
  }
  svg.replaceChildren(...kids);
}

function gantt(s) {
  const svg = document.getElementById("gantt");
  const rowH = 22, L = 170, W = 1000;
  const t0 = s.started, span = Math.max(1e-9, s.now - s.started);
  const x = (t) => L + (W - L - 10) * ((t - t0) / span);
  svg.setAttribute("viewBox", `0 0 ${W} ${Math.max(40, s.tracks.length * rowH + 10)}`);
  svg.replaceChildren(...s.tracks.map((track, i) => {
    const g = el("svg:g", { class: "track-row", "data-track": track.key, "data-status": track.status });
    g.appendChild(el("svg:text", { x: 4, y: i * rowH + 16, "font-size": 12 }, `${track.key} · ${track.status}`));
    for (const k of STAGES) {
      const seg = track.stages[k];
      if (!seg) continue;
      const rect = el("svg:rect", { x: x(seg.start).toFixed(1), y: i * rowH + 4, height: rowH - 8,
        width: Math.max(1.5, x(seg.end) - x(seg.start)).toFixed(1), fill: seg.ok ? COLOURS[k] : "#d62728",
        "data-stage": k });
      rect.appendChild(el("svg:title", {}, `${track.key} ${k}: ${fmt(seg.end - seg.start, 2)} s on ${seg.gpu}`));
      g.appendChild(rect);
    }
    return g;
  }));
  document.getElementById("legend").replaceChildren(...STAGES.map((k) => {
    const span = el("span");
    span.appendChild(el("i", { style: `background:${COLOURS[k]}` }));
    span.appendChild(document.createTextNode(k));
    return span;
  }));
}

function cardTable(s) {
  const body = document.querySelector("#cards tbody");
  body.replaceChildren(...s.cards.map((c) => {
    const row = el("tr", { "data-card": c.card });
    const memory = c.virtual ? "virtual: none" : c.memory_used === null ? "—" : gib(c.memory_used);
    const util = c.virtual ? "virtual: none" : c.util_percent === null ? "—" : `${c.util_percent}%`;
    [c.card, c.model, c.stages.join(", "), pct(c.busy_fraction), memory, util]
      .forEach((v) => row.appendChild(el("td", {}, String(v))));
    return row;
  }));
}

async function refresh() {
  try {
    const s = await (await fetch("/api/stats", { cache: "no-store" })).json();
    header(s); stageTable(s); lines("throughput", s.series.t, s.series.throughput);
    lines("queues", s.series.t, s.series.queue); gantt(s); cardTable(s);
    document.body.dataset.state = s.state;
  } catch (err) {
    document.getElementById("state").textContent = `not reachable (${err})`;
  }
}
refresh();
setInterval(refresh, 1000);
