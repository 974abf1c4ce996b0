// Branching a run at a token: a click on a generated token (or Enter on it) opens the
// branch panel with the tokens it was drawn from, the top-k of the previous position's
// exit loop (a position's loops predict the next token). Each is a submit button of the
// panel's form (playground/views.py run_branch_start), which starts the sibling and opens
// the compare view. Texts go in with textContent, never as HTML.
import { shown } from "./playground-tokens.js";

export class BranchPanel {
  constructor(form) {
    this.form = form;
    this.head = form.querySelector("#branch-head");
    this.choices = form.querySelector("#branch-choices");
  }

  // The panel for the token at `position` (events: position → event); closed for a
  // prompt token or one with no stored alternatives.
  open(position, events) {
    const event = events.get(position);
    const previous = events.get(position - 1);
    const row = previous?.loops.find((entry) => entry.loop === previous.exit_loop);
    if (!event || event.phase !== "generated" || !row?.top.length) {
      this.form.hidden = true;
      return;
    }
    this.form.elements.position.value = String(position);
    this.head.textContent =
      `Branch at #${position}: ${shown(event.text)} was drawn from position ${position - 1}’s ` +
      `exit loop ${previous.exit_loop}. Take instead:`;
    const buttons = row.top
      .filter(([id]) => id !== event.token_id)
      .map(([id, text, p]) => {
        const button = document.createElement("button");
        button.type = "submit";
        button.name = "token_id";
        button.value = String(id);
        button.className = "branch-choice";
        button.textContent = `${shown(text)} ${p.toFixed(2)}`;
        return button;
      });
    this.choices.replaceChildren(...buttons);
    this.form.hidden = false;
  }
}
