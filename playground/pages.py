"""What the playground's pages show of a run: its header, stored tokens, heatmap and stats.

The page module (``static/js/playground.js``) draws the same things live from the SSE
events; this module renders them on the server for a stored run (the permalink, a page
without JavaScript) and hands the module the run's state and stored tokens through
``json_script``. Number formats here and in ``playground-tokens.js`` match.
"""

from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse

from playground import charts
from playground.calibration import calibration_display, run_calibration, token_settling
from playground.checkpoints import default_model_name, model_get
from playground.explain import AnswerMark, answer_marks, token_reasons
from playground.forms import CompareForm
from playground.models import Run, RunToken
from playground.palette import Shade, loop_shades

STATUS_LABELS = {
    Run.Status.QUEUED: "Queued",
    Run.Status.RUNNING: "Running",
    Run.Status.DONE: "Done",
    Run.Status.CANCELLED: "Stopped",
    Run.Status.FAILED: "Failed",
}


@dataclass
class RunView:
    """A run as its page region shows it."""

    run: Run
    loops: int
    trained_loops: int | None
    tokens: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return str(self.run.id)

    @property
    def short_id(self) -> str:
        return self.id[:8]

    @property
    def model(self) -> str:
        return self.run.model

    @property
    def status(self) -> str:
        return self.run.status

    @property
    def error(self) -> str:
        return self.run.error

    @property
    def created_at(self):
        return self.run.created_at

    @property
    def finished(self) -> bool:
        return self.run.finished

    @property
    def status_label(self) -> str:
        return STATUS_LABELS.get(Run.Status(self.run.status), self.run.status)

    @property
    def url(self) -> str:
        return self.run.get_absolute_url()

    @property
    def stop_url(self) -> str:
        return reverse("playground:run-stop", kwargs={"run_id": self.run.id})

    @property
    def compare_url(self) -> str:
        return reverse("playground:run-compare-start", kwargs={"run_id": self.run.id})

    @property
    def full_depth_url(self) -> str:
        return reverse("playground:run-full-depth", kwargs={"run_id": self.run.id})

    @property
    def branch_url(self) -> str:
        return reverse("playground:run-branch", kwargs={"run_id": self.run.id})

    @property
    def settled(self) -> bool:
        """Every stored position has its settling loop (no full-depth sibling needed)."""
        return bool(self.tokens) and all(
            token_settling(event, self.loops) is not None for event in self.tokens
        )

    @property
    def tokens_url(self) -> str:
        return reverse("api:run-tokens", kwargs={"id": self.run.id})

    @property
    def tokens_csv_url(self) -> str:
        return f"{self.tokens_url}?format=csv"

    @property
    def params_summary(self) -> str:
        params = self.run.params
        parts = [f"{params.get('exit_rule', 'q-exit')}"]
        if params.get("exit_rule", "q-exit") == "q-exit":
            parts[0] += f" q = {params.get('q')}"
        parts.append(f"T = {self.loops}")
        parts.append(f"KV {params.get('kv_policy', 'best-available')}")
        temperature = params.get("temperature") or 0
        if temperature:
            parts.append(
                f"temperature {temperature}, top-p {params.get('top_p')}, seed {params.get('seed')}"
            )
        else:
            parts.append("greedy")
        parts.append(f"≤ {params.get('max_new_tokens')} new tokens")
        return ", ".join(parts)

    @property
    def state(self) -> dict[str, Any]:
        """What the page module needs to replay the run and follow it live."""
        return {
            "id": self.id,
            "status": self.run.status,
            "url": self.url,
            "events_url": self.run.get_events_url(),
            "api_url": reverse("api:run-detail", kwargs={"id": self.run.id}),
            "tokens_url": self.tokens_url,
            "stop_url": self.stop_url,
            "branch_url": self.branch_url,
            "loops": self.loops,
            "trained_loops": self.trained_loops,
            "stats": self.run.stats or None,
            "error": self.run.error,
        }


def run_view(*, run: Run, tokens: list[RunToken]) -> RunView:
    stats = run.stats or {}
    loops = run.params.get("loops") or stats.get("loops") or run.trained_loops
    if not loops:
        model = model_get(name=run.model)
        loops = model.loops if model and model.loops else 1
    loops = max([loops, *(token.loops_computed for token in tokens)])
    return RunView(run, loops, run.trained_loops, [token.data for token in tokens])


def run_context(view: RunView | None) -> dict[str, Any]:
    """The template context of the run region (an empty one before any run)."""
    if view is None:
        model = model_get(name=default_model_name())
        loops = model.loops if model and model.loops else 4
        return {
            "run": None,
            "figure": charts.heatmap_figure(loops=loops),
            "legend": depth_legend(loops),
            "stats": {},
        }
    model = model_get(name=view.run.model)
    task = model.task if model else "text"
    reasons = token_reasons(task=task, tokens=view.tokens)
    marks = answer_marks(task=task, tokens=view.tokens)
    return {
        "run": view,
        "figure": charts.heatmap_figure(
            loops=view.loops, trained_loops=view.trained_loops, tokens=view.tokens, reasons=reasons
        ),
        "legend": depth_legend(view.loops),
        "tokens": [
            token_cell(event, view.loops, why, mark)
            for event, why, mark in zip(view.tokens, reasons, marks, strict=True)
        ],
        # the stored events, with what the page explains beside them (a task's)
        "tokens_data": [
            event | {"why": why, "mark": mark.to_dict() if mark else None}
            for event, why, mark in zip(view.tokens, reasons, marks, strict=True)
        ],
        "task": task,
        "stats": stats_display(view),
        "compare_form": CompareForm.for_run(view.run),
    }


def depth_legend(loops: int) -> list[Shade]:
    return loop_shades(loops)


def token_cell(
    event: dict[str, Any], loops: int, why: str = "", mark: AnswerMark | None = None
) -> dict[str, Any]:
    """A token of the run's text: its exit loop's shade, why it is hard and whether it is
    the right answer (a task model's)."""
    shades = loop_shades(max(loops, event["exit_loop"]))
    return {
        "why": why,
        "mark": mark,
        "position": event["position"],
        "phase": event["phase"],
        "text": event["text"],
        "exit_loop": event["exit_loop"],
        "shade": shades[event["exit_loop"] - 1],
    }


def stats_display(view: RunView) -> dict[str, str]:
    """The stats panel: the run's final stats, or what its stored tokens show so far."""
    stats = view.run.stats or {}
    tokens = view.tokens
    if not stats and not tokens:
        return {}
    prompt = sum(1 for event in tokens if event["phase"] == "prompt")
    generated = len(tokens) - prompt
    prompt = stats.get("prompt_tokens", prompt)
    generated = stats.get("generated_tokens", generated)
    work = tokens[-1]["work"] if tokens else {}
    executed = stats.get("token_loops_executed", work.get("token_loops_executed"))
    full = stats.get("token_loops_full", work.get("token_loops_full"))
    flops_executed = stats.get("flops_executed", work.get("flops_executed"))
    flops_full = stats.get("flops_full", work.get("flops_full"))
    average = stats.get("average_exit_loop")
    if average is None and tokens:
        average = sum(event["exit_loop"] for event in tokens) / len(tokens)
    generated_average = stats.get("average_exit_loop_generated")
    display = {
        "tokens": f"{prompt} prompt + {generated} generated",
        "average_depth": (
            f"{average:.2f} of {view.loops} loops"
            + (f" (generated: {generated_average:.2f})" if generated_average else "")
            if average is not None
            else "—"
        ),
        "work": (
            f"{executed:,} of {full:,} token-loops ({100 * executed / full:.1f}%)"
            if executed is not None and full
            else "—"
        ),
        "flops": (
            f"{100 * flops_executed / flops_full:.1f}% of full depth"
            if flops_executed is not None and flops_full
            else "—"
        ),
        "tokens_per_s": _number(stats.get("tokens_per_s"), "{:.1f}"),
        "ttft": _milliseconds(stats.get("time_to_first_token_s")),
        "peak_kv": byte_size(stats.get("peak_kv_bytes", work.get("peak_kv_bytes"))),
        "calibration": calibration_display(run_calibration(tokens, view.loops)),
    }
    return display


def _number(value: float | None, template: str) -> str:
    return "—" if value is None else template.format(value)


def _milliseconds(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:,.0f} ms"


def byte_size(count: float | None) -> str:
    """A byte count as people read it: 3.0 KiB, 14.4 MiB."""
    if count is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count:.0f} B"
