"""The work model's own reads: its page's path and its multi-valued facets."""

import pytest
from django.urls import reverse, set_script_prefix

from atlas.models import TAG_FACETS, Work, work_path
from atlas.selectors import work_queryset

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("prefix", ["/", "/atlas/"])
def test_a_work_path_is_what_reverse_gives_under_any_script_prefix(prefix) -> None:
    set_script_prefix(prefix)
    try:
        assert work_path("ouro-2") == reverse("atlas:work", kwargs={"slug": "ouro-2"})
    finally:
        set_script_prefix("/")


def test_aggregated_tags_read_as_the_tag_rows_do(small_atlas) -> None:
    # given each work read with its tags aggregated, and as a plain row that reads its tags
    for annotated in work_queryset():
        plain = Work.objects.get(pk=annotated.pk)
        # then every facet gives the same values in the same order, as a list of its own
        for facet in TAG_FACETS:
            assert annotated.tag_values(facet) == plain.tag_values(facet)
        annotated.modality.append("changed")
        assert "changed" not in annotated.modality
