// The run's text, token by token, each shaded by its exit loop, with a tooltip of λ, p,
// cumulative and top-k per loop; and the live stats panel. Everything a person or the
// model wrote goes in with textContent, never as HTML. Formats match playground/pages.py.

// A loop's shade, from the palette the heatmap figure carries (playground/palette.py).
export function shade(element, palette, loop) {
  const colour = palette[Math.min(loop, palette.length) - 1];
  if (!colour) return;
  element.style.backgroundColor = colour.background;
  element.style.color = colour.text;
}

function cell(tag, text, className) {
  const element = document.createElement(tag);
  element.textContent = text;
  if (className) element.className = className;
  return element;
}

function fixed(value, digits) {
  return value === null || value === undefined ? "—" : value.toFixed(digits);
}

export function shown(text) {
  return `“${JSON.stringify(text ?? "").slice(1, -1)}”`;
}

export class TokenText {
  constructor(container, tip, loops, palette) {
    this.container = container;
    this.tip = tip;
    this.loops = loops;
    this.palette = palette;
    this.events = new Map();
    this.selected = null;
    container.replaceChildren();
    container.addEventListener("pointerover", (event) => {
      const span = event.target.closest?.(".tok");
      if (span) this.show(Number(span.dataset.position));
    });
    container.addEventListener("pointerleave", () => {
      if (!container.contains(document.activeElement)) this.hide();
    });
    container.addEventListener("focusin", (event) => {
      const span = event.target.closest?.(".tok");
      if (span) this.show(Number(span.dataset.position));
    });
    container.addEventListener("focusout", (event) => {
      if (!container.contains(event.relatedTarget)) this.hide();
    });
    container.addEventListener("keydown", (event) => this.key(event));
    container.addEventListener("click", (event) => {
      const span = event.target.closest?.(".tok");
      if (span) this.onChoose?.(Number(span.dataset.position));
    });
  }

  add(events) {
    const fragment = document.createDocumentFragment();
    for (const event of events) {
      if (this.events.has(event.position)) continue;
      this.events.set(event.position, event);
      const span = cell("span", event.text, "tok");
      if (event.phase === "prompt") span.classList.add("prompt");
      if (!event.text) span.classList.add("empty");
      shade(span, this.palette, event.exit_loop);
      span.dataset.position = event.position;
      this.mark(span, event);
      span.id = `tok-${event.position}`;
      span.tabIndex = this.events.size === 1 ? 0 : -1;
      fragment.append(span);
    }
    this.container.append(fragment);
  }

  span(position) {
    return document.getElementById(`tok-${position}`);
  }

  // A task model's answer token: ✓ or ✗, the expected answer in its title.
  mark(span, event) {
    if (!event.mark) return;
    span.classList.add("answer", event.mark.right ? "right" : "wrong");
    span.dataset.mark = event.mark.right ? "✓" : "✗";
    span.title = event.mark.title;
  }

  // What the server explains about tokens that streamed in (their marks and reasons).
  annotate(events) {
    for (const event of events) {
      const known = this.events.get(event.position);
      const span = this.span(event.position);
      if (!known || !span) continue;
      known.why = event.why;
      known.mark = event.mark;
      this.mark(span, event);
    }
  }

  // Roving tabindex: one token is in the tab order; arrows move between tokens.
  key(event) {
    const spans = [...this.container.querySelectorAll(".tok")];
    const index = spans.indexOf(event.target);
    if (index < 0) return;
    const moves = { ArrowRight: index + 1, ArrowLeft: index - 1, Home: 0, End: spans.length - 1 };
    if (event.key === "Escape") {
      this.hide();
      return;
    }
    if (event.key === "Enter") {
      this.onChoose?.(Number(event.target.dataset.position));
      return;
    }
    if (!(event.key in moves)) return;
    event.preventDefault();
    const next = spans[Math.max(0, Math.min(spans.length - 1, moves[event.key]))];
    event.target.tabIndex = -1;
    next.tabIndex = 0;
    next.focus();
  }

  show(position) {
    const event = this.events.get(position);
    const span = this.span(position);
    if (!event || !span) return;
    this.selected?.classList.remove("selected");
    span.classList.add("selected");
    span.setAttribute("aria-describedby", this.tip.id);
    this.selected = span;
    this.tip.replaceChildren(...this.tipContent(event));
    this.tip.hidden = false;
    // Below the token, kept inside the text's box (the tooltip is laid out before this).
    const box = (this.tip.offsetParent ?? this.container).getBoundingClientRect();
    const at = span.getBoundingClientRect();
    const widest = Math.max(0, box.width - this.tip.offsetWidth);
    this.tip.style.left = `${Math.min(Math.max(0, at.left - box.left), widest)}px`;
    this.tip.style.top = `${at.bottom - box.top + 6}px`;
  }

  hide() {
    this.tip.hidden = true;
    this.selected?.classList.remove("selected");
    this.selected = null;
  }

  tipContent(event) {
    const head = cell(
      "p",
      `#${event.position} ${shown(event.text)} · ${event.phase} · exit loop ${event.exit_loop} of ${this.loops}` +
        (event.why ? ` · ${event.why}` : "") +
        (event.mark ? ` · ${event.mark.title}` : ""),
      "tip-head",
    );
    const table = document.createElement("table");
    const header = document.createElement("tr");
    for (const name of ["loop", "λ", "p", "cumulative", "top predictions"]) {
      header.append(cell("th", name));
    }
    table.createTHead().append(header);
    const body = table.createTBody();
    const computed = new Map(event.loops.map((row) => [row.loop, row]));
    for (let loop = 1; loop <= Math.max(this.loops, event.loops_computed); loop += 1) {
      const row = computed.get(loop);
      const tr = document.createElement("tr");
      tr.append(cell("th", String(loop)));
      if (row) {
        tr.append(cell("td", fixed(row.gate_lambda, 3)), cell("td", fixed(row.exit_p, 3)));
        tr.append(cell("td", fixed(row.cumulative, 3)));
        const top = row.top.slice(0, 5).map(([, text, p]) => `${shown(text)} ${p.toFixed(2)}`);
        tr.append(cell("td", top.join(", ") || "—"));
        if (loop === event.exit_loop) tr.className = "exit";
      } else {
        const skipped = cell("td", "not computed");
        skipped.colSpan = 4;
        tr.append(skipped);
        tr.className = "skipped";
      }
      body.append(tr);
    }
    return [head, table];
  }
}

function bytes(count) {
  if (count === null || count === undefined) return "—";
  for (const [unit, size] of [["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10]]) {
    if (count >= size) return `${(count / size).toFixed(1)} ${unit}`;
  }
  return `${count.toFixed(0)} B`;
}

function grouped(value) {
  return value.toLocaleString("en-US");
}

export class Stats {
  constructor(list, loops) {
    this.list = list;
    this.loops = loops;
  }

  set(name, text) {
    const dd = this.list.querySelector(`[data-stat="${name}"]`);
    if (dd) dd.textContent = text;
  }

  // What the tokens so far show (the final stats replace it at the end).
  live(events) {
    if (!events.length) return;
    const generated = events.filter((event) => event.phase === "generated");
    const last = events[events.length - 1];
    const average = events.reduce((sum, event) => sum + event.exit_loop, 0) / events.length;
    const perSecond =
      generated.length > 1
        ? (generated.length - 1) / (last.elapsed_s - generated[0].elapsed_s)
        : null;
    this.show({
      prompt_tokens: events.length - generated.length,
      generated_tokens: generated.length,
      average_exit_loop: average,
      ...last.work,
      tokens_per_s: Number.isFinite(perSecond) ? perSecond : null,
      time_to_first_token_s: generated.length ? generated[0].elapsed_s : null,
    });
  }

  // The exits against the settling loops the events carry (playground/calibration.py).
  calibration(events) {
    const pairs = events
      .filter((event) => event.settling_loop !== null && event.settling_loop !== undefined)
      .map((event) => [event.exit_loop, event.settling_loop]);
    if (!pairs.length) return;
    const after = pairs.filter(([exit, settle]) => exit > settle);
    const at = pairs.filter(([exit, settle]) => exit === settle).length;
    const wasted = after.reduce((sum, [exit, settle]) => sum + exit - settle, 0);
    const executed = pairs.reduce((sum, [exit]) => sum + exit, 0);
    const share = (count) => `${((100 * count) / pairs.length).toFixed(0)}%`;
    this.set(
      "calibration",
      `after ${share(after.length)} · at ${share(at)} · before ${share(pairs.length - after.length - at)} ` +
        `of ${pairs.length} positions; ${grouped(wasted)} loops past settling ` +
        `(${((100 * wasted) / executed).toFixed(1)}% of the executed loops)`,
    );
  }

  show(stats) {
    this.set("tokens", `${stats.prompt_tokens} prompt + ${stats.generated_tokens} generated`);
    const average = stats.average_exit_loop;
    const generatedAverage = stats.average_exit_loop_generated;
    this.set(
      "average_depth",
      average === null || average === undefined
        ? "—"
        : `${average.toFixed(2)} of ${this.loops} loops` +
            (generatedAverage ? ` (generated: ${generatedAverage.toFixed(2)})` : ""),
    );
    const { token_loops_executed: executed, token_loops_full: full } = stats;
    this.set(
      "work",
      executed !== undefined && full
        ? `${grouped(executed)} of ${grouped(full)} token-loops (${((100 * executed) / full).toFixed(1)}%)`
        : "—",
    );
    const { flops_executed: flops, flops_full: flopsFull } = stats;
    this.set(
      "flops",
      flops !== undefined && flopsFull ? `${((100 * flops) / flopsFull).toFixed(1)}% of full depth` : "—",
    );
    this.set("tokens_per_s", fixed(stats.tokens_per_s, 1));
    const ttft = stats.time_to_first_token_s;
    this.set("ttft", ttft === null || ttft === undefined ? "—" : `${grouped(Math.round(ttft * 1000))} ms`);
    this.set("peak_kv", bytes(stats.peak_kv_bytes));
  }
}
