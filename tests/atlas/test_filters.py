"""The shared FilterSet: every parameter, its semantics and its errors."""

import pytest
from django.http import QueryDict

from atlas.filters import WorkFilter
from atlas.models import Work

pytestmark = pytest.mark.django_db


def _slugs(query: str) -> list[str]:
    filterset = WorkFilter(QueryDict(query), queryset=Work.objects.all())
    assert filterset.is_valid(), filterset.errors
    return [work.slug for work in filterset.qs]


def _errors(query: str) -> dict[str, list[str]]:
    filterset = WorkFilter(QueryDict(query), queryset=Work.objects.all())
    assert not filterset.is_valid()
    return filterset.errors


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("recurrence_family=token-routed", {"mixture-of-recursions"}),
        (
            "recurrence_family=universal&recurrence_family=analysis",
            {
                "looped-diffusion-transformer",
                "deja-view-looping-transformers-3d",
                "loop-think-generalize",
                "universal-transformers",
            },
        ),
        ("depth_control=halting", {"loop-think-generalize", "universal-transformers"}),
        ("depth_granularity=step", {"looped-diffusion-transformer"}),
        ("kv_strategy=recursion-wise", {"mixture-of-recursions"}),
        ("training_regime=retrofit", {"deja-view-looping-transformers-3d"}),
        ("modality=vision", {"looped-diffusion-transformer", "deja-view-looping-transformers-3d"}),
        ("modality=vision&modality=diffusion-generation", {"looped-diffusion-transformer"}),
        ("contribution=compression", {"resid-quant-kv-cache"}),
        ("topics=kv-cache", {"resid-quant-kv-cache", "mixture-of-recursions"}),
        ("topics=kv-cache&topics=quantization", {"resid-quant-kv-cache"}),
        ("recurrence_family=universal&depth_control=halting", {"universal-transformers"}),
        (
            "works=universal-transformers,loop-think-generalize",
            {
                "universal-transformers",
                "loop-think-generalize",
            },
        ),
    ],
)
def test_each_facet_filter_selects_the_matching_works(small_atlas, query, expected) -> None:
    assert set(_slugs(query)) == expected


def test_several_values_of_a_multi_valued_facet_all_apply(small_atlas) -> None:
    one = set(_slugs("modality=language"))
    both = set(_slugs("modality=language&modality=algorithmic"))
    assert both == {"loop-think-generalize", "universal-transformers"} and both < one


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "month_from=2026-09",
            [
                "loopfold-parallelizing-recurrent-depth",
                "resid-quant-kv-cache",
                "looped-diffusion-transformer",
            ],
        ),
        (
            "month_from=2025&month_to=2025",
            [
                "t2mlr-temporal-middle-layer-recurrence",
                "mixture-of-recursions",
                "loop-think-generalize",
            ],
        ),
        ("month_to=2025-04", ["loop-think-generalize", "universal-transformers"]),
        ("month_from=2025-05&month_to=2025-10", ["mixture-of-recursions"]),
    ],
)
def test_the_month_range_is_inclusive_and_takes_years_or_months(small_atlas, query, expected):
    assert _slugs(query) == expected


def test_works_are_newest_first_by_default_and_sortable(small_atlas) -> None:
    newest = _slugs("")
    assert newest[:2] == ["loopfold-parallelizing-recurrent-depth", "resid-quant-kv-cache"]
    assert _slugs("ordering=newest") == newest
    assert _slugs("ordering=oldest") == newest[::-1]
    titles = [Work.objects.get(slug=slug).title for slug in _slugs("ordering=title")]
    assert titles == sorted(titles)


@pytest.mark.parametrize(
    ("query", "param", "message"),
    [
        ("recurrence_family=loopy", "recurrence_family", "allowed: universal, looped-lm"),
        ("modality=smell", "modality", "'smell' is not an allowed modality value"),
        ("topics=unheard-of", "topics", "allowed: 3d-reconstruction, adaptive-computation"),
        (
            "ordering=random",
            "ordering",
            "'random' is not an allowed ordering value; allowed: newest, oldest, title",
        ),
        ("month_from=2025-13", "month_from", "is not a year (YYYY) or a month (YYYY-MM)"),
        ("month_to=soon", "month_to", "is not a year (YYYY) or a month (YYYY-MM)"),
        ("works=universal-transformers,nope", "works", "no work with slug nope"),
        ("works=Bad Slug", "works", "not work slugs: Bad Slug"),
        ("search=" + "x" * 201, "search", "at most 200 characters"),
        ("works=" + "a," * 1000 + "b", "works", "at most 2000 characters (it has 2001)"),
        ("search=a%00b", "search", "Null characters are not allowed"),
    ],
)
def test_an_unknown_value_is_refused_naming_the_parameter(small_atlas, query, param, message):
    errors = _errors(query)
    assert list(errors) == [param]
    assert message in " ".join(errors[param])


def test_facet_counts_drop_only_their_own_parameter(small_atlas) -> None:
    # given a family and a modality chosen together
    filterset = WorkFilter(
        QueryDict("recurrence_family=universal&modality=vision"), queryset=Work.objects.all()
    )
    assert filterset.is_valid(), filterset.errors

    # then ignoring one parameter still applies the other
    without_family = {work.slug for work in filterset.queryset_without("recurrence_family")}
    without_modality = {work.slug for work in filterset.queryset_without("modality")}
    assert without_family == set(_slugs("modality=vision"))
    assert without_modality == set(_slugs("recurrence_family=universal"))
