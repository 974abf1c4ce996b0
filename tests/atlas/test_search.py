"""Full-text search (PostgreSQL) and its portable fallback (SQLite) over the same column."""

import pytest
from django.db import connection

from atlas.models import Work
from atlas.search import search_filter

pytestmark = pytest.mark.django_db


def _found(text: str) -> set[str]:
    return set(search_filter(Work.objects.all(), text).values_list("slug", flat=True))


@pytest.mark.parametrize(
    ("text", "slug"),
    [
        ("ResidualQuant", "resid-quant-kv-cache"),  # title
        ("denoising step", "looped-diffusion-transformer"),  # summary
        ("Dehghani", "universal-transformers"),  # authors
        ("Leal-Taixé", "deja-view-looping-transformers-3d"),  # non-ASCII author
        ("Déjà", "deja-view-looping-transformers-3d"),  # non-ASCII title
    ],
)
def test_search_covers_title_summary_and_authors(small_atlas, text, slug) -> None:
    assert slug in _found(text)


def test_every_word_must_match(small_atlas) -> None:
    assert _found("router recursion") == {"mixture-of-recursions"}
    assert _found("router diffusion") == set()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="stemming is PostgreSQL's")
def test_postgresql_matches_word_forms(small_atlas) -> None:
    assert "resid-quant-kv-cache" in _found("quantizing")


@pytest.mark.parametrize("text", ['"unbalanced', "a & | ! b", "(((", "-", "'; drop table", "%_"])
def test_any_text_a_visitor_types_is_a_search_not_an_error(small_atlas, text) -> None:
    assert isinstance(_found(text), set)


def test_the_search_column_follows_edits(small_atlas) -> None:
    work = Work.objects.get(slug="universal-transformers")
    work.summary = "Now about zeppelins."
    work.save()
    assert _found("zeppelins") == {"universal-transformers"}
