"""Template helpers that turn stored facet slugs into the taxonomy's terms."""

from django import template

from atlas import citation, exports, taxonomy
from atlas.charts import FAMILY_COLOURS
from atlas.exports import EXPORT_FORMATS, ExportFormat
from atlas.models import Work
from atlas.records import evidence_source_kind, list_entry_url
from atlas.selectors import Comparison
from atlas.serializers import WorkSerializer

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


@register.filter
def facet_basis(work: Work, facet_name: str) -> dict[str, str]:
    """Why a facet has its value: the recorded basis, else the summary it was read from."""
    basis = work.evidence.get(facet_name)
    if basis is None:
        return {"note": "Classified from the title and summary.", "source": "summary"}
    kind = evidence_source_kind(basis["source"])
    link = {"href": list_entry_url(basis["source"])} if kind == "list" else {}
    return {**basis, "kind": kind, **link}


@register.filter
def month_label(work: Work) -> str:
    """``Oct 2026``, or ``not before Oct 2026`` for an estimated month."""
    return exports.month_label(f"{work.month:%Y-%m}", work.month_estimated)


@register.filter
def coins(work: Work) -> str:
    """The work's COinS ContextObject (Zotero saves every one on a list page)."""
    return citation.coins(WorkSerializer(work).data)
