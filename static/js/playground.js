// The playground page. The prompt form posts with htmx (or plainly, without JavaScript),
// and the server swaps in the run's region (#run) with its state, stored tokens and
// heatmap figure as json_script. This module replays what is stored, then follows the
// run's server-sent events (playground-stream.js) until `done` or `error`, batching the
// DOM and Plotly updates to one per animation frame.
import { BranchPanel } from "./playground-branch.js";
import { Heatmap } from "./playground-heatmap.js";
import { FINISHED, followRun, STATUS_LABELS } from "./playground-stream.js";
import { shade, Stats, TokenText } from "./playground-tokens.js";

function data(id) {
  const node = document.getElementById(id);
  return node ? JSON.parse(node.textContent) : null;
}

class RunFollower {
  constructor(region, state, stored, figure) {
    this.region = region;
    this.state = state;
    this.loops = state.loops;
    this.events = [];
    this.positions = new Set();
    this.pending = [];
    this.frame = 0;
    this.statusNode = region.querySelector("#run-status");
    this.palette = figure.palette;
    this.text = new TokenText(
      region.querySelector("#tokens"),
      region.querySelector("#token-tip"),
      this.loops,
      this.palette,
    );
    this.heatmap = new Heatmap(region.querySelector("#heatmap"), figure);
    this.heatmap.onHover = (position) => this.text.show(position);
    this.heatmap.onClick = (position) => this.text.span(position)?.focus();
    this.heatmap.onUnhover = () => this.text.hide();
    const panel = region.querySelector("#branch-panel");
    if (panel) {
      const branch = new BranchPanel(panel);
      this.text.onChoose = (position) => branch.open(position, this.text.events);
    }
    this.stats = new Stats(region.querySelector("#stats"), this.loops);
    this.legend(region.querySelector("#depth-legend"));
    this.receive(stored);
    this.flush();
    if (state.stats) this.stats.show(state.stats);
    if (!FINISHED.has(state.status)) this.follow();
  }

  legend(node) {
    if (!node) return;
    for (const swatch of node.querySelectorAll(".tok-swatch")) swatch.remove();
    const anchor = node.querySelector(".legend-end");
    for (let loop = 1; loop <= this.loops; loop += 1) {
      const swatch = document.createElement("span");
      swatch.className = "tok-swatch";
      shade(swatch, this.palette, loop);
      swatch.textContent = String(loop);
      node.insertBefore(swatch, anchor);
    }
  }

  get lastPosition() {
    return this.events.length ? this.events[this.events.length - 1].position : -1;
  }

  follow() {
    this.source = followRun(
      this.state,
      this.lastPosition,
      {
        events: (events) => this.receive(events),
        status: (status, note) => this.status(status, note),
        end: (payload) => this.end(payload),
      },
      () => document.body.contains(this.region),
    );
  }

  receive(events) {
    for (const event of events) {
      if (this.positions.has(event.position)) continue; // a replay after a reconnect
      this.positions.add(event.position);
      if (event.position < this.lastPosition) this.unordered = true;
      this.pending.push(event);
      this.events.push(event);
    }
    if (this.unordered) this.events.sort((a, b) => a.position - b.position);
    this.unordered = false;
    if (!this.frame) this.frame = requestAnimationFrame(() => this.flush());
  }

  flush() {
    if (this.frame) cancelAnimationFrame(this.frame);
    this.frame = 0;
    if (!this.pending.length) return;
    const batch = this.pending.sort((a, b) => a.position - b.position);
    this.pending = [];
    this.text.add(batch);
    this.heatmap.add(batch);
    if (!this.state.stats) this.stats.live(this.events);
    this.stats.calibration(this.events);
  }

  status(status, note = "") {
    this.state.status = status;
    if (!this.statusNode) return;
    this.statusNode.textContent = (STATUS_LABELS[status] ?? status) + (note ? ` (${note})` : "");
    this.statusNode.className = `status status-${status}`;
  }

  end(payload) {
    this.source?.close();
    this.flush();
    this.status(payload.status);
    if (payload.stats && Object.keys(payload.stats).length) {
      this.state.stats = payload.stats;
      this.stats.show(payload.stats);
    }
    const error = this.region.querySelector("#run-error");
    if (payload.error && error) {
      error.textContent = payload.error;
      error.hidden = false;
    }
    this.region.querySelector(".stop-form")?.remove();
    this.region.dataset.finished = payload.status;
    if (this.region.dataset.task !== "text") this.explain();
    document.body.dispatchEvent(new CustomEvent("run-finished", { detail: payload }));
  }

  // A task model's run: the marks of its answers come from the server once it is done.
  async explain() {
    const response = await fetch(this.state.url, { headers: { "HX-Request": "true" } });
    if (!response.ok) return;
    const region = new DOMParser().parseFromString(await response.text(), "text/html");
    const tokens = region.getElementById("run-tokens");
    if (tokens) this.text.annotate(JSON.parse(tokens.textContent));
  }

  close() {
    this.source?.close();
    if (this.frame) cancelAnimationFrame(this.frame);
  }
}

let current = null;

function attach() {
  const region = document.getElementById("run");
  const state = data("run-state");
  if (!region || !state) return;
  if (current?.region === region) return; // already following this region
  current?.close();
  current = new RunFollower(region, state, data("run-tokens") ?? [], data("heatmap-figure"));
}

// The form's dependent controls: loops bounded by the model's T (2·T with extrapolate),
// q only for Q-exit (the KL threshold for convergence, ε for ACT), temperature/top-p/seed
// only when sampling.
function syncForm() {
  const form = document.getElementById("run-form");
  if (!form) return;
  const model = form.elements.model?.selectedOptions[0];
  const loops = form.elements.loops;
  if (model && loops) {
    const trained = Number(model.dataset.loops) || null;
    const most = form.elements.extrapolate?.checked ? Number(model.dataset.maxLoops) : trained;
    if (most) loops.max = String(most);
    if (trained && !loops.value) loops.value = String(trained);
  }
  const rule = form.elements.exit_rule?.value;
  form.querySelector(".field-q")?.toggleAttribute("hidden", rule !== "q-exit");
  form.querySelector(".field-kl_threshold")?.toggleAttribute("hidden", rule !== "convergence");
  form.querySelector(".field-act_eps")?.toggleAttribute("hidden", rule !== "act");
  const sample = form.querySelector("input[name=decoding]:checked")?.value === "sample";
  form.querySelector("#sampling")?.toggleAttribute("hidden", !sample);
}

document.addEventListener("change", (event) => {
  if (!event.target.closest?.("#run-form")) return;
  if (event.target.name === "model") {
    const loops = event.target.form.elements.loops;
    const trained = event.target.selectedOptions[0]?.dataset.loops;
    if (loops && trained) loops.value = trained;
  }
  syncForm();
});

// The htmx swap that brings a new run also brings its permalink into the address bar.
// The run region is left out of htmx's history snapshots (hx-history="false"): Back and
// Forward fetch the page again, and the module attaches to what came back.
for (const name of ["htmx:afterSettle", "htmx:historyRestore"]) {
  document.body.addEventListener(name, () => {
    attach();
    syncForm();
  });
}
// A submit shows its result: the new run's output, or the errors beside Run, is focused
// and scrolled into view (on a phone the output sits below the whole form).
document.body.addEventListener("htmx:afterSettle", (event) => {
  const form = event.detail.requestConfig?.elt;
  if (form?.id !== "run-form") return;
  if (event.detail.target?.id === "run") {
    // the run started: what an earlier submit got wrong no longer holds
    form.querySelectorAll("#form-errors, .field .error").forEach((node) => node.remove());
    form.querySelectorAll("[aria-invalid]").forEach((node) => node.removeAttribute("aria-invalid"));
  }
  const errors = document.getElementById("form-errors");
  const target = errors ?? document.getElementById("run-heading");
  if (!target) return;
  if (!errors) target.setAttribute("tabindex", "-1");
  target.focus({ preventScroll: true });
  target.scrollIntoView({ block: errors ? "center" : "start" }); // Run stays in view above errors
});

// Ctrl+Enter (⌘+Enter on a Mac) anywhere in the form runs it, as in a notebook.
document.addEventListener("keydown", (event) => {
  if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
  const form = event.target.closest?.("#run-form");
  if (!form) return;
  event.preventDefault();
  form.requestSubmit();
});

document.body.addEventListener("htmx:beforeRequest", (event) => {
  if (event.target.classList?.contains("stop-form")) {
    current?.status(current.state.status, "stopping…");
  }
});

attach();
syncForm();
