// The exit heatmap: the figure playground/charts.py builds (stored columns included), one
// more column per streamed token, redrawn with Plotly.react at most once per animation
// frame however fast tokens arrive. Column layout and hover text match charts.py.
const CONFIG = { displayModeBar: false, responsive: true };
const TOP_K_SHOWN = 5;
const LABELLED_COLUMNS = 40; // as charts.LABELLED_COLUMNS: up to this many, x shows token text

// Plotly reads a subset of HTML in hover text: token text is escaped, never markup.
export function quoted(text) {
  const json = JSON.stringify(text ?? "").slice(1, -1);
  return `“${json}”`.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

function tickText(text) {
  const shown = (text ?? "").replaceAll(" ", "␣").replaceAll("\n", "⏎").replaceAll("\t", "⇥") || "·";
  const short = [...shown].length > 6 ? `${[...shown].slice(0, 5).join("")}…` : shown;
  return short.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;");
}

function number(value) {
  return value === null || value === undefined ? "—" : value.toFixed(3);
}

function loopText(label, row, exitLoop) {
  const top = row.top.slice(0, TOP_K_SHOWN).map(([, text, p]) => `${quoted(text)} ${p.toFixed(2)}`);
  const marker = row.loop === exitLoop ? " — exits here" : "";
  return (
    `${label}<br>loop ${row.loop}${marker}<br>` +
    `λ ${number(row.gate_lambda)} · p ${number(row.exit_p)} · cumulative ${number(row.cumulative)}` +
    `<br>top: ${top.join(", ") || "—"}`
  );
}

export class Heatmap {
  constructor(element, figure) {
    this.element = element;
    this.figure = figure;
    this.loops = figure.data[0].y.length;
    this.seen = new Set(figure.data[0].x);
    this.hasBoundary = figure.layout.shapes.some((shape) => shape.name === "prompt-boundary");
    this.revision = 0;
    this.draw();
  }

  // Append the columns of new events (in position order), then redraw once.
  add(events) {
    let added = false;
    for (const event of events) {
      if (this.seen.has(event.position)) continue;
      this.seen.add(event.position);
      this.column(event);
      added = true;
    }
    if (added) {
      this.ticks();
      this.draw();
    }
  }

  column(event) {
    const [computedCells, skipped, exits, , settling] = this.figure.data;
    const computed = new Map(event.loops.map((row) => [row.loop, row]));
    const label = `#${event.position} ${quoted(event.text)} (${event.phase})`;
    computedCells.x.push(event.position);
    skipped.x.push(event.position);
    for (let loop = 1; loop <= this.loops; loop += 1) {
      const row = computed.get(loop);
      const i = loop - 1;
      if (row) {
        computedCells.z[i].push(event.exit_loop);
        computedCells.hovertext[i].push(loopText(label, row, event.exit_loop));
        skipped.z[i].push(null);
        skipped.hovertext[i].push("");
      } else {
        computedCells.z[i].push(null);
        computedCells.hovertext[i].push("");
        skipped.z[i].push(1);
        skipped.hovertext[i].push(
          `${label}<br>loop ${loop}: not computed (exited at loop ${event.exit_loop})`,
        );
      }
    }
    exits.x.push(event.position);
    exits.y.push(event.exit_loop);
    exits.hovertext.push(`${label}: exits at loop ${event.exit_loop}`);
    exits.customdata.push(tickText(event.text));
    const settle = event.settling_loop;
    if (settling && settle !== null && settle !== undefined) {
      settling.showlegend = true;
      settling.x.push(event.position);
      settling.y.push(settle);
      settling.hovertext.push(`${label}: its top-1 settles at loop ${settle} (exit at ${event.exit_loop})`);
    }
    if (event.phase === "generated" && !this.hasBoundary) {
      this.hasBoundary = true;
      this.figure.layout.shapes.push({
        name: "prompt-boundary",
        type: "line",
        yref: "paper",
        y0: 0,
        y1: 1,
        x0: event.position - 0.5,
        x1: event.position - 0.5,
        line: { color: "#1b1f24", dash: "dash", width: 1 },
      });
      this.figure.layout.annotations.push({
        name: "prompt-boundary",
        x: event.position - 0.5,
        yref: "paper",
        y: 1,
        yanchor: "bottom",
        text: "prompt ◂ ▸ generated",
        showarrow: false,
        font: { size: 11, color: "#1b1f24" },
      });
    }
  }

  // Token text on the x axis while the run is short enough to read it.
  ticks() {
    const [computedCells, , exits] = this.figure.data;
    const axis = this.figure.layout.xaxis;
    if (computedCells.x.length <= LABELLED_COLUMNS) {
      Object.assign(axis, { tickmode: "array", tickvals: computedCells.x, ticktext: exits.customdata });
    } else {
      for (const key of ["tickmode", "tickvals", "ticktext"]) delete axis[key];
    }
  }

  draw() {
    if (!window.Plotly) return;
    this.revision += 1;
    this.figure.layout.datarevision = this.revision;
    window.Plotly.react(this.element, this.figure.data, this.figure.layout, CONFIG).then(() => {
      if (this.element.dataset.wired) return;
      this.element.dataset.wired = "true";
      const position = (event) => event.points?.[0]?.x;
      this.element.on("plotly_hover", (event) => this.onHover?.(position(event)));
      this.element.on("plotly_unhover", () => this.onUnhover?.());
      this.element.on("plotly_click", (event) => this.onClick?.(position(event)));
    });
  }

  columns() {
    return this.figure.data[0].x.length;
  }
}
