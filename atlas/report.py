"""The coverage report of the curated data: what is classified, on what basis, and what
breaks the taxonomy's rules. It reads the data file, not the database, so CI can run it
before anything is loaded."""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from atlas import taxonomy
from atlas.records import SOURCE_KINDS, WorkRecord, evidence_source_kind
from atlas.rules import rules_broken


@dataclass(frozen=True)
class CoverageReport:
    works: int
    values: dict[str, Counter[str]]
    sources: Counter[str]
    conflicts: list[str]
    without_facts: list[str]
    violations: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The report as printed by ``manage.py atlas_report``."""
        out = [f"{self.works} works"]
        for facet in taxonomy.FACETS:
            counts = self.values[facet.name]
            kind = "labels" if facet.multi else "works"
            out.append(f"{facet.name} ({kind}):")
            out += [f"  {slug:<22} {counts[slug]:>4}" for slug in facet.slugs]
        out.append("labels by source of their basis:")
        out += [f"  {kind:<22} {self.sources[kind]:>4}" for kind in SOURCE_KINDS]
        out.append(f"recorded conflicts: {len(self.conflicts)}")
        out += [f"  {line}" for line in self.conflicts]
        out.append(f"works without facts: {len(self.without_facts)}")
        out += [f"  {line}" for line in self.without_facts]
        out.append(f"rule violations: {len(self.violations)}")
        out += [f"  {line}" for line in self.violations]
        return out


def _label_count(record: WorkRecord, facet: taxonomy.Facet) -> int:
    return len(record.values[facet.name]) if facet.multi else 1


def atlas_coverage(records: Sequence[WorkRecord]) -> CoverageReport:
    """Counts per facet value (``unspecified`` included), labels per kind of source (a
    label with no recorded basis rests on the summary), facts and rule violations."""
    values: dict[str, Counter[str]] = {facet.name: Counter() for facet in taxonomy.FACETS}
    sources: Counter[str] = Counter()
    conflicts: list[str] = []
    without_facts: list[str] = []
    violations: list[str] = []
    for record in records:
        where = f"n={record.position} {record.slug}"
        evidence = record.values["evidence"]
        for facet in taxonomy.FACETS:
            value = record.values[facet.name]
            values[facet.name].update(value if facet.multi else [value])
            basis = evidence.get(facet.name)
            kind = evidence_source_kind(basis["source"]) if basis else "summary"
            sources[kind] += _label_count(record, facet)
            if basis and basis.get("conflict"):
                conflicts.append(f"{where}: {facet.name}: {basis['conflict']}")
        if not record.values["facts_source"]:
            without_facts.append(where)
        violations += [
            f"{where}: {rule.name}: {rule.statement}" for rule in rules_broken(record.values)
        ]
    return CoverageReport(len(records), values, sources, conflicts, without_facts, violations)
