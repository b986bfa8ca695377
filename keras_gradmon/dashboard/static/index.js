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

// No event handler is ever an attribute (`on...`): handlers are functions
// added with addEventListener, never text that could come from the logs.
function setAttributes(node, attrs) {
  for (const [k, v] of Object.entries(attrs)) {
    if (/^on/i.test(k)) throw new Error(`refused attribute ${k}`);
    node.setAttribute(k, String(v));
  }
}

function el(tag, attrs = {}, text = null) {
  const node = document.createElement(tag);
  setAttributes(node, attrs);
  if (text !== null) node.textContent = String(text);
  return node;
}

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  setAttributes(node, attrs);
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

function drawLegend(range, runs) {
  const legend = el("div", { class: "legend" });
  const bar = el("canvas", { width: 200, height: 12, class: "legend-bar" });
  const ctx = bar.getContext("2d");
  for (let x = 0; x < 200; x++) {
    ctx.fillStyle = rampColor(x / 199);
    ctx.fillRect(x, 0, 1, 12);
  }
  legend.append(el("span", {}, range ? fmt(10 ** range[0]) : "-"), bar);
  legend.append(el("span", {}, range ? fmt(10 ** range[1]) : "-"));
  legend.append(el("span", {}, runs > 1 ? `(log scale, one scale for the ${runs} runs shown)` : "(log scale)"));
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

// `range`: the log10 range of the colour scale, shared by the runs shown.
function drawHeatmap(data, onRow, range, runs) {
  const wrap = el("div", { class: "heatmap" });
  const labels = el("div", { class: "row-labels" });
  const width = cellWidth(data.steps.length);
  const canvas = el("canvas", {
    class: "heatmap-canvas",
    width: Math.max(data.steps.length * width, 1),
    height: Math.max(data.rows.length * CELL_H, 1),
  });
  const values = data.values.map((row) => row.map(asNumber));
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
  return { node: wrap, legend: drawLegend(range, runs), width, labels, right };
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
// (no outlier clipping), zeros drawn at the axis floor (a vanishing layer
// shows as such), non-finite points marked at the top; each said below.
function lineChart(title, series, log) {
  const w = 420;
  const h = 140;
  const pad = 40;
  const box = el("div", { class: "chart" });
  box.append(el("div", { class: "chart-title" }, title + (log ? " (log y)" : "")));
  const svg = svgEl("svg", { width: w, height: h, class: "chart-svg" });
  const points = series.steps.map((s, i) => [s, asNumber(series.values[i])]);
  const finite = points.filter(([, v]) => Number.isFinite(v));
  const usable = log ? finite.filter(([, v]) => v > 0) : finite;
  const floored = log ? finite.filter(([, v]) => v <= 0) : [];
  const bad = points.filter(([, v]) => !Number.isFinite(v));
  const steps = series.steps.length ? series.steps : [0];
  const x0 = Math.min(...steps);
  const x1 = Math.max(...steps);
  const ys = usable.map(([, v]) => (log ? Math.log10(v) : v));
  const y0 = ys.length ? Math.min(...ys) : 0;
  const y1 = ys.length ? Math.max(...ys) : 1;
  const sx = (s) => pad + ((s - x0) / (x1 - x0 || 1)) * (w - pad - 10);
  // With zeros on a log axis, the floor (h - 22) lies below the positive range.
  const bottom = floored.length ? h - 34 : h - 20;
  const sy = (y) => bottom - ((y - y0) / (y1 - y0 || 1)) * (bottom - 20);
  svg.append(svgEl("rect", { x: pad, y: 10, width: w - pad - 10, height: h - 30, class: "frame" }));
  // Zeros (and, on a log axis, negatives) sit on the floor, in the line.
  const at = (v) => (log ? (v > 0 ? sy(Math.log10(v)) : h - 22) : sy(v));
  if (finite.length) {
    const d = finite.map(([s, v], i) => `${i ? "L" : "M"}${sx(s).toFixed(1)},${at(v).toFixed(1)}`).join(" ");
    svg.append(svgEl("path", { d, class: "line" }));
  }
  for (const [s] of floored) svg.append(svgEl("rect", { x: sx(s) - 1, y: h - 25, width: 3, height: 6, class: "zero" }));
  for (const [s] of bad) svg.append(svgEl("rect", { x: sx(s) - 1, y: 10, width: 3, height: 6, class: "nonfinite" }));
  const label = (x, y, text, anchor) => {
    const t = svgEl("text", { x, y, "text-anchor": anchor, class: "axis" });
    t.textContent = text;
    svg.append(t);
  };
  label(pad - 3, sy(y1) + 4, fmt(log ? 10 ** y1 : y1), "end");
  label(pad - 3, sy(y0) + 4, fmt(log ? 10 ** y0 : y0), "end");
  if (floored.length) label(pad - 3, h - 18, "0", "end");
  label(pad, h - 4, String(x0), "start");
  label(w - 10, h - 4, String(x1), "end");
  box.append(svg);
  if (bad.length) box.append(el("div", { class: "notes" }, `${bad.length} non-finite value(s) (marked at the top)`));
  if (floored.length) box.append(el("div", { class: "notes zeros" }, `${floored.length} value(s) of 0 (drawn at the axis floor, marked)`));
  if (!finite.length) box.append(el("div", { class: "notes" }, "no finite value to plot"));
  return box;
}

// The `q` quantile of `values` (sorted copy, nearest rank).
function quantile(values, q) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.round(q * (sorted.length - 1))))];
}

// The gradient histogram over time: a column per step, buckets on a shared
// value axis, darker where more elements fell. The axis is robust: from the
// 10th percentile of the steps' lowest values to the 90th percentile of
// their highest, so that one exploding step does not squash the others into
// a pixel; buckets beyond it are drawn at its edge, their steps marked red
// and counted in the legend.
function histogramChart(histograms) {
  const box = el("div", { class: "chart" });
  box.append(el("div", { class: "chart-title" }, "gradient histogram over time"));
  const spans = histograms.map((h) => {
    const filled = h.buckets.filter((b) => b[2] > 0);
    return filled.length ? [Math.min(...filled.map((b) => b[0])), Math.max(...filled.map((b) => b[1]))] : null;
  });
  const known = spans.filter((x) => x !== null);
  if (!known.length) {
    box.append(el("div", { class: "notes" }, "no finite histogram bucket"));
    return box;
  }
  let low = quantile(known.map((x) => x[0]), 0.1);
  let high = quantile(known.map((x) => x[1]), 0.9);
  if (!(high > low)) [low, high] = [Math.min(...known.map((x) => x[0])), Math.max(...known.map((x) => x[1]))];
  const w = Math.max(6, Math.min(24, Math.floor(420 / histograms.length)));
  const height = 120;
  const canvas = el("canvas", { class: "histogram-canvas", width: w * histograms.length, height });
  const ctx = canvas.getContext("2d");
  const span = high - low || 1;
  const y = (v) => Math.min(height, Math.max(0, height - ((v - low) / span) * height));
  let beyond = 0;
  histograms.forEach((h, i) => {
    const most = Math.max(1, ...h.buckets.map((b) => b[2]));
    for (const [l, r, count] of h.buckets) {
      if (count <= 0) continue;
      ctx.fillStyle = rampColor(1 - count / most);
      ctx.fillRect(i * w, y(r), w - 1, Math.max(y(l) - y(r), 1));
    }
    const out = spans[i];
    if (out && (out[0] < low || out[1] > high)) {
      beyond += 1;
      ctx.fillStyle = "rgb(200, 30, 30)";
      if (out[1] > high) ctx.fillRect(i * w, 0, w - 1, 3);
      if (out[0] < low) ctx.fillRect(i * w, height - 3, w - 1, 3);
    }
  });
  box.append(canvas);
  const steps = histograms.map((h) => h.step);
  const all = [Math.min(...known.map((x) => x[0])), Math.max(...known.map((x) => x[1]))];
  box.append(el("div", { class: "notes" }, `steps ${steps[0]} to ${steps[steps.length - 1]}; value axis ${fmt(low)} to ${fmt(high)} (10th percentile of the steps' lowest values to the 90th of their highest)`));
  if (beyond) box.append(el("div", { class: "notes beyond" }, `${beyond} step(s) reach beyond the axis (values ${fmt(all[0])} to ${fmt(all[1])}): drawn at its edge, marked red`));
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

// Both parts of a run, each read on its own: one that fails is said, the
// other is drawn.
function readRun(run, metric) {
  return Promise.allSettled([getJson("heatmap", { run, metric }), getJson("health", { run })]);
}

function showRun(section, run, metric, [heatRead, healthRead], range, runs) {
  const detail = el("div", { class: "detail" });
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
    const map = drawHeatmap(heat, (variable) => showDetail(detail, run, variable), range, runs);
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
  const scaleBox = el("input", { type: "checkbox", class: "shared-scale" });
  scaleBox.checked = true;
  const scaleLabel = el("label", { class: "scale-choice" });
  scaleLabel.append(scaleBox, el("span", {}, "one colour scale for all runs"));
  controls.append(el("label", {}, "metric "), metricSelect, scaleLabel, runList);
  root.append(controls, runsBox);
  let runs;
  try {
    runs = (await getJson("runs")).runs;
  } catch (error) {
    root.append(el("div", { class: "error" }, `Could not list the runs: ${error.message}`));
    return;
  }
  if (!runs.length) runsBox.append(el("div", { class: "notes" }, "no runs"));
  let shown = 0;
  const refresh = async () => {
    const generation = ++shown;
    const metric = metricSelect.value;
    const chosen = [...runList.querySelectorAll("input")].filter((box) => box.checked).map((box) => box.value);
    const sections = chosen.map((run) => el("section", { class: "run" }, null));
    sections.forEach((section, i) => section.append(el("h3", { class: "run-name" }, chosen[i]), el("div", { class: "notes" }, "loading...")));
    runsBox.replaceChildren(...sections);
    const reads = await Promise.all(chosen.map((run) => readRun(run, metric)));
    if (generation !== shown) return; // a newer choice is being drawn
    // One colour scale for every run shown, so that runs compare; or, for
    // the structure inside each run, a scale of its own.
    const heats = reads.filter(([h]) => h.status === "fulfilled").map(([h]) => h.value);
    const shared = logRange(heats.flatMap((h) => h.values.flat().map(asNumber)));
    chosen.forEach((run, i) => {
      const [heat] = reads[i];
      const own = heat.status === "fulfilled" ? logRange(heat.value.values.flat().map(asNumber)) : shared;
      const range = scaleBox.checked ? shared : own;
      showRun(sections[i], run, metric, reads[i], range, scaleBox.checked ? heats.length : 1);
    });
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
  scaleBox.addEventListener("change", refresh);
  refresh();
}
