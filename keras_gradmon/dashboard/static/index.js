// The keras_gradmon dashboard: an ES module TensorBoard loads in an iframe
// (its document's base is /data/plugin/keras_gradmon/, so every URL here is
// relative). Every name from the logs is shown with textContent, never as
// HTML. Drawn with plain canvas and SVG.

const METRIC_NAMES = {
  grad_norm: "gradient norm",
  update_ratio: "update/weight ratio",
  grad_to_weight: "gradient/weight ratio",
  weight_norm: "weight norm",
};
// A perceptual ramp (viridis anchors), low to high.
const RAMP = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
const NONFINITE = "rgb(230, 0, 170)";
const MISSING = "rgb(225, 225, 225)";
const ZERO = "rgb(20, 20, 20)";
const CELL_H = 14;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== null) node.textContent = String(text);
  return node;
}

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

async function getJson(path, params = {}) {
  const query = new URLSearchParams(params).toString();
  const response = await fetch(query ? `./${path}?${query}` : `./${path}`);
  const text = await response.text();
  let body;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new Error(`${path}: HTTP ${response.status}, an answer that is not JSON`);
  }
  if (!response.ok) throw new Error(body.error || `${path}: HTTP ${response.status}`);
  return body;
}

// A served number: a float, null (not recorded), or "NaN"/"Infinity".
function asNumber(value) {
  if (value === null || value === undefined) return null;
  return typeof value === "number" ? value : Number(value);
}

function fmt(value) {
  const v = asNumber(value);
  if (v === null) return "-";
  if (!Number.isFinite(v)) return String(v);
  if (v !== 0 && (Math.abs(v) < 1e-3 || Math.abs(v) >= 1e5)) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

function rampColor(t) {
  const x = Math.min(Math.max(t, 0), 1) * (RAMP.length - 1);
  const i = Math.min(Math.floor(x), RAMP.length - 2);
  const f = x - i;
  const c = RAMP[i].map((a, k) => Math.round(a + (RAMP[i + 1][k] - a) * f));
  return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
}

// The log10 range of the positive finite values, or null.
function logRange(values) {
  let low = Infinity;
  let high = -Infinity;
  for (const v of values) {
    if (v !== null && Number.isFinite(v) && v > 0) {
      low = Math.min(low, Math.log10(v));
      high = Math.max(high, Math.log10(v));
    }
  }
  return Number.isFinite(low) ? [low, high] : null;
}

function cellColor(v, range) {
  if (v === null) return MISSING;
  if (!Number.isFinite(v)) return NONFINITE;
  if (v <= 0 || range === null) return ZERO;
  const span = range[1] - range[0];
  return rampColor(span > 0 ? (Math.log10(v) - range[0]) / span : 0.5);
}

function drawLegend(range) {
  const legend = el("div", { class: "legend" });
  const bar = el("canvas", { width: 200, height: 12, class: "legend-bar" });
  const ctx = bar.getContext("2d");
  for (let x = 0; x < 200; x++) {
    ctx.fillStyle = rampColor(x / 199);
    ctx.fillRect(x, 0, 1, 12);
  }
  legend.append(el("span", {}, range ? fmt(10 ** range[0]) : "-"), bar);
  legend.append(el("span", {}, range ? fmt(10 ** range[1]) : "-"));
  legend.append(el("span", {}, "(log scale)"));
  for (const [color, label] of [[ZERO, "zero"], [NONFINITE, "NaN/Inf"], [MISSING, "not recorded"]]) {
    const swatch = el("span", { class: "swatch" });
    swatch.style.background = color;
    legend.append(swatch, el("span", {}, label));
  }
  return legend;
}

function cellWidth(steps) {
  return Math.max(2, Math.min(14, Math.floor(900 / Math.max(steps, 1))));
}

function drawHeatmap(data, onRow) {
  const wrap = el("div", { class: "heatmap" });
  const labels = el("div", { class: "row-labels" });
  const width = cellWidth(data.steps.length);
  const canvas = el("canvas", {
    class: "heatmap-canvas",
    width: Math.max(data.steps.length * width, 1),
    height: Math.max(data.rows.length * CELL_H, 1),
  });
  const values = data.values.map((row) => row.map(asNumber));
  const range = logRange(values.flat());
  const ctx = canvas.getContext("2d");
  values.forEach((row, r) => {
    row.forEach((v, c) => {
      ctx.fillStyle = cellColor(v, range);
      ctx.fillRect(c * width, r * CELL_H, width, CELL_H);
    });
  });
  data.rows.forEach((name, r) => {
    const button = el("button", { class: "row-label", type: "button" }, name);
    button.addEventListener("click", () => onRow(name));
    labels.append(button);
  });
  canvas.addEventListener("click", (event) => {
    const r = Math.floor(event.offsetY / CELL_H);
    if (r >= 0 && r < data.rows.length) onRow(data.rows[r]);
  });
  canvas.title = `steps ${data.steps[0]} to ${data.steps[data.steps.length - 1]}`;
  const right = el("div", { class: "heatmap-right" });
  right.append(canvas);
  wrap.append(labels, right);
  return { node: wrap, legend: drawLegend(range), width, labels, right };
}

// Alerts as incidents on the heatmap's step axis: a bar per incident.
function drawIncidentStrip(incidents, steps, width) {
  const height = Math.max(incidents.length, 1) * 8;
  const canvas = el("canvas", {
    class: "incident-strip",
    width: Math.max(steps.length * width, 1),
    height,
  });
  const ctx = canvas.getContext("2d");
  const at = (step) => {
    let i = steps.findIndex((s) => s >= step);
    if (i < 0) i = steps.length - 1;
    return i;
  };
  incidents.forEach((incident, k) => {
    ctx.fillStyle = incident.tier === "critical" ? "rgb(200, 30, 30)" : "rgb(235, 150, 20)";
    const x0 = at(incident.first) * width;
    const x1 = (at(incident.last) + 1) * width;
    ctx.fillRect(x0, k * 8 + 1, Math.max(x1 - x0, 2), 6);
  });
  return canvas;
}

function incidentTable(health) {
  const box = el("div", { class: "alerts" });
  const incidents = health.reports.flatMap((r) => r.incidents);
  box.append(el("h4", {}, incidents.length ? `Alerts (${incidents.length} incident(s))` : "Alerts: none"));
  for (const report of health.reports) {
    if (report.incidents.length) box.append(el("div", { class: "caption" }, `${report.title}: ${report.caption}`));
  }
  if (!incidents.length) return box;
  const table = el("table", { class: "incidents" });
  const head = el("tr");
  for (const h of ["tier", "rule", "subject", "first", "last", "count", "worst", "what happened", "hint"]) {
    head.append(el("th", {}, h));
  }
  table.append(head);
  for (const i of incidents) {
    const row = el("tr", { class: `tier-${i.tier}` });
    const cells = [i.tier, i.rule, i.subject, i.first, i.last, i.count, `${fmt(i.worst)} @ ${i.worst_step}`, i.text, i.hint];
    for (const c of cells) row.append(el("td", {}, c));
    table.append(row);
  }
  box.append(table);
  return box;
}

function healthLine(health) {
  const box = el("div", { class: "health" });
  const status = health.reports.some((r) => r.status === "critical")
    ? "critical"
    : health.reports.some((r) => r.status === "warning") ? "warning" : "ok";
  box.append(el("span", { class: `badge status-${status}` }, status), el("span", { class: "verdict" }, health.verdict));
  for (const report of health.reports) {
    // The report's comparison-table row, then its lines (keras-gradmon report's own).
    const summary = Object.entries(report.summary || {}).map(([k, v]) => `${k} ${v}`);
    if (summary.length) box.append(el("div", { class: "summary" }, `${report.title}: ${summary.join(" | ")}`));
    for (const line of report.details || []) box.append(el("div", { class: "detail-line" }, `${report.title}: ${line}`));
    for (const f of report.findings) {
      box.append(el("div", { class: "finding" }, `${f.layer}: ${f.kind}: ${f.reason}`));
    }
  }
  const notes = [];
  if (health.steps) notes.push(`steps ${health.steps[0]} to ${health.steps[1]} read`);
  if (health.unreadable_tables) notes.push(`${health.unreadable_tables} unreadable table record(s) left out`);
  if (health.nonfinite_cells) notes.push(`${health.nonfinite_cells} per-variable number(s) read are NaN or Inf (magenta on the heatmap)`);
  if (health.unreadable_alerts) notes.push(`${health.unreadable_alerts} unreadable alert record(s) left out`);
  if (notes.length) box.append(el("div", { class: "notes" }, notes.join("; ")));
  for (const line of health.unread || []) box.append(el("div", { class: "notes" }, line));
  if (health.sample) box.append(el("div", { class: "sample" }, health.sample));
  return box;
}

// A line chart of {steps, values}; log y axis over the whole positive range
// (no outlier clipping), non-finite points marked at the top.
function lineChart(title, series, log) {
  const w = 420;
  const h = 140;
  const pad = 40;
  const box = el("div", { class: "chart" });
  box.append(el("div", { class: "chart-title" }, title + (log ? " (log y)" : "")));
  const svg = svgEl("svg", { width: w, height: h, class: "chart-svg" });
  const points = series.steps.map((s, i) => [s, asNumber(series.values[i])]);
  const usable = points.filter(([, v]) => Number.isFinite(v) && (!log || v > 0));
  const bad = points.filter(([, v]) => !Number.isFinite(v));
  const steps = series.steps.length ? series.steps : [0];
  const x0 = Math.min(...steps);
  const x1 = Math.max(...steps);
  const ys = usable.map(([, v]) => (log ? Math.log10(v) : v));
  const y0 = ys.length ? Math.min(...ys) : 0;
  const y1 = ys.length ? Math.max(...ys) : 1;
  const sx = (s) => pad + ((s - x0) / (x1 - x0 || 1)) * (w - pad - 10);
  const sy = (y) => h - 20 - ((y - y0) / (y1 - y0 || 1)) * (h - 40);
  svg.append(svgEl("rect", { x: pad, y: 10, width: w - pad - 10, height: h - 30, class: "frame" }));
  if (usable.length) {
    const d = usable.map(([s], i) => `${i ? "L" : "M"}${sx(s).toFixed(1)},${sy(ys[i]).toFixed(1)}`).join(" ");
    svg.append(svgEl("path", { d, class: "line" }));
  }
  for (const [s] of bad) svg.append(svgEl("rect", { x: sx(s) - 1, y: 10, width: 3, height: 6, class: "nonfinite" }));
  const label = (x, y, text, anchor) => {
    const t = svgEl("text", { x, y, "text-anchor": anchor, class: "axis" });
    t.textContent = text;
    svg.append(t);
  };
  label(pad - 3, sy(y1) + 4, fmt(log ? 10 ** y1 : y1), "end");
  label(pad - 3, sy(y0) + 4, fmt(log ? 10 ** y0 : y0), "end");
  label(pad, h - 4, String(x0), "start");
  label(w - 10, h - 4, String(x1), "end");
  box.append(svg);
  if (bad.length) box.append(el("div", { class: "notes" }, `${bad.length} non-finite value(s) (marked at the top)`));
  if (!usable.length) box.append(el("div", { class: "notes" }, "no finite value to plot"));
  return box;
}

// The gradient histogram over time: a column per step, buckets on a shared
// value axis, darker where more elements fell.
function histogramChart(histograms) {
  const box = el("div", { class: "chart" });
  box.append(el("div", { class: "chart-title" }, "gradient histogram over time"));
  let low = Infinity;
  let high = -Infinity;
  for (const h of histograms) for (const [l, r] of h.buckets) { low = Math.min(low, l); high = Math.max(high, r); }
  if (!Number.isFinite(low)) {
    box.append(el("div", { class: "notes" }, "no finite histogram bucket"));
    return box;
  }
  const w = Math.max(6, Math.min(24, Math.floor(420 / histograms.length)));
  const height = 120;
  const canvas = el("canvas", { class: "histogram-canvas", width: w * histograms.length, height });
  const ctx = canvas.getContext("2d");
  const span = high - low || 1;
  histograms.forEach((h, i) => {
    const most = Math.max(1, ...h.buckets.map((b) => b[2]));
    for (const [l, r, count] of h.buckets) {
      if (count <= 0) continue;
      const yTop = height - ((r - low) / span) * height;
      const yBottom = height - ((l - low) / span) * height;
      ctx.fillStyle = rampColor(1 - count / most);
      ctx.fillRect(i * w, yTop, w - 1, Math.max(yBottom - yTop, 1));
    }
  });
  box.append(canvas);
  const steps = histograms.map((h) => h.step);
  box.append(el("div", { class: "notes" }, `steps ${steps[0]} to ${steps[steps.length - 1]}; values ${fmt(low)} to ${fmt(high)}`));
  const dropped = histograms.reduce((n, h) => n + h.dropped, 0);
  if (dropped) box.append(el("div", { class: "notes" }, `${dropped} non-finite bucket(s) left out`));
  return box;
}

async function showDetail(target, run, variable) {
  target.replaceChildren(el("h4", {}, `Layer detail: ${variable}`), el("div", { class: "notes" }, "loading..."));
  let data;
  try {
    data = await getJson("layer", { run, variable });
  } catch (error) {
    target.replaceChildren(el("div", { class: "error" }, `Could not read ${variable}: ${error.message}`));
    return;
  }
  const parts = [el("h4", {}, `Layer detail: ${data.variable}`)];
  const charts = el("div", { class: "charts" });
  for (const [metric, series] of Object.entries(data.series)) {
    charts.append(lineChart(METRIC_NAMES[metric] || metric, series, true));
  }
  if (data.histograms.length) charts.append(histogramChart(data.histograms));
  else charts.append(el("div", { class: "notes" }, "no gradient histogram recorded"));
  const activations = Object.entries(data.activations);
  for (const [stat, series] of activations) charts.append(lineChart(`activation ${stat}`, series, false));
  if (!activations.length) charts.append(el("div", { class: "notes" }, "no activation statistics recorded for this layer"));
  parts.push(charts);
  target.replaceChildren(...parts);
}

async function showRun(section, run, metric) {
  section.replaceChildren(el("h3", { class: "run-name" }, run), el("div", { class: "notes" }, "loading..."));
  const detail = el("div", { class: "detail" });
  // Each part is drawn if it could be read; one that failed says so.
  const [heatRead, healthRead] = await Promise.allSettled([getJson("heatmap", { run, metric }), getJson("health", { run })]);
  const heat = heatRead.status === "fulfilled" ? heatRead.value : null;
  const health = healthRead.status === "fulfilled" ? healthRead.value : null;
  if (health && health.nothing_to_draw) {
    // Said once, plainly, instead of an empty heatmap and health line.
    section.replaceChildren(el("h3", { class: "run-name" }, run), el("div", { class: "nothing" }, health.nothing_to_draw));
    return;
  }
  const parts = [el("h3", { class: "run-name" }, run)];
  parts.push(health ? healthLine(health) : el("div", { class: "error health-error" }, `Could not read the health line: ${healthRead.reason.message}`));
  if (!health && heat && heat.sample) parts.push(el("div", { class: "sample" }, heat.sample));
  if (!heat) {
    parts.push(el("div", { class: "error heatmap-error" }, `Could not read the heatmap: ${heatRead.reason.message}`));
  } else if (!heat.rows.length || !heat.steps.length) {
    parts.push(el("div", { class: "notes no-heatmap" }, "no per-variable numbers in this run (no keras_gradmon/variables table, no per-variable scalars): no heatmap to draw"));
  } else {
    const map = drawHeatmap(heat, (variable) => showDetail(detail, run, variable));
    const incidents = health ? health.reports.flatMap((r) => r.incidents) : [];
    parts.push(
      el("div", { class: "notes" }, `${METRIC_NAMES[metric]}: ${heat.rows.length} variable(s) x ${heat.steps.length} step(s) (${heat.steps[0]} to ${heat.steps[heat.steps.length - 1]}), ${heat.nonfinite} non-finite, from ${heat.source}`),
      map.legend,
      map.node,
    );
    if (incidents.length) {
      // Under the heatmap, on its step axis.
      map.labels.append(el("div", { class: "strip-label" }, "alerts"));
      map.right.append(drawIncidentStrip(incidents, heat.steps, map.width));
    }
    if (!heat.metrics.includes(metric)) parts.push(el("div", { class: "notes" }, `this run records no ${METRIC_NAMES[metric]}`));
  }
  if (heat && heat.unreadable) parts.push(el("div", { class: "notes" }, `${heat.unreadable} unreadable table record(s) left out`));
  if (health) parts.push(incidentTable(health));
  parts.push(detail);
  section.replaceChildren(...parts);
}

export async function render() {
  const style = el("link", { rel: "stylesheet", href: "./style.css" });
  document.head.append(style);
  const root = el("div", { class: "gradmon" });
  document.body.append(root);
  const controls = el("div", { class: "controls" });
  const metricSelect = el("select", { class: "metric" });
  for (const [value, label] of Object.entries(METRIC_NAMES)) metricSelect.append(el("option", { value }, label));
  const runList = el("div", { class: "run-list" });
  const runsBox = el("div", { class: "runs" });
  controls.append(el("label", {}, "metric "), metricSelect, runList);
  root.append(controls, runsBox);
  let runs;
  try {
    runs = (await getJson("runs")).runs;
  } catch (error) {
    root.append(el("div", { class: "error" }, `Could not list the runs: ${error.message}`));
    return;
  }
  if (!runs.length) runsBox.append(el("div", { class: "notes" }, "no runs"));
  const refresh = () => {
    runsBox.replaceChildren();
    for (const box of runList.querySelectorAll("input")) {
      if (!box.checked) continue;
      const section = el("section", { class: "run" });
      runsBox.append(section);
      showRun(section, box.value, metricSelect.value);
    }
  };
  for (const run of runs) {
    const label = el("label", { class: "run-choice" });
    const box = el("input", { type: "checkbox", value: run });
    box.checked = true;
    box.addEventListener("change", refresh);
    label.append(box, el("span", {}, run));
    runList.append(label);
  }
  metricSelect.addEventListener("change", refresh);
  refresh();
}
