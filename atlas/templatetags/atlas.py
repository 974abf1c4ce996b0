"""Template helpers that turn stored facet slugs into the taxonomy's terms."""

from django import template

from atlas import taxonomy
from atlas.charts import FAMILY_COLOURS
from atlas.exports import EXPORT_FORMATS, ExportFormat
from atlas.models import Work
from atlas.selectors import Comparison

register = template.Library()


@register.filter
def facet_terms(work: Work, facet_name: str) -> list[taxonomy.Term]:
    """The work's value(s) of one facet, as terms (slug, label, description)."""
    facet = taxonomy.FACETS_BY_NAME[facet_name]
    value = getattr(work, facet_name)
    slugs = value if facet.multi else [value]
    return [term for term in facet.terms if term.slug in slugs]


@register.simple_tag
def taxonomy_facets() -> tuple[taxonomy.Facet, ...]:
    return taxonomy.FACETS


@register.filter
def family_colour(slug: str) -> str:
    """The recurrence family's colour, the same as on the timeline."""
    return FAMILY_COLOURS[slug]


@register.simple_tag
def export_formats() -> list[ExportFormat]:
    return list(EXPORT_FORMATS.values())


@register.filter
def differs(comparison: Comparison, field: str) -> bool:
    return comparison.differs(field)
