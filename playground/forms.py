"""The playground's prompt form: the page's controls, and a plain POST without JavaScript.

The form checks what an HTML form can express (types, the same bounds the inputs carry)
and turns the controls into the run parameters of the API (``POST /api/v1/runs/``); the
submission service validates them in full (against the model, its loops, the queue) and
its errors come back onto the fields they name.
"""

import json
from collections.abc import Callable
from typing import Any, cast

from django import forms
from django.core.exceptions import ValidationError

from kernels.params import BOUNDS, CHOICES, RunParams
from playground.checkpoints import ModelInfo, model_catalog
from playground.services import MAX_PROMPT_CHARS
from playground.siblings import MODES, PRESETS, SAME_TEXT, preset_variants, run_settings

LABELS = {
    "q-exit": "Q-exit (cumulative exit probability ≥ q)",
    "convergence": "Convergence (prediction stops changing)",
    "fixed": "Fixed (exactly T loops)",
    "ponder": "PonderNet (stop at loop t with probability λ_t, seeded)",
    "act": "ACT (stop once the gates λ sum to 1 − ε)",
    "best-available": "Best available: its deepest computed loop",
    "recompute-kv": "Recompute K/V from its exit state",
    "select": "Compute every loop, then select (baseline)",
    "exit-kv": "Exit-loop K/V only: one plane per position (last-step-only)",
    "first-loop-kv": "Loop 1's K/V for every loop (first-step-only)",
}
DEFAULTS = RunParams()
# Shown when the visitor switches to sampling; greedy (the default) sends temperature 0.
SAMPLING_INITIAL = {"temperature": 0.8, "top_p": 0.95}


def model_initial(model: ModelInfo) -> dict[str, Any]:
    """The form as it starts for ``model``: every run setting at its default, the model's
    trained T, and what the model's directory asks for (``playground.json``)."""
    initial: dict[str, Any] = {
        "model": model.name,
        "exit_rule": DEFAULTS.exit_rule,
        "q": DEFAULTS.q,
        "kl_threshold": DEFAULTS.kl_threshold,
        "act_eps": DEFAULTS.act_eps,
        "loops": model.loops,
        "extrapolate": False,
        "kv_policy": DEFAULTS.kv_policy,
        "max_new_tokens": DEFAULTS.max_new_tokens,
        "decoding": "greedy",
        "seed": DEFAULTS.seed,
        **SAMPLING_INITIAL,
    }
    return initial | dict(model.defaults)


def _choices(name: str) -> list[tuple[str, str]]:
    return [(value, LABELS[value]) for value in CHOICES[name]]


def _bounded(kind: type[forms.IntegerField], name: str, **options: Any) -> forms.IntegerField:
    """A number input bounded and initialised by ``RunParams`` (``BOUNDS``, defaults);
    ``kind`` is ``forms.IntegerField`` or its subclass ``forms.FloatField``."""
    bound = BOUNDS[name]
    validators: list[Callable[[Any], None]] = []
    if bound.low_open:

        def above(value: float) -> None:
            if value is not None and value <= bound.low:
                raise ValidationError(f"Ensure this value is greater than {bound.low}.")

        validators.append(above)
    if (least := bound.or_from) is not None:  # low itself, or at least or_from

        def outside_gap(value: float) -> None:
            if value is not None and bound.low < value < least:
                raise ValidationError(f"This value {bound.describe()}.")

        validators.append(outside_gap)
    options.setdefault("initial", getattr(DEFAULTS, name))
    if issubclass(kind, forms.FloatField):
        return kind(min_value=bound.low, max_value=bound.high, validators=validators, **options)
    # an integer field's bounds are whole numbers
    return kind(
        min_value=int(bound.low), max_value=int(bound.high), validators=validators, **options
    )


class ModelSelect(forms.Select):
    """Options carry the model's trained loops (``data-loops``), which bound the loops input."""

    def __init__(self, options: list[ModelInfo]) -> None:
        super().__init__()
        self.model_options = {option.name: option for option in options}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        model = self.model_options.get(str(value))
        if model is not None:
            option["attrs"]["data-loops"] = model.loops or ""
            option["attrs"]["data-max-loops"] = model.max_loops or ""
            option["attrs"]["data-defaults"] = json.dumps(dict(model.defaults))
            if not model.available:
                option["attrs"]["disabled"] = True
        return option


class RunForm(forms.Form):
    prompt = forms.CharField(
        max_length=MAX_PROMPT_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false"}),
    )
    model = forms.ChoiceField()
    exit_rule = forms.ChoiceField(choices=_choices("exit_rule"), initial=DEFAULTS.exit_rule)
    q = _bounded(
        forms.FloatField,
        "q",
        label="Exit threshold q",
        help_text="Exit at the first loop whose cumulative exit probability reaches q; "
        "1 = full depth.",
    )
    kl_threshold = _bounded(
        forms.FloatField,
        "kl_threshold",
        label="Convergence threshold (KL, nats)",
        required=False,
        help_text="Exit once the prediction changes by less than this between loops.",
    )
    act_eps = _bounded(
        forms.FloatField,
        "act_eps",
        label="ACT ε",
        required=False,
        help_text="Exit once the gates λ sum to 1 − ε.",
    )
    loops = _bounded(forms.IntegerField, "loops", label="Loops T", required=False)
    extrapolate = forms.BooleanField(
        label="Extrapolate beyond the trained depth", required=False, initial=False
    )
    kv_policy = forms.ChoiceField(
        label="KV of exited tokens", choices=_choices("kv_policy"), initial=DEFAULTS.kv_policy
    )
    max_new_tokens = _bounded(forms.IntegerField, "max_new_tokens", label="Max new tokens")
    decoding = forms.ChoiceField(
        choices=[("greedy", "Greedy"), ("sample", "Sample")],
        initial="greedy",
        widget=forms.RadioSelect,
    )
    temperature = _bounded(forms.FloatField, "temperature", initial=SAMPLING_INITIAL["temperature"])
    top_p = _bounded(forms.FloatField, "top_p", label="Top-p", initial=SAMPLING_INITIAL["top_p"])
    seed = _bounded(forms.IntegerField, "seed")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.models = model_catalog()
        available = [option for option in self.models if option.available]
        field = cast(forms.ChoiceField, self.fields["model"])
        field.choices = [
            (
                option.name,
                f"{option.name} (T = {option.loops})"
                if option.available
                else f"{option.name} (unavailable)",
            )
            for option in self.models
        ]
        field.widget = ModelSelect(self.models)
        field.widget.choices = field.choices
        default = available[0] if available else None
        if default is not None:
            for key, value in model_initial(default).items():  # e.g. seeded sampling
                self.fields[key].initial = value
            self.fields["loops"].widget.attrs["max"] = default.max_loops
        self.fields["loops"].help_text = "Up to the trained loops; Extrapolate allows 2·T."
        self.fields["q"].widget.attrs["step"] = "0.01"
        self.fields["kl_threshold"].widget.attrs["step"] = "any"
        self.fields["act_eps"].widget.attrs["step"] = "any"
        self.fields["temperature"].widget.attrs["step"] = "0.05"
        self.fields["top_p"].widget.attrs["step"] = "0.01"

    @property
    def models_missing(self) -> list[ModelInfo]:
        """The configured models that cannot run (all of them when the list is empty)."""
        return [option for option in self.models if not option.available]

    @property
    def can_run(self) -> bool:
        return any(option.available for option in self.models)

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        model = next((m for m in self.models if m.name == data.get("model")), None)
        if model is not None and not model.available:
            self.add_error("model", f"{model.name} cannot run: {model.problem}.")
        loops = data.get("loops")
        if model is not None and model.loops and loops:
            if loops > model.loops and not data.get("extrapolate"):
                self.add_error(
                    "loops",
                    f"{model.name} was trained with {model.loops} loops; tick Extrapolate "
                    "to run more.",
                )
            elif model.max_loops and loops > model.max_loops:
                self.add_error("loops", f"At most {model.max_loops} loops for {model.name}.")
        return data

    def run_parameters(self) -> dict:
        """The validated controls as the API's run parameters."""
        data = self.cleaned_data
        sample = data["decoding"] == "sample"
        model = next((m for m in self.models if m.name == data["model"]), None)
        fixed = data["exit_rule"] == "fixed"
        return {
            "prompt": data["prompt"],
            "model": data["model"],
            "exit_rule": data["exit_rule"],
            "q": data["q"],
            # left empty: the rule's default
            "kl_threshold": _or_default(data, "kl_threshold"),
            "act_eps": _or_default(data, "act_eps"),
            "loops": data["loops"],
            "fixed_loops": (data["loops"] or (model.loops if model else None)) if fixed else None,
            "extrapolate": data["extrapolate"],
            "kv_policy": data["kv_policy"],
            "max_new_tokens": data["max_new_tokens"],
            "temperature": data["temperature"] if sample else 0.0,
            "top_p": data["top_p"] if sample else 1.0,
            "seed": data["seed"],
        }


def _or_default(data: dict[str, Any], name: str) -> Any:
    value = data.get(name)
    return getattr(DEFAULTS, name) if value is None else value


CUSTOM = "custom"


class CompareForm(forms.Form):
    """“Compare with…” on a run page: a preset of three settings, or one or two free ones.

    A free sibling starts from the run's own exit rule, q and KV policy (``initial``); a
    second is added only when asked for. ``variants`` gives what each sibling changes.
    """

    preset = forms.ChoiceField(
        choices=[(name, label) for name, (label, _) in PRESETS.items()]
        + [(CUSTOM, "free choice (below)")],
        initial="q",
        widget=forms.RadioSelect,
        label="Compare with",
    )
    mode = forms.ChoiceField(
        choices=list(MODES.items()),
        initial=SAME_TEXT,
        widget=forms.RadioSelect,
        label="Text",
        required=False,  # left out: same text, the default
    )
    first_exit_rule = forms.ChoiceField(
        label="Run B exit rule", choices=_choices("exit_rule"), required=False
    )
    first_q = _bounded(forms.FloatField, "q", label="Run B q", required=False)
    first_kv_policy = forms.ChoiceField(
        label="Run B KV policy", choices=_choices("kv_policy"), required=False
    )
    second = forms.BooleanField(label="Add a run C", required=False)
    second_exit_rule = forms.ChoiceField(
        label="Run C exit rule", choices=_choices("exit_rule"), required=False
    )
    second_q = _bounded(forms.FloatField, "q", label="Run C q", required=False)
    second_kv_policy = forms.ChoiceField(
        label="Run C KV policy", choices=_choices("kv_policy"), required=False
    )

    @classmethod
    def for_run(cls, run: Any, data: Any = None) -> "CompareForm":
        """The form of ``run``'s page: free choices start from the run's own settings."""
        own = run_settings(run)
        initial = {
            f"{which}_{name}": own[name]
            for which in ("first", "second")
            for name in ("exit_rule", "q", "kv_policy")
        }
        return cls(data, initial=initial, prefix="compare")

    def clean_mode(self) -> str:
        return self.cleaned_data.get("mode") or SAME_TEXT

    def variants(self, run: Any) -> list[dict[str, Any]]:
        """What each sibling changes of ``run``'s settings (valid forms only)."""
        data = self.cleaned_data
        if data["preset"] != CUSTOM:
            return preset_variants(run, data["preset"])
        own = run_settings(run)
        chosen = ("first", "second") if data["second"] else ("first",)
        return [
            {
                name: data[f"{which}_{name}"]
                if data[f"{which}_{name}"] not in (None, "")
                else own[name]
                for name in ("exit_rule", "q", "kv_policy")
            }
            for which in chosen
        ]
