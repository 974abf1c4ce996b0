"""Related works that say why, computed once per data version and stored.

Two kinds of relation, each with its reason:

- *Mentions*: a work's summary names another work by one of its curated short names
  ("applies to Ouro", "Huginn-style"): the first "builds on or discusses" the second, the
  second is "mentioned by" the first. Names match as whole words, case and all.
- *Similar*: the nearest works by TF-IDF of title and summary together with the shared
  facet values, by cosine similarity (scikit-learn): ``SIMILAR_TEXT_WEIGHT`` of the score
  is the text's cosine, the rest the facets'. Each comes with the facet values the two share and
  the terms that weigh most in both.

``related_compute`` is pure and deterministic for the same works (ties go to the older
work's slug order, nothing is random); ``related_refresh`` recomputes after each recorded
change of the atlas, outside the change's transaction, and replaces the stored rows in
one short transaction, so readers always see one complete version.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.db import transaction
from scipy import sparse
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.preprocessing import normalize

from atlas import taxonomy

SIMILAR_COUNT = 5
SIMILAR_TEXT_WEIGHT = 0.6
SHARED_TERMS = 3
# Terms in more than this share of the works (looped, model, depth…) tell them apart
# least and cost the most to compare: they are left out.
MAX_DOCUMENT_FREQUENCY = 0.2
_CHUNK = 512  # rows of the similarity matrix held densely at once: (512, works) float32
_NOT_SHARED = frozenset({"unspecified", "none"})  # absences, not properties two works share


@dataclass(frozen=True)
class WorkText:
    """What relations are computed from, for one work."""

    pk: int
    slug: str
    title: str
    summary: str
    short_names: Sequence[str]
    facets: Sequence[tuple[str, str]]  # (facet, value), single- and multi-valued, no topics


@dataclass(frozen=True)
class Relation:
    work: int
    other: int
    kind: str  # "mentions", "mentioned_by" or "similar"
    rank: int
    reason: dict[str, Any]


def _mention_pattern(names: Sequence[str]) -> re.Pattern[str] | None:
    if not names:
        return None
    alternatives = "|".join(re.escape(name) for name in sorted(names, key=lambda n: (-len(n), n)))
    # a whole word: not inside another word or a hyphenated name ("LSTM-UT" is not "UT"),
    # though "Huginn-style", "Ouro's" and a plural are the name
    return re.compile(rf"(?<![\w-])({alternatives})(?:s|es)?(?![\w])")


def mentions_find(works: Sequence[WorkText]) -> list[Relation]:
    """Both directions of every mention, in the order the summary names them."""
    owner = {name: work.pk for work in works for name in work.short_names}
    pattern = _mention_pattern(list(owner))
    if pattern is None:
        return []
    found: dict[int, dict[int, str]] = {}
    for work in works:
        for match in pattern.finditer(work.summary):
            target = owner[match[1]]
            if target != work.pk:
                found.setdefault(work.pk, {}).setdefault(target, match[1])
    relations = []
    by_target: dict[int, list[tuple[int, str]]] = {}
    for source, targets in found.items():
        for rank, (target, name) in enumerate(targets.items(), start=1):
            relations.append(Relation(source, target, "mentions", rank, {"name": name}))
            by_target.setdefault(target, []).append((source, name))
    order = {work.pk: index for index, work in enumerate(works)}  # the caller's order
    for target, sources in by_target.items():
        for rank, (source, name) in enumerate(sorted(sources, key=lambda s: order[s[0]]), 1):
            relations.append(Relation(target, source, "mentioned_by", rank, {"name": name}))
    return relations


def _facet_matrix(works: Sequence[WorkText]) -> tuple[sparse.csr_matrix, list[tuple[str, str]]]:
    pairs = sorted({p for work in works for p in work.facets if p[1] not in _NOT_SHARED})
    column = {pair: index for index, pair in enumerate(pairs)}
    rows, cols = [], []
    for row, work in enumerate(works):
        for pair in work.facets:
            if pair in column:
                rows.append(row)
                cols.append(column[pair])
    data = np.ones(len(rows), dtype=np.float32)
    matrix = sparse.csr_matrix((data, (rows, cols)), shape=(len(works), len(pairs)))
    return normalize(matrix), pairs


def similar_find(works: Sequence[WorkText], *, count: int = SIMILAR_COUNT) -> list[Relation]:
    """Each work's ``count`` nearest others (score > 0), with the shared facet values and
    the strongest shared terms as the reason."""
    if len(works) < 2:
        return []
    vectorizer = TfidfVectorizer(
        stop_words="english", sublinear_tf=True, max_df=MAX_DOCUMENT_FREQUENCY, dtype=np.float32
    )
    text = vectorizer.fit_transform([f"{work.title}. {work.summary}" for work in works]).tocsr()
    terms = vectorizer.get_feature_names_out()
    facets, pairs = _facet_matrix(works)
    text_t = (text * SIMILAR_TEXT_WEIGHT).T.tocsr()
    dense_facets = facets.toarray()  # (works, facet values): a few dozen columns
    dense_facets_t = dense_facets.T * np.float32(1 - SIMILAR_TEXT_WEIGHT)
    why = _Reasons(text, terms, facets, pairs)
    relations = []
    for start in range(0, len(works), _CHUNK):
        chunk = slice(start, start + _CHUNK)
        scores = (text[chunk] @ text_t).toarray()  # (chunk, works)
        scores += dense_facets[chunk] @ dense_facets_t
        rows = np.arange(scores.shape[0])
        scores[rows, rows + start] = -1.0  # never itself
        for offset, index in enumerate(_nearest(scores, count)):
            a = start + offset
            for rank, b in enumerate(index, start=1):
                reason = why(a, int(b))
                reason["score"] = round(float(scores[offset, b]), 4)
                relations.append(Relation(works[a].pk, works[b].pk, "similar", rank, reason))
    return relations


def _nearest(scores: np.ndarray, count: int) -> list[np.ndarray]:
    """Per row of ``scores`` (chunk, works): the columns of the ``count`` highest positive
    scores, highest first, a tie going to the lower column (the earlier work)."""
    count = min(count, scores.shape[1] - 1)
    kth = -np.partition(-scores, count - 1, axis=1)[:, count - 1]  # each row's count-th best
    nearest = []
    for row, threshold in zip(scores, kth, strict=True):
        candidates = np.flatnonzero((row >= threshold) & (row > 0))  # ascending columns
        order = np.argsort(-row[candidates], kind="stable")[:count]
        nearest.append(candidates[order])
    return nearest


def _rows(matrix: sparse.csr_matrix) -> list[dict[int, float]]:
    """Each CSR row as {column: value} (set operations on these beat array ones here)."""
    cols, values, ptr = matrix.indices.tolist(), matrix.data.tolist(), matrix.indptr.tolist()
    return [
        dict(zip(cols[a:b], values[a:b], strict=True)) for a, b in zip(ptr, ptr[1:], strict=False)
    ]


class _Reasons:
    """Why two works are similar: the facet values they share, their strongest shared terms."""

    def __init__(
        self, text: sparse.csr_matrix, terms: np.ndarray, facets: sparse.csr_matrix, pairs: list
    ) -> None:
        self.text = _rows(text)
        self.terms = terms.tolist()
        self.facets = [sorted(row) for row in _rows(facets)]
        self.labels = [_label(*pair) for pair in pairs]

    def __call__(self, a: int, b: int) -> dict[str, Any]:
        text_a, text_b = self.text[a], self.text[b]
        shared = sorted((-text_a[t] * text_b[t], self.terms[t]) for t in text_a.keys() & text_b)
        common = set(self.facets[b])
        return {
            "facets": [self.labels[c] for c in self.facets[a] if c in common],
            "terms": [term for _, term in shared[:SHARED_TERMS]],
        }


def _label(facet: str, value: str) -> str:
    term = next(t for t in taxonomy.FACETS_BY_NAME[facet].terms if t.slug == value)
    return f"{taxonomy.FACETS_BY_NAME[facet].label}: {term.label}"


def related_compute(works: Sequence[WorkText]) -> list[Relation]:
    return mentions_find(works) + similar_find(works)


def _work_texts() -> list[WorkText]:
    from atlas.models import TOPIC, Work, WorkTag

    singles = [facet.name for facet in taxonomy.SINGLE_FACETS]
    tags: dict[int, list[tuple[str, str]]] = {}
    for work_id, facet, value in WorkTag.objects.exclude(facet=TOPIC).values_list(
        "work_id", "facet", "value"
    ):
        tags.setdefault(work_id, []).append((facet, value))
    fields = ("pk", "slug", "title", "summary", "short_names", *singles)
    rows = Work.objects.order_by("-month", "position", "slug").values_list(*fields)
    return [
        WorkText(
            pk=pk,
            slug=slug,
            title=title,
            summary=summary,
            short_names=names,
            facets=[*zip(singles, values, strict=True), *sorted(tags.get(pk, []))],
        )
        for pk, slug, title, summary, names, *values in rows
    ]


def related_refresh() -> int:
    """Recompute and store the relations for the current data version (a no-op when they
    are already stored for it); returns that version's number."""
    from atlas.models import RelatedWork
    from atlas.selectors import data_version

    version = data_version().change_id
    if RelatedWork.objects.filter(version=version).exists():
        return version
    relations = related_compute(_work_texts())
    rows = [
        RelatedWork(
            work_id=r.work,
            other_id=r.other,
            kind=r.kind,
            rank=r.rank,
            reason=r.reason,
            version=version,
        )
        for r in relations
    ]
    with transaction.atomic():
        if data_version().change_id != version:
            return version  # a newer change came meanwhile; its own refresh stores it
        RelatedWork.objects.all().delete()
        RelatedWork.objects.bulk_create(rows, batch_size=2000)
    return version
