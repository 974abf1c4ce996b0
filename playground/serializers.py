"""The runs API's shapes: what a submit accepts, what a run looks like as JSON, and a
comparison of runs as JSON and CSV rows."""

import typing
from collections.abc import Iterator
from dataclasses import MISSING, fields
from typing import Any

from rest_framework import serializers

from kernels.params import BOUNDS, CHOICES, Bound, RunParams
from playground.comparison import Compared, Comparison
from playground.models import Run
from playground.services import MAX_PROMPT_CHARS


def run_param_fields() -> dict[str, serializers.Field]:
    """One DRF field per ``RunParams`` field: its type, default, choices and bounds (so the
    schema states them, and a value out of bounds is a 400 naming the bound)."""
    hints = typing.get_type_hints(RunParams)
    built: dict[str, serializers.Field] = {}
    for field in fields(RunParams):
        default = field.default if field.default is not MISSING else None
        optional = default is None
        options: dict[str, typing.Any] = (
            {"required": False, "allow_null": True} if optional else {"default": default}
        )
        if field.name in CHOICES:
            built[field.name] = serializers.ChoiceField(CHOICES[field.name], **options)
            continue
        bound = BOUNDS[field.name]
        hint = hints[field.name]
        integer = int in (hint, *typing.get_args(hint))
        # min/max cannot say all (an open low end, "0 or at least m"): a validator checks
        # the rest, and the schema's description states the whole bound
        validators = [_within(bound)]
        options["help_text"] = bound.describe().capitalize() + "."
        if integer:  # an integer field's bounds are whole numbers
            built[field.name] = serializers.IntegerField(
                min_value=int(bound.low),
                max_value=int(bound.high),
                validators=validators,
                **options,
            )
        else:
            built[field.name] = serializers.FloatField(
                min_value=bound.low, max_value=bound.high, validators=validators, **options
            )
    return built


def _within(bound: Bound) -> typing.Callable[[float], None]:
    """Refuses a value that min/max let through and ``bound`` does not."""

    def check(value: float) -> None:
        if bound.low <= value <= bound.high and not bound.contains(value):
            raise serializers.ValidationError(bound.describe())

    return check


class RunCreateSerializer(serializers.Serializer):
    """``POST /api/v1/runs/``: the prompt, the model, ``extrapolate`` and every
    ``RunParams`` field with its fixed bounds; the rules that depend on the model (loops
    up to T, or 2·T with ``extrapolate``; prompt length in tokens) are checked by
    ``services.run_params_clean``."""

    prompt = serializers.CharField(max_length=MAX_PROMPT_CHARS, trim_whitespace=False)
    model = serializers.CharField(required=False, max_length=100)
    extrapolate = serializers.BooleanField(default=False)

    def get_fields(self) -> dict[str, serializers.Field]:
        return super().get_fields() | run_param_fields()


class RunBranchSerializer(serializers.Serializer):
    """A branch of a run (``services.run_branch_submit``): which generated position takes
    which other token."""

    position = serializers.IntegerField(min_value=0, help_text="a generated position")
    token_id = serializers.IntegerField(
        min_value=0, help_text="the token to put there instead (an id of the model's)"
    )


class RunSerializer(serializers.ModelSerializer):
    url = serializers.CharField(source="get_absolute_url", read_only=True)
    api_url = serializers.SerializerMethodField()
    events_url = serializers.CharField(source="get_events_url", read_only=True)
    tokens_url = serializers.SerializerMethodField()
    cancel_url = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields: tuple[str, ...] = (
            "id",
            "url",
            "api_url",
            "events_url",
            "tokens_url",
            "cancel_url",
            "status",
            "prompt",
            "model",
            "trained_loops",
            "params",
            "stats",
            "error",
            "cancel_requested",
            "created_at",
            "started_at",
            "finished_at",
        )
        read_only_fields: tuple[str, ...] = fields

    def get_api_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.id}/"

    def get_tokens_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.id}/tokens/"

    def get_cancel_url(self, run: Run) -> str:
        return f"/api/v1/runs/{run.id}/cancel/"


class RunCreatedSerializer(RunSerializer):
    """The 201 of a submit: the run and the token that stops it, shown this once."""

    cancel_token = serializers.CharField(
        read_only=True,
        help_text="Send it as X-Cancel-Token to POST cancel_url; only its hash is stored.",
    )

    class Meta(RunSerializer.Meta):
        fields = (*RunSerializer.Meta.fields, "cancel_token")
        read_only_fields = fields


COMPARISON_CSV_HEADER = [
    "mode",
    "position",
    "run",
    "label",
    "phase",
    "token_id",
    "text",
    "exit_loop",
    "loops_computed",
    "same_token",
    "compared",
    "exit_loop_vs_deepest",
]


def comparison_data(comparison: Comparison) -> dict[str, Any]:
    """``GET /api/v1/runs/compare/`` as JSON."""
    first = comparison.runs[0].run
    return {
        "prompt": first.prompt,
        "model": first.model,
        "mode": comparison.mode,
        "divergence": comparison.divergence,
        "branch": comparison.branch,
        "deepest": comparison.runs[comparison.deepest].view.id,
        "settled": None
        if comparison.settled is None
        else comparison.runs[comparison.settled].view.id,
        "runs": [
            _compared_run_data(item) | {"calibration": _calibration(comparison, i)}
            for i, item in enumerate(comparison.runs)
        ],
        "positions": [
            {
                "position": position.position,
                "phase": position.phase,
                "same_token": position.same_token,
                "compared": position.compared,
                "difference": position.difference,
                "settling_loop": comparison.settling(position),
                "runs": [
                    None
                    if token is None
                    else {
                        "token_id": token["token_id"],
                        "text": token["text"],
                        "exit_loop": token["exit_loop"],
                        "vs_deepest": vs_deepest,
                    }
                    for token, vs_deepest in zip(position.tokens, position.vs_deepest, strict=True)
                ],
            }
            for position in comparison.positions
        ],
        "stats": [
            {"key": row.key, "label": row.label, "values": row.values, "differs": row.differs}
            for row in comparison.stats
        ],
    }


def comparison_rows(comparison: Comparison) -> Iterator[list[Any]]:
    """A header, then one row per position and run."""
    yield COMPARISON_CSV_HEADER
    for position in comparison.positions:
        for item, token, vs_deepest in zip(
            comparison.runs, position.tokens, position.vs_deepest, strict=True
        ):
            if token is None:
                continue
            yield [
                comparison.mode,
                position.position,
                item.view.id,
                item.label,
                token["phase"],
                token["token_id"],
                token["text"],
                token["exit_loop"],
                token["loops_computed"],
                position.same_token,
                position.compared,
                "" if vs_deepest is None else vs_deepest,
            ]


def _calibration(comparison: Comparison, index: int) -> dict[str, Any] | None:
    """Run ``index``'s exits against the full-depth run's settling loops, as counts."""
    found = comparison.calibration(index)
    return None if found is None else found.as_dict()


def _compared_run_data(item: Compared) -> dict[str, Any]:
    state = item.view.state
    agreement = item.agreement
    return {
        "id": item.view.id,
        "label": item.label,
        "status": item.run.status,
        "url": state["url"],
        "api_url": state["api_url"],
        "events_url": state["events_url"],
        "params": item.run.params,
        "settings": item.view.params_summary,
        "stats": item.run.stats,
        "average_exit_loop": item.average_exit,
        "agreement": None
        if agreement is None
        else {
            "top1": agreement.top1,
            "top1_positions": agreement.top1_positions,
            "loglik_difference": agreement.loglik_difference,
            "loglik_positions": agreement.loglik_positions,
        },
    }
