"""The shared FilterSet: every parameter, its semantics and its errors."""

from datetime import date

import pytest
from django.http import QueryDict

from atlas.filters import MonthField, SlugListField, WorkFilter
from atlas.models import TOPIC, Work, WorkTag

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
        ("month_from=2025-00", "month_from", "'2025-00' is not a year (YYYY) or a month"),
        ("month_to=0000", "month_to", "'0000' is not a year (YYYY) or a month"),
        ("month_to=2025-1", "month_to", "'2025-1' is not a year (YYYY) or a month"),
        ("month_from=2025-011", "month_from", "at most 7 characters (it has 8)"),
        ("&".join(["modality=x"] * 21), "modality", "at most 20 values, not 21"),
        ("works=" + ",".join(f"w{i}" for i in range(51)), "works", "at most 50 works at a time"),
        ("works=ok,Bad,Worse", "works", "not work slugs: Bad, Worse"),
        ("works=nope,universal-transformers,gone", "works", "no work with slug nope, gone"),
    ],
)
def test_a_bad_value_is_refused_naming_the_parameter_and_what_is_wrong(
    small_atlas, query, param, message
):
    errors = _errors(query)
    assert list(errors) == [param]
    assert message in " ".join(errors[param])


def test_the_month_bounds_take_a_year_as_its_first_and_last_month(small_atlas) -> None:
    everything = set(_slugs(""))
    assert set(_slugs("month_from=0001-01&month_to=9999-12")) == everything
    assert _slugs("month_to=2025-12") == _slugs("month_to=2025")
    assert _slugs("month_from=2025-01") == _slugs("month_from=2025")


def test_a_year_bound_is_the_years_first_or_last_month() -> None:
    assert MonthField().clean("2025") == date(2025, 1, 1)
    assert MonthField(last=True).clean("2025") == date(2025, 12, 1)
    assert MonthField(last=True).clean("2025-02") == date(2025, 2, 1)


def test_the_works_parameter_takes_up_to_fifty_slugs() -> None:
    fifty = [f"w{i}" for i in range(50)]
    assert SlugListField().clean(",".join(fifty)) == fifty


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("month_from=2025-13", "'2025-13' is not a year (YYYY) or a month (YYYY-MM)"),
        ("works=ok,Bad", "not work slugs: Bad"),
        ("works=nope,universal-transformers", "no work with slug nope"),
    ],
)
def test_a_refusal_is_the_whole_message_and_nothing_else(small_atlas, query, message) -> None:
    assert list(_errors(query).values()) == [[message]]


def test_a_facet_value_matches_that_facet_only(small_atlas) -> None:
    work = Work.objects.get(slug="universal-transformers")
    WorkTag.objects.create(work=work, facet=TOPIC, value="compression")
    assert _slugs("contribution=compression") == ["resid-quant-kv-cache"]


def test_repeated_and_empty_values_count_once(small_atlas) -> None:
    vision = _slugs("modality=vision")
    assert _slugs("&".join(["modality=vision"] * 20)) == vision
    pair = ["universal-transformers", "loop-think-generalize"]
    assert set(_slugs("works=" + ",".join(pair * 30))) == set(pair)
    assert set(_slugs("works= universal-transformers,, loop-think-generalize ,")) == set(pair)
    assert _slugs("works=") == _slugs("") == _slugs("search=%20%20")


def test_each_facet_says_whether_its_values_combine_as_any_or_all() -> None:
    fields = WorkFilter().form.fields
    assert fields["recurrence_family"].help_text == "Any of these values."
    assert fields["modality"].help_text == "All of these values."
    assert fields["modality"].label == "Modality"
    assert WorkFilter().form.__class__ is WorkFilter().form.__class__


def test_narrowing_ignores_the_sort_and_facet_counts_can_drop_one_parameter(small_atlas):
    def filterset(query: str) -> WorkFilter:
        result = WorkFilter(QueryDict(query), queryset=Work.objects.all())
        assert result.is_valid(), result.errors
        return result

    assert not filterset("ordering=title").narrows
    assert filterset("modality=vision").narrows

    both = filterset("modality=vision&recurrence_family=analysis&ordering=title")
    without_modality = [w.slug for w in both.queryset_without("modality")]
    assert set(without_modality) == set(_slugs("recurrence_family=analysis"))
    assert without_modality == _slugs("recurrence_family=analysis&ordering=title")
    assert set(both.queryset_without("recurrence_family")) == set(filterset("modality=vision").qs)
