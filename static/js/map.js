// Draws the map of mentions from the figure the page embeds (json_script); a click on a
// work opens its page.
const CONFIG = { displayModeBar: false, responsive: true };

function draw() {
  const chart = document.getElementById("atlas-map");
  const source = document.getElementById("map-figure");
  if (!chart || !source || !window.Plotly) return;
  const figure = JSON.parse(source.textContent);
  window.Plotly.react(chart, figure.data, figure.layout, CONFIG).then(() => {
    chart.dataset.drawn = "true";
    chart.on("plotly_click", (event) => {
      const target = event.points[0]?.customdata;
      if (target) window.location.assign(target);
    });
  });
}

if (document.readyState === "complete") draw();
else window.addEventListener("load", draw);
