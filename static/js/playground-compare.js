// The compare page. Each run's heatmap (playground-heatmap.js) replays what is stored and
// fills in from the run's own event stream (playground-stream.js) while it runs, all on
// one token axis. The comparison under them (exit loops per position, aligned text,
// stats) is computed on the server (playground/comparison.py) and fetched again at most
// once a second while a run streams and once more as each ends, so its rules live in one
// place; the page never recomputes them.
import { Heatmap } from "./playground-heatmap.js";
import { FINISHED, followRun, STATUS_LABELS } from "./playground-stream.js";

const REFRESH_MS = 1000;

function data(id) {
  const node = document.getElementById(id);
  return node ? JSON.parse(node.textContent) : null;
}

class ComparedRun {
  constructor(section, page) {
    const label = section.dataset.label;
    this.page = page;
    this.state = data(`run-state-${label}`);
    this.statusNode = section.querySelector("[data-status]");
    this.heatmap = new Heatmap(section.querySelector("[data-heatmap]"), data(`heatmap-figure-${label}`));
    this.pending = [];
    if (FINISHED.has(this.state.status)) return;
    const seen = this.heatmap.figure.data[0].x;
    this.source = followRun(this.state, seen.length ? Math.max(...seen) : -1, {
      events: (events) => {
        this.pending.push(...events);
        page.changed();
      },
      status: (status, note) => this.status(status, note),
      end: (payload) => {
        this.source?.close();
        this.status(payload.status);
        page.changed(true);
      },
    });
  }

  get width() {
    const positions = [...this.heatmap.figure.data[0].x, ...this.pending.map((event) => event.position)];
    return positions.length ? Math.max(...positions) + 1 : 0;
  }

  status(status, note = "") {
    this.state.status = status;
    this.statusNode.textContent = (STATUS_LABELS[status] ?? status) + (note ? ` (${note})` : "");
    this.statusNode.className = `status status-${status}`;
  }
}

class ComparePage {
  constructor(root) {
    this.root = root;
    this.frame = 0;
    this.timer = 0;
    this.runs = [...root.querySelectorAll(".compare-run")].map((section) => new ComparedRun(section, this));
    this.width = Math.max(0, ...this.runs.map((run) => run.width));
  }

  // New events or an end: draw the heatmaps next frame, refresh the comparison soon.
  changed(now = false) {
    if (!this.frame) this.frame = requestAnimationFrame(() => this.draw());
    if (now) {
      clearTimeout(this.timer);
      this.timer = setTimeout(() => this.refresh(), 0);
    } else if (!this.timer) {
      this.timer = setTimeout(() => this.refresh(), REFRESH_MS);
    }
  }

  draw() {
    this.frame = 0;
    const width = Math.max(this.width, ...this.runs.map((run) => run.width));
    const widened = width > this.width;
    this.width = width;
    for (const run of this.runs) {
      const batch = run.pending.sort((a, b) => a.position - b.position);
      run.pending = [];
      run.heatmap.figure.layout.xaxis.range = [-0.5, width - 0.5];
      if (batch.length) run.heatmap.add(batch);
      else if (widened) run.heatmap.draw();
    }
  }

  async refresh() {
    this.timer = 0;
    const url = this.root.dataset.refreshUrl;
    const response = await fetch(url, { headers: { "HX-Request": "true" } });
    if (!response.ok) return;
    const holder = document.createElement("div");
    holder.innerHTML = await response.text();
    const fresh = holder.querySelector("#comparison");
    const current = document.getElementById("comparison");
    if (fresh && current) current.replaceWith(fresh);
    const streaming = this.runs.some((run) => !FINISHED.has(run.state.status));
    if (fresh?.dataset.live === "true" && !streaming && !this.timer) {
      this.timer = setTimeout(() => this.refresh(), REFRESH_MS); // the last rows are landing
    }
  }
}

const root = document.getElementById("run-compare");
if (root) new ComparePage(root);
