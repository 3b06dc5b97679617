"""The stylesheet and the chart script that report.html inlines (it must open offline, alone).

The script draws the timeline into `<svg id="timeline">` from the JSON in `#rsdrill-data`. It only
ever sets text with `textContent` and attributes with `setAttribute`, never markup, so names
and error strings from the data cannot become HTML. It takes the SVG namespace from the parsed
`<svg>` element rather than spelling out its URI: the report contains no URL at all.
"""

CSS = """
:root { --ok: #2e9e44; --timeout: #f0a202; --error: #d7263d; --ink: #1f2328; --muted: #656d76;
        --line: #d0d7de; --bg: #ffffff; --panel: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; padding: 16px 24px 40px; color: var(--ink); background: var(--bg);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "Liberation Sans", sans-serif; }
main { max-width: 1320px; margin: 0 auto; }
h1 { font-size: 22px; margin: 0 0 6px; display: flex; align-items: center; gap: 12px;
     flex-wrap: wrap; }
h2 { font-size: 16px; margin: 22px 0 8px; }
.verdict { font-size: 14px; font-weight: 700; letter-spacing: .06em; padding: 3px 10px;
           border-radius: 4px; color: #fff; }
.verdict-pass { background: var(--ok); }
.verdict-fail { background: var(--error); }
.verdict-aborted { background: var(--timeout); color: #000; }
.verdict-error { background: #6e0b14; }
.facts { display: flex; flex-wrap: wrap; gap: 4px 22px; margin: 0; color: var(--muted); }
.facts div { display: flex; gap: 6px; }
.facts dt { font-weight: 600; }
.facts dd { margin: 0; color: var(--ink); }
.error { background: #fff0f1; border: 1px solid var(--error); border-radius: 6px;
         padding: 8px 12px; white-space: pre-wrap; font-family: ui-monospace, monospace; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 10px; text-align: left; }
th { background: var(--panel); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.slo-fail td { background: #fff0f1; }
.res-pass { color: var(--ok); font-weight: 600; }
.res-fail { color: var(--error); font-weight: 700; }
.res-unjudged { color: var(--muted); font-style: italic; }
.tables { display: flex; flex-wrap: wrap; gap: 8px 36px; align-items: flex-start; }
.chart { border: 1px solid var(--line); border-radius: 6px; padding: 6px; background: #fff; }
#timeline { display: block; width: 100%; height: auto; font-size: 11px; }
#timeline .heading { font-weight: 700; fill: var(--muted); font-size: 11px; }
#timeline .label { fill: var(--ink); }
#timeline .tick { fill: var(--muted); font-size: 10px; }
#timeline .grid { stroke: #e6e9ed; stroke-width: 1; }
#timeline .cursor { pointer-events: none; }
.note { color: var(--muted); font-size: 12px; }
"""

JS = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("rsdrill-data").textContent).timeline;
  const svg = document.getElementById("timeline");
  const NS = svg.namespaceURI;
  const W = 1200, LEFT = 170, RIGHT = 18, ROW = 16, GAP = 3, SECTION = 22;
  const span = Math.max(data.end - data.start, 1e-3);
  const x = (t) => LEFT + ((t - data.start) / span) * (W - LEFT - RIGHT);
  const OUTCOME_COLOR = { ok: "#2e9e44", timeout: "#f0a202", error: "#d7263d" };
  const STATE_COLOR = {
    PRIMARY: "#1d4e89", SECONDARY: "#7fb3e0", STARTUP: "#b39ddb", STARTUP2: "#7e57c2",
    RECOVERING: "#e8833a", ROLLBACK: "#c2185b", ARBITER: "#a0a0a0", UNKNOWN: "#cfcfcf",
    REMOVED: "#707070", DOWN: "url(#down-hatch)",
  };
  const SERIES_COLOR = { write: "#6a3d9a", read: "#1f78b4", load: "#b15928" };
  const STALL_COLOR = "#57606a";
  const PALETTE = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"];

  function el(tag, attrs, parent, tip) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    if (tip) {
      const title = document.createElementNS(NS, "title");
      title.textContent = tip;
      node.appendChild(title);
    }
    parent.appendChild(node);
    return node;
  }
  function text(parent, tx, ty, content, cls, anchor) {
    const node = el("text",
      { x: tx, y: ty, class: cls || "label", "text-anchor": anchor || "start" }, parent);
    node.textContent = content;
    return node;
  }
  function shorten(name, n) { return name.length > n ? name.slice(0, n - 1) + "\u2026" : name; }
  function secs(t) { return (+t).toFixed(3).replace(/\.?0+$/, "") + " s"; }
  function rect(parent, t0, t1, top, height, attrs, tip) {
    const x0 = x(t0), width = Math.max(x(t1) - x0, 1);  // a 5 ms blip still shows
    return el("rect", Object.assign({ x: x0, y: top, width: width, height: height }, attrs),
      parent, tip);
  }

  const defs = el("defs", {}, svg);
  const hatch = el("pattern", { id: "down-hatch", patternUnits: "userSpaceOnUse", width: 6,
    height: 6, patternTransform: "rotate(45)" }, defs);
  el("rect", { width: 6, height: 6, fill: "#2b0b0e" }, hatch);
  el("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#e04848", "stroke-width": 3 }, hatch);

  const back = el("g", { class: "background" }, svg);
  const front = el("g", { class: "rows" }, svg);
  let y = 4;
  function heading(title) {
    y += SECTION;
    text(front, 4, y - 7, title, "heading");
  }
  const bodyTop = y;

  // Faults: one row per set of non-overlapping spans.
  const faultRows = data.faults.reduce((n, f) => Math.max(n, f.row + 1), 0);
  if (faultRows) {
    heading("faults");
    for (const f of data.faults) {
      const top = y + f.row * (ROW + GAP);
      const g = el("g", { class: "fault-span", "data-kind": f.kind, "data-target": f.target,
        "data-t0": f.t0, "data-t1": f.t1 }, front);
      const tip = f.kind + " " + f.target + ": " + secs(f.t0) + " \u2192 " +
        (f.reverted ? secs(f.t1) : "never reverted");
      rect(g, f.t0, f.t1, top, ROW, { fill: "#f8c9cf", stroke: "#d7263d", rx: 2,
        "stroke-dasharray": f.reverted ? "none" : "4 2" }, tip);
      text(g, x(f.t0) + 4, top + ROW - 4, f.kind + " " + shorten(f.target, 48));
    }
    y += faultRows * (ROW + GAP);
  }

  function lane(cls, key, name, tip) {
    const g = el("g", { class: cls, [key]: name }, front);
    text(g, LEFT - 8, y + ROW - 4, shorten(name, 26), "label", "end");
    el("rect", { x: LEFT, y: y, width: W - LEFT - RIGHT, height: ROW, fill: "#f1f3f5" }, g, tip);
    return g;
  }

  if (data.strips.length) {
    heading("availability (each attempt: ok / timeout / error)");
    for (const strip of data.strips) {
      let total = 0, bad = 0;
      for (const r of strip.runs) { total += r[3]; bad += r[4]; }
      const g = lane("strip", "data-probe", strip.probe,
        strip.probe + ": " + total + " attempts, " + bad + " not ok");
      // Worst outcomes last, so an error is never hidden under an overlapping ok run.
      const runs = strip.runs.slice().sort((a, b) => a[2] - b[2]);
      for (const [t0, t1, code, n, nbad] of runs) {
        const outcome = data.outcomes[code];
        // A merged run (long histories) mixes outcomes: paler means a smaller share failed.
        const share = code > 0 ? nbad / n : 1;
        rect(g, t0, t1, y, ROW, { class: "strip-run", "data-outcome": outcome,
          fill: OUTCOME_COLOR[outcome], "fill-opacity": (0.5 + 0.5 * share).toFixed(2) },
          strip.probe + " " + outcome + ": " + n + " attempts (" + nbad + " not ok), " +
          secs(t0) + " \u2013 " + secs(t1));
      }
      y += ROW + GAP;
    }
  }

  // rsdrill's own process not running: no probe above could see anything then.
  if (data.stalls.length) {
    heading("rsdrill's own process stalled (its probes saw nothing)");
    const g = lane("stall-lane", "data-lane", "this process",
      "rsdrill's own process: its " + data.stalls.length + " longest stalls");
    for (const [t0, t1] of data.stalls) {
      rect(g, t0, t1, y, ROW, { class: "stall-span", "data-t0": t0, "data-t1": t1,
        fill: STALL_COLOR }, "this process stalled " + secs(t1 - t0) + ": " + secs(t0) +
        " \u2013 " + secs(t1));
    }
    y += ROW + GAP;
  }

  if (data.states.length) {
    heading("member states");
    for (const laneData of data.states) {
      const g = lane("state-lane", "data-member", laneData.member, laneData.member);
      for (const [t0, t1, state] of laneData.segments) {
        rect(g, t0, t1, y, ROW, { class: "state-seg", "data-state": state,
          fill: STATE_COLOR[state] || "#cfcfcf" },
          laneData.member + " " + state + ": " + secs(t0) + " \u2013 " + secs(t1));
      }
      y += ROW + GAP;
    }
  }

  function panel(title, height, cls) {
    heading(title);
    const g = el("g", { class: cls }, front);
    el("rect", { x: LEFT, y: y, width: W - LEFT - RIGHT, height: height, fill: "none",
      stroke: "#d0d7de" }, g);
    const top = y;
    y += height + GAP;
    return { g: g, top: top, bottom: top + height };
  }
  // A linear axis from 0 over `hi` (with room above it): ticks 0, s, 2s where s is 1, 2, 2.5 or
  // 5 times a power of ten, each labelled with the decimals s needs, so a 2 ms lag reads 0,
  // 0.002, 0.004 and not 0.00 three times.
  function linearAxis(hi) {
    const half = (hi > 0 ? hi * 1.1 : 1) / 2;
    const power = Math.floor(Math.log10(half));
    const [mantissa, extra] = [[1, 0], [2, 0], [2.5, 1], [5, 0], [10, 0]].find(
      ([m]) => m * Math.pow(10, power) >= half);
    const step = mantissa * Math.pow(10, power);
    const digits = Math.max(0, extra - power - (mantissa === 10 ? 1 : 0));
    const ticks = [0, step, 2 * step].map(
      (v) => ({ v: v, label: v === 0 ? "0" : v.toFixed(digits) }));
    return { top: 2 * step, ticks: ticks };
  }
  function line(g, points, toY, attrs) {
    // Break the line where a series has no points for a while (an outage is a gap, not a slope);
    // "a while" is a few of the series' usual steps, or of the bucket width, whichever is longer.
    const steps = points.slice(1).map((p, i) => p[0] - points[i][0]).sort((a, b) => a - b);
    const usual = steps.length ? steps[Math.floor(steps.length / 2)] : 0;
    const maxGap = 2.5 * Math.max(usual, data.latency_bucket_s);
    let path = "", prev = null;
    for (const p of points) {
      path += (prev === null || p[0] - prev > maxGap ? "M" : "L") +
        x(p[0]).toFixed(1) + "," + toY(p).toFixed(1);
      prev = p[0];
    }
    if (path) el("path", Object.assign({ d: path, fill: "none" }, attrs), g);
  }

  if (data.latency.length) {
    const p = panel("latency of successful attempts (ms, log scale; line p50, faint max)", 150,
      "latency");
    let lo = Infinity, hi = 0;
    for (const s of data.latency) for (const pt of s.points) {
      lo = Math.min(lo, pt[1]); hi = Math.max(hi, pt[2]);
    }
    const d0 = Math.floor(Math.log10(Math.max(lo, 0.01)));
    const d1 = Math.max(Math.ceil(Math.log10(Math.max(hi, 0.01))), d0 + 1);
    const ly = (v) => p.bottom - ((Math.log10(Math.max(v, Math.pow(10, d0))) - d0) / (d1 - d0)) *
      (p.bottom - p.top);
    for (let k = d0; k <= d1; k++) {
      const gy = ly(Math.pow(10, k));
      el("line", { x1: LEFT, x2: W - RIGHT, y1: gy, y2: gy, class: "grid" }, p.g);
      text(p.g, LEFT - 6, gy + 3, Math.pow(10, k) >= 1 ? String(Math.pow(10, k)) :
        Math.pow(10, k).toFixed(-k), "tick", "end");
    }
    for (const s of data.latency) {
      const color = SERIES_COLOR[s.probe] || "#444";
      const g = el("g", { class: "latency-series", "data-probe": s.probe }, p.g);
      line(g, s.points, (pt) => ly(pt[2]), { stroke: color, "stroke-opacity": 0.3,
        "stroke-width": 1 });
      line(g, s.points, (pt) => ly(pt[1]), { stroke: color, "stroke-width": 1.6 });
    }
  }

  const lagMembers = Object.keys(data.lag);
  if (lagMembers.length) {
    const p = panel("replication lag (s, largest per interval)", 90, "lag");
    let hi = 0;
    for (const m of lagMembers) for (const pt of data.lag[m]) hi = Math.max(hi, pt[1]);
    const axis = linearAxis(hi);
    const ly = (v) => p.bottom - (v / axis.top) * (p.bottom - p.top);
    for (const tick of axis.ticks) {
      el("line", { x1: LEFT, x2: W - RIGHT, y1: ly(tick.v), y2: ly(tick.v), class: "grid" }, p.g);
      text(p.g, LEFT - 6, ly(tick.v) + 3, tick.label, "tick", "end");
    }
    lagMembers.forEach((m, i) => {
      const g = el("g", { class: "lag-series", "data-member": m }, p.g);
      line(g, data.lag[m], (pt) => ly(pt[1]), { stroke: PALETTE[i % PALETTE.length],
        "stroke-width": 1.4 });
    });
  }

  if (y === bodyTop) {
    heading("no probe attempts, states or faults were recorded");
  }

  // The shared time axis, with grid lines through every row above it.
  const bodyBottom = y;
  const steps = [0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
  const step = steps.find((s) => span / s <= 14) || 7200;
  const axis = el("g", { class: "axis" }, front);
  for (let t = Math.ceil(data.start / step) * step; t <= data.end + 1e-9; t += step) {
    el("line", { x1: x(t), x2: x(t), y1: bodyTop, y2: bodyBottom, class: "grid" }, back);
    text(axis, x(t), bodyBottom + 12, String(+t.toFixed(1)), "tick", "middle");
  }
  text(axis, W - RIGHT, bodyBottom + 26, "seconds since start", "tick", "end");

  // Faults shade every row, so a gap or a state change lines up with its cause at a glance.
  for (const f of data.faults) {
    rect(back, f.t0, f.t1, bodyTop, bodyBottom - bodyTop, { class: "fault-band",
      fill: "#d7263d", "fill-opacity": 0.07 });
    el("line", { x1: x(f.t0), x2: x(f.t0), y1: bodyTop, y2: bodyBottom, stroke: "#d7263d",
      "stroke-width": 1 }, back);
    if (f.reverted) {
      el("line", { x1: x(f.t1), x2: x(f.t1), y1: bodyTop, y2: bodyBottom, stroke: "#2e9e44",
        "stroke-width": 1, "stroke-dasharray": "4 3" }, back);
    }
  }

  // Stalls shade every row too: a gap inside one may be this machine's, not the cluster's.
  for (const [t0, t1] of data.stalls) {
    rect(back, t0, t1, bodyTop, bodyBottom - bodyTop, { class: "stall-band",
      fill: STALL_COLOR, "fill-opacity": 0.12 });
  }

  // Legend: only what this chart shows.
  y = bodyBottom + 40;
  const legend = el("g", { class: "legend" }, front);
  let lx = LEFT;
  function swatch(label, fill, attrs) {
    const box = el("rect", Object.assign({ width: 12, height: 10, fill: fill }, attrs || {}),
      legend);
    const node = text(legend, 0, 0, label, "tick");
    const width = 16 + node.getComputedTextLength();
    if (lx > LEFT && lx + width > W - RIGHT) { lx = LEFT; y += 16; }  // wrap onto a new line
    box.setAttribute("x", lx); box.setAttribute("y", y - 9);
    node.setAttribute("x", lx + 16); node.setAttribute("y", y);
    lx += width + 8;
  }
  if (data.strips.length) for (const o of data.outcomes) swatch(o, OUTCOME_COLOR[o]);
  if (data.faults.length) {
    swatch("fault injected \u2192 reverted", "#f8c9cf", { stroke: "#d7263d" });
  }
  if (data.stalls.length) swatch("rsdrill stalled", STALL_COLOR);
  const seen = new Set();
  for (const laneData of data.states) for (const s of laneData.segments) seen.add(s[2]);
  for (const state of Object.keys(STATE_COLOR).concat([...seen])) {
    if (seen.delete(state)) swatch(state, STATE_COLOR[state] || "#cfcfcf");
  }
  for (const s of data.latency) swatch(s.probe + " latency", SERIES_COLOR[s.probe] || "#444");
  lagMembers.forEach((m, i) => swatch("lag " + shorten(m, 26), PALETTE[i % PALETTE.length]));
  y += 8;

  // A cursor that reads out the time under the pointer.
  const cursor = el("g", { class: "cursor", visibility: "hidden" }, svg);
  const cursorLine = el("line", { y1: bodyTop, y2: bodyBottom, stroke: "#1f2328",
    "stroke-dasharray": "2 2" }, cursor);
  const cursorText = text(cursor, 0, bodyTop + 10, "", "tick", "middle");
  svg.addEventListener("mousemove", (event) => {
    const pt = svg.createSVGPoint();
    pt.x = event.clientX; pt.y = event.clientY;
    const local = pt.matrixTransform(svg.getScreenCTM().inverse());
    const inside = local.x >= LEFT && local.x <= W - RIGHT;
    cursor.setAttribute("visibility", inside ? "visible" : "hidden");
    if (!inside) return;
    cursorLine.setAttribute("x1", local.x);
    cursorLine.setAttribute("x2", local.x);
    cursorText.setAttribute("x", local.x);
    cursorText.textContent = secs(data.start + ((local.x - LEFT) / (W - LEFT - RIGHT)) * span);
  });
  svg.addEventListener("mouseleave", () => cursor.setAttribute("visibility", "hidden"));

  svg.setAttribute("viewBox", "0 0 " + W + " " + y);
  svg.setAttribute("data-rendered", "true");
})();
"""
