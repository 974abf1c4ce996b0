// The Frontier view: one Plotly chart per model of accuracy against the executed fraction
// of full-depth work, one trace per exit rule (best-available KV shown, the other KV
// policies one click away in the legend), every point's settings in its hover; a click on
// a point opens the playground with its setting ("try this setting", as in the table).
// The points come from the page (json_script); nothing is computed here.

const SYMBOLS = { "q-exit": "circle", convergence: "diamond", fixed: "square", ponder: "star", act: "triangle-up" };

function traces(points, metric) {
  const groups = new Map();
  for (const p of points) {
    const key = `${p.rule} · ${p.policy}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(p);
  }
  return [...groups].map(([name, group]) => {
    group.sort((a, b) => a.executed_fraction - b.executed_fraction);
    return {
      name,
      type: "scatter",
      mode: "lines+markers",
      x: group.map((p) => p.executed_fraction),
      y: group.map((p) => p.accuracy),
      marker: { symbol: SYMBOLS[group[0].rule] || "circle", size: 8 },
      visible: group[0].policy === "best-available" ? true : "legendonly",
      text: group.map(
        (p) =>
          `${p.rule} ${p.setting}, KV ${p.policy}<br>${metric} ${p.accuracy}, loss ${p.loss}` +
          `<br>avg exit ${p.avg_exit}, executed ${p.executed_fraction}` +
          `<br>prefill ${p.latency_ms_per_token} ms/token (${p.latency_ratio}× full depth)` +
          (p.decode_ms_per_token === undefined
            ? ""
            : `<br>decode ${p.decode_ms_per_token} ms/token (${p.decode_ratio}× full depth)`) +
          `<br>peak KV ${p.peak_kv_bytes} bytes` +
          (p.try_url ? "<br>click to try this setting" : ""),
      ),
      customdata: group.map((p) => p.try_url ?? null),
      hovertemplate: "%{text}<extra></extra>",
    };
  });
}

function draw(chart) {
  const data = document.getElementById(chart.dataset.frontier);
  if (!data || !window.Plotly) return;
  const metric = chart.dataset.metric;
  window.Plotly.newPlot(
    chart,
    traces(JSON.parse(data.textContent), metric),
    {
      height: 420,
      margin: { t: 20, r: 10, b: 50, l: 60 },
      xaxis: { title: { text: "executed fraction of full-depth token-loops" }, range: [0, 1.05] },
      yaxis: { title: { text: metric } },
      legend: { orientation: "h", y: -0.2 },
    },
    { displaylogo: false, responsive: true },
  ).then(() => {
    chart.on("plotly_click", (event) => {
      const url = event.points?.[0]?.customdata;
      if (url) window.location.assign(url);
    });
  });
}

function drawAll() {
  document.querySelectorAll("[data-frontier]").forEach(draw);
}

if (window.Plotly) drawAll();
else window.addEventListener("load", drawAll);
