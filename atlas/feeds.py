"""Atom feeds: the newest works (of any Explore search) and the atlas's data versions.

``/feeds/works.atom`` takes Explore's parameters, checked by the same ``WorkFilter`` (an
unknown or bad one is a 400, as in the API), and lists the works that search finds, the
most recently added first. ``/feeds/changes.atom`` has one entry per data version. Both
are cached by data version, as the API's reads are: an answer is keyed by the version
and the normalised query, so nothing cached goes stale.
"""

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.contrib.syndication.views import Feed
from django.core.cache import cache
from django.db.models import OuterRef, Prefetch, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, QueryDict
from django.utils.cache import get_conditional_response
from django.utils.feedgenerator import Atom1Feed
from django.utils.http import http_date

from atlas import selectors, taxonomy
from atlas.citation import paper_url
from atlas.exports import month_label
from atlas.filters import WorkFilter
from atlas.models import AtlasChange, FieldChange, Work
from atlas.services import ADDED
from loopatlas.api.conventions import query_normalised

FEED_SIZE = 50
CHANGE_LINES = 20  # per entry of the changes feed; a data file load changes hundreds


class PaperLinkAtomFeed(Atom1Feed):
    """Atom with a ``rel="related"`` link to the paper itself beside the work's page."""

    def add_item_elements(self, handler, item: dict[str, Any]) -> None:
        super().add_item_elements(handler, item)
        if item.get("paper_url"):
            handler.addQuickElement("link", "", {"rel": "related", "href": item["paper_url"]})


def works_added(queryset: QuerySet[Work]) -> QuerySet[Work]:
    """The works, with ``added_at`` (when the data version that added each was made),
    most recently added first."""
    added = FieldChange.objects.filter(work=OuterRef("pk"), field=ADDED).order_by("change_id")
    return queryset.annotate(added_at=Subquery(added.values("change__at")[:1])).order_by(
        "-added_at", "-month", "position", "slug"
    )


class WorkFeed(Feed):
    feed_type = PaperLinkAtomFeed
    subtitle = "Works on looped Transformers, recurrent depth and adaptive computation."

    def get_object(self, request: HttpRequest, *args, **kwargs) -> WorkFilter:
        return request.atlas_filterset  # type: ignore[attr-defined]  # checked by the view

    def title(self, filterset: WorkFilter) -> str:
        query = query_normalised(filterset.data)
        return "Loop Atlas: new works" + (f" matching {query}" if query else "")

    def link(self, filterset: WorkFilter) -> str:
        """The Explore page of the same search."""
        query = query_normalised(filterset.data)
        return "/" + (f"?{query}" if query else "")

    def items(self, filterset: WorkFilter) -> list[Work]:
        return list(works_added(filterset.qs)[:FEED_SIZE])

    def item_title(self, work: Work) -> str:
        return work.title

    def item_description(self, work: Work) -> str:
        return work.summary

    def item_link(self, work: Work) -> str:
        return work.get_absolute_url()

    def item_author_name(self, work: Work) -> str | None:
        return ", ".join(work.authors) + (" et al." if work.authors_et_al else "") or None

    def item_pubdate(self, work: Work) -> datetime:
        return work.added_at  # type: ignore[attr-defined]  # annotated by works_added

    def item_updateddate(self, work: Work) -> datetime:
        return work.reviewed_at or work.added_at  # type: ignore[attr-defined]

    def item_categories(self, work: Work) -> list[str]:
        """Every facet value as ``facet:value`` (topics too), and the month as people
        read it."""
        values = [f"{f.name}:{getattr(work, f.name)}" for f in taxonomy.SINGLE_FACETS]
        values += [f"{facet}:{value}" for facet, value in sorted(work.tag_pairs())]
        return [*values, f"month:{month_label(f'{work.month:%Y-%m}', work.month_estimated)}"]

    def item_extra_kwargs(self, work: Work) -> dict[str, Any]:
        row = {"url": work.url, "arxiv_id": work.arxiv_id}
        return {"paper_url": paper_url(row)}


class ChangeFeed(Feed):
    feed_type = Atom1Feed
    title = "Loop Atlas: data versions"
    subtitle = "One entry per reviewed change of the atlas, with what it changed."
    link = "/intake/"

    def items(self) -> list[AtlasChange]:
        rows = FieldChange.objects.select_related("work").only(
            "change_id", "field", "old", "new", "work__slug"
        )
        changes = AtlasChange.objects.defer("snapshot").order_by("-at", "-id")
        return list(changes.prefetch_related(Prefetch("fields", queryset=rows))[:FEED_SIZE])

    def _lines(self, change: AtlasChange) -> list[str]:
        rows = list(change.fields.all())
        lines = [
            f"{row.work.slug}: added"
            if row.field == ADDED
            else f"{row.work.slug}: {row.field} {row.old!r} → {row.new!r}"
            for row in rows[:CHANGE_LINES]
        ]
        more = len(rows) - CHANGE_LINES
        return lines + ([f"… and {more} more"] if more > 0 else [])

    def item_title(self, change: AtlasChange) -> str:
        return f"Data version {change.pk}: {change.summary}"

    def item_description(self, change: AtlasChange) -> str:
        return "\n".join(self._lines(change)) or change.summary

    def item_link(self, change: AtlasChange) -> str:
        return f"/api/v1/export/versions/{change.pk}/?format=json"

    def item_pubdate(self, change: AtlasChange) -> datetime:
        return change.at

    def item_categories(self, change: AtlasChange) -> list[str]:
        return [change.kind]


def _cached_by_version(name: str, render: Callable[[HttpRequest], HttpResponse]):
    """Serve ``render``'s answer from the cache keyed by data version and normalised
    query, with an ETag and Last-Modified from the same version (a 304 when unchanged)."""

    def view(request: HttpRequest) -> HttpResponse:
        version = selectors.data_version()
        # The feed's links are absolute: the site's own address is part of the answer.
        site = request.build_absolute_uri("/")
        key = f"feed:{name}:{version.tag}:{site}:{query_normalised(request.GET)}"
        etag = '"' + hashlib.sha256(key.encode()).hexdigest()[:32] + '"'
        modified = version.at
        conditional = get_conditional_response(
            request, etag=etag, last_modified=int(modified.timestamp())
        )
        if conditional is not None:
            return conditional
        cached = cache.get(key)
        if cached is None:
            response = render(request)
            if response.status_code != 200:
                return response
            cached = (response.content, response["Content-Type"])
            cache.set(key, cached, settings.API_CACHE_SECONDS)
        response = HttpResponse(cached[0], content_type=cached[1])
        response["ETag"], response["Last-Modified"] = etag, http_date(modified.timestamp())
        return response

    return view


def _works_feed(request: HttpRequest) -> HttpResponse:
    filterset = WorkFilter(request.GET, queryset=selectors.work_queryset())
    unknown = sorted(set(request.GET) - set(filterset.filters))
    if unknown:
        allowed = ", ".join(sorted(filterset.filters))
        return _bad_request({name: [f"unknown parameter; allowed: {allowed}"] for name in unknown})
    if not filterset.is_valid():
        return _bad_request({name: list(errors) for name, errors in filterset.errors.items()})
    request.atlas_filterset = filterset  # type: ignore[attr-defined]
    return WorkFeed()(request)


def _bad_request(errors: dict[str, list[str]]) -> HttpResponse:
    text = "\n".join(f"{name}: {' '.join(messages)}" for name, messages in errors.items())
    return HttpResponseBadRequest(text, content_type="text/plain; charset=utf-8")


works_feed = _cached_by_version("works", _works_feed)
changes_feed = _cached_by_version("changes", lambda request: ChangeFeed()(request))


def feed_query(params: QueryDict) -> str:
    """The works feed's query for Explore's current parameters (no page, no sort)."""
    kept = params.copy()
    for name in ("page", "ordering"):
        kept.pop(name, None)
    return kept.urlencode()
