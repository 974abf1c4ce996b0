// Draws the Explore timeline from the figure the page embeds (json_script), and again
// after every htmx swap of the results; a click on a point follows its link.
const CONFIG = { displayModeBar: false, responsive: true };

function draw() {
  const chart = document.getElementById("timeline");
  const source = document.getElementById("timeline-figure");
  if (!chart || !source || !window.Plotly) return;
  const figure = JSON.parse(source.textContent);
  window.Plotly.react(chart, figure.data, figure.layout, CONFIG).then(() => {
    if (chart.dataset.linked) return;
    chart.dataset.linked = "true";
    chart.on("plotly_click", (event) => {
      const target = event.points[0]?.customdata;
      if (target) window.location.assign(target);
    });
  });
}

draw();
document.body.addEventListener("htmx:afterSettle", draw);
