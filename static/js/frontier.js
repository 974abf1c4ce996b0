// The Frontier view: per model, accuracy against executed work (one trace per exit rule
// and KV policy, best-available shown and the others one click away in the legend, with
// the full-depth reference and the Pareto envelope), and accuracy against decoding
// latency relative to full depth (median of the repeats, bars for their range). A click
// on a point opens the playground with its setting, as "try this setting" does in the
// table; the table's headers sort it. The points come from the page (json_script).

const SYMBOLS = { "q-exit": "circle", convergence: "diamond", fixed: "square", ponder: "star", act: "triangle-up" };
const REFERENCE = { color: "#57606a", dash: "dash", width: 1 };

function hover(p, metric) {
  return (
    `${p.label}<br>${metric} ${p.accuracy} (Δ ${p.delta ?? "—"} vs full depth), loss ${p.loss}` +
    `<br>avg exit ${p.avg_exit}, executed ${p.executed_fraction}` +
    `<br>prefill ${p.prefill} full depth<br>decode ${p.decode} full depth` +
    `<br>peak KV ${p.peak_kv}` +
    (p.try_url ? "<br>click to try this setting" : "")
  );
}

function ruleTraces(points, metric, view) {
  const groups = new Map();
  for (const p of points) {
    const key = `${p.rule} · ${p.policy}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(p);
  }
  const x = view === "latency" ? (p) => p.decode_ratio : (p) => p.executed_fraction;
  return [...groups].map(([name, group]) => {
    group.sort((a, b) => x(a) - x(b));
    const trace = {
      name,
      type: "scatter",
      mode: view === "latency" ? "markers" : "lines+markers",
      x: group.map(x),
      y: group.map((p) => p.accuracy),
      marker: { symbol: SYMBOLS[group[0].rule] || "circle", size: 8 },
      visible: group[0].policy === "best-available" ? true : "legendonly",
      text: group.map((p) => hover(p, metric)),
      customdata: group.map((p) => p.try_url ?? null),
      hovertemplate: "%{text}<extra></extra>",
    };
    if (view === "latency" && group.every((p) => p.decode_ratio_high !== undefined)) {
      trace.error_x = {
        type: "data",
        symmetric: false,
        array: group.map((p) => p.decode_ratio_high - p.decode_ratio),
        arrayminus: group.map((p) => p.decode_ratio - p.decode_ratio_low),
        thickness: 1,
        width: 3,
      };
    }
    return trace;
  });
}

function envelope(points) {
  const front = points.filter((p) => p.pareto).sort((a, b) => a.executed_fraction - b.executed_fraction);
  return {
    name: "Pareto envelope",
    type: "scatter",
    mode: "lines",
    line: { shape: "hv", color: "#8c959f", width: 6 },
    opacity: 0.45,
    x: front.map((p) => p.executed_fraction),
    y: front.map((p) => p.accuracy),
    hoverinfo: "skip",
  };
}

function layout(points, metric, view) {
  const full = points.find((p) => p.full_depth);
  const shapes = [];
  const annotations = [];
  if (full) {
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: full.accuracy, y1: full.accuracy, line: REFERENCE });
    annotations.push({
      xref: "paper", x: 0, y: full.accuracy, xanchor: "left", yanchor: "bottom",
      text: `full depth: ${full.accuracy}`, showarrow: false, font: { size: 11, color: "#57606a" },
    });
  }
  if (view === "latency") {
    shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: 1, x1: 1, line: REFERENCE });
  }
  return {
    height: 480,
    margin: { t: 20, r: 10, b: 40, l: 60 },
    xaxis:
      view === "latency"
        ? { title: { text: "decode time per token ÷ full depth" } }
        : { title: { text: "executed fraction of full-depth token-loops" }, range: [0, 1.05] },
    yaxis: { title: { text: metric } },
    legend: { orientation: "h", y: -0.24, yanchor: "top" },
    shapes,
    annotations,
  };
}

function draw(chart) {
  const data = document.getElementById(chart.dataset.frontier);
  if (!data || !window.Plotly) return;
  const metric = chart.dataset.metric;
  const view = chart.dataset.view;
  const points = JSON.parse(data.textContent);
  const traces = ruleTraces(points, metric, view);
  if (view === "work") traces.unshift(envelope(points));
  window.Plotly.newPlot(chart, traces, layout(points, metric, view), {
    displaylogo: false,
    responsive: true,
  }).then(() => {
    chart.on("plotly_click", (event) => {
      const url = event.points?.[0]?.customdata;
      if (url) window.location.assign(url);
    });
  });
}

// Sorting: each header becomes a button; a second click reverses the order.
function sortable(table) {
  const headers = [...table.tHead.rows[0].cells];
  headers.forEach((th, column) => {
    if (!th.dataset.sort) return;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sort";
    button.append(...th.childNodes);
    th.append(button);
    button.addEventListener("click", () => {
      const ascending = th.getAttribute("aria-sort") !== "ascending";
      headers.forEach((other) => other.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      const value = (row) => row.cells[column].dataset.value ?? "";
      const key = th.dataset.sort === "number" ? (row) => Number(value(row) || Infinity) : value;
      const rows = [...table.tBodies[0].rows].sort((a, b) => {
        const [x, y] = [key(a), key(b)];
        return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
      });
      table.tBodies[0].append(...rows);
    });
  });
}

// Gate calibration: per rule setting, the shares of positions exiting after / at / before
// their settling loop, stacked to 1 (the rows come from the page, as the points do).
const SHARES = [
  ["after_share", "after settling (loops run for nothing)", "#d4a72c"],
  ["at_share", "at the settling loop (the oracle)", "#2da44e"],
  ["before_share", "before settling (may change the prediction)", "#cf222e"],
];

function drawCalibration(chart) {
  const data = document.getElementById(chart.dataset.calibration);
  if (!data || !window.Plotly) return;
  const rows = JSON.parse(data.textContent);
  const labels = rows.map((r) => r.label + (r.default ? " ★" : ""));
  const traces = SHARES.map(([key, name, color]) => ({
    name,
    type: "bar",
    orientation: "h",
    y: labels,
    x: rows.map((r) => r[key]),
    marker: { color },
    text: rows.map(
      (r) =>
        `${r.label}: ${(100 * r[key]).toFixed(1)}%<br>wasted work ${(100 * r.wasted_share).toFixed(1)}%` +
        `<br>early exits that changed the prediction: ${r.before_changed} of ${r.before}`,
    ),
    textposition: "none",
    hovertemplate: "%{text}<extra></extra>",
  }));
  window.Plotly.newPlot(
    chart,
    traces,
    {
      barmode: "stack",
      height: 120 + 22 * rows.length,
      margin: { t: 10, r: 10, b: 40, l: 120 },
      xaxis: { title: { text: "share of scored positions" }, range: [0, 1] },
      yaxis: { autorange: "reversed", automargin: true },
      legend: { orientation: "h", y: -0.12, yanchor: "top" },
    },
    { displaylogo: false, responsive: true },
  );
}

function drawAll() {
  document.querySelectorAll("[data-frontier]").forEach(draw);
  document.querySelectorAll("[data-calibration]").forEach(drawCalibration);
}

document.querySelectorAll("table[data-sortable]").forEach(sortable);
if (window.Plotly) drawAll();
else window.addEventListener("load", drawAll);
