"""One definition of a run's parameters: the API serializer, the page form and the engine's
``GenerationParams`` agree with ``kernels.params.RunParams`` (names, defaults, bounds)."""

from dataclasses import fields
from typing import cast

import pytest
from django import forms
from rest_framework import serializers

from kernels.params import BOUNDS, CHOICES, Bound, RunParams
from playground.forms import SAMPLING_INITIAL, RunForm
from playground.models import Run
from playground.serializers import RunCreateSerializer

NAMES = [field.name for field in fields(RunParams)]
FORM_NAMES = ["q", "loops", "max_new_tokens", "temperature", "top_p", "seed"]


def test_every_field_has_a_bound_or_choices():
    assert set(BOUNDS) | set(CHOICES) == set(NAMES)
    assert not set(BOUNDS) & set(CHOICES)


@pytest.mark.parametrize("name", ["fixed_loops", "temperature", "kl_threshold", "loops"])
def test_the_fields_that_had_none_now_have_an_upper_bound(name):
    assert BOUNDS[name].high < 2**31


def test_a_bound_describes_whether_its_low_end_is_open():
    # given
    q, tokens = Bound(0, 1, low_open=True), Bound(0, 256)

    # then
    assert (q.contains(0), q.contains(1e-9), q.contains(1), q.contains(1.01)) == (
        False,
        True,
        True,
        False,
    )
    assert q.describe() == "must lie in (0, 1]"
    assert tokens.contains(0) and tokens.describe() == "must lie in [0, 256]"
    assert not q.contains(float("nan"))


def test_a_bound_can_allow_its_low_end_or_values_from_a_minimum():
    # given
    temperature = Bound(0, 5, or_from=0.05)

    # then
    inside = [temperature.contains(v) for v in (0, 1e-300, 0.049, 0.05, 5, 5.01, -1e-300)]
    assert inside == [True, False, False, True, True, False, False]
    assert temperature.describe() == "must be 0 or lie in [0.05, 5]"


def test_run_params_name_every_field_out_of_bounds():
    # when
    errors = RunParams(q=0, temperature=6, fixed_loops=99, exit_rule="sometimes").errors()

    # then
    assert errors == {
        "q": "must lie in (0, 1]",
        "temperature": "must be 0 or lie in [0.05, 5]",
        "fixed_loops": "must lie in [1, 32]",
        "exit_rule": "must be one of q-exit, convergence, fixed, ponder, act",
    }
    with pytest.raises(ValueError, match="temperature must be 0 or lie in"):
        RunParams(temperature=6).validate()


def test_the_engines_params_are_run_params_with_the_same_fields_and_defaults():
    from kernels.request import GenerationParams

    # then
    assert issubclass(GenerationParams, RunParams)
    assert [f.name for f in fields(GenerationParams)] == NAMES
    assert GenerationParams() == GenerationParams(**vars(RunParams()))
    with pytest.raises(ValueError, match="kl_threshold must lie in \\(0, 10\\]"):
        GenerationParams(exit_rule="convergence", kl_threshold=11).validate()


def test_the_serializer_derives_its_fields_defaults_and_bounds():
    # given
    serializer_fields = RunCreateSerializer().fields

    # then
    assert set(serializer_fields) == {"prompt", "model", "extrapolate", *NAMES}
    defaults = RunParams()
    for name in NAMES:
        field = serializer_fields[name]
        if getattr(defaults, name) is None:
            assert not field.required and field.allow_null, name
        else:
            assert field.default == getattr(defaults, name), name
        if name in CHOICES:
            assert isinstance(field, serializers.ChoiceField), name
            assert list(field.choices) == list(CHOICES[name]), name
        else:
            assert isinstance(field, serializers.IntegerField | serializers.FloatField), name
            assert (field.min_value, field.max_value) == (BOUNDS[name].low, BOUNDS[name].high)


@pytest.mark.django_db
def test_the_form_derives_its_bounds_and_defaults():
    # given
    form = RunForm()
    defaults = RunParams()

    # then
    for name in FORM_NAMES:
        field = form.fields[name]
        assert isinstance(field, forms.IntegerField), name  # FloatField is one too
        assert (field.min_value, field.widget.attrs["min"]) == (BOUNDS[name].low,) * 2, name
        if name != "loops":  # its max is the chosen model's 2·T, within the fixed bound
            assert field.max_value == BOUNDS[name].high, name
        initial = SAMPLING_INITIAL.get(name, getattr(defaults, name))
        if name != "loops":  # its initial is the chosen model's T
            assert field.initial == initial, name
    for name in CHOICES:
        choice = form.fields[name]
        assert isinstance(choice, forms.ChoiceField), name
        # the stubs type the getter as the setter's input; Django normalises it to pairs
        pairs = cast(list[tuple[str, str]], choice.choices)
        assert [value for value, _ in pairs] == list(CHOICES[name])
        assert form.fields[name].initial == getattr(defaults, name)


@pytest.mark.django_db
def test_the_form_refuses_what_the_bounds_refuse(client):
    # when
    response = client.post("/playground/", {"prompt": "x", "q": "0", "decoding": "greedy"})

    # then
    assert response.status_code == 400
    assert "greater than 0" in response.content.decode()
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("temperature", 5.5, "less than or equal to 5"),
        ("kl_threshold", 20, "less than or equal to 10"),
        ("kl_threshold", 0, "must lie in (0, 10]"),
        ("fixed_loops", 33, "less than or equal to 32"),
        ("loops", 33, "less than or equal to 32"),
        ("top_k", 21, "less than or equal to 20"),
        ("q", 0, "must lie in (0, 1]"),
        # what the sampler cannot honour (1e-300 rounds to 0 in float32)
        ("temperature", 1e-300, "must be 0 or lie in [0.05, 5]"),
        ("temperature", 0.01, "must be 0 or lie in [0.05, 5]"),
        ("top_p", 1e-300, "greater than or equal to 0.01"),
    ],
)
@pytest.mark.django_db
def test_an_out_of_bounds_value_is_a_400_naming_the_bound(client, field, value, named):
    # when
    response = client.post(
        "/api/v1/runs/",
        {"prompt": "def f():", "exit_rule": "fixed", "fixed_loops": 2} | {field: value},
        content_type="application/json",
    )

    # then
    assert response.status_code == 400
    assert named in " ".join(response.json()["errors"][field])
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_a_tiny_top_p_is_refused_with_any_temperature(client):
    # when
    response = client.post(
        "/api/v1/runs/",
        {"prompt": "def f():", "temperature": 5, "top_p": 1e-300},
        content_type="application/json",
    )

    # then
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["top_p"]
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_form_refuses_a_temperature_between_greedy_and_its_minimum(client):
    # when
    response = client.post(
        "/playground/", {"prompt": "x", "decoding": "sample", "temperature": "0.01", "top_p": "1"}
    )

    # then
    assert response.status_code == 400
    assert "must be 0 or lie in [0.05, 5]" in response.content.decode()
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_the_schema_states_the_sampling_bounds(client):
    # when
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()

    # then
    fields = schema["components"]["schemas"]["RunCreateRequest"]["properties"]
    assert fields["temperature"]["description"] == "Must be 0 or lie in [0.05, 5]."
    assert (fields["top_p"]["minimum"], fields["top_p"]["maximum"]) == (0.01, 1)
