"""The atlas's REST API (v1): works, facets, timeline, compare, export, suggestions,
proposals.

Every read takes the Explore parameters through the one ``WorkFilter`` and answers
conditional requests; the registry of routes is ``loopatlas/api/urls.py``.
"""

from collections.abc import Callable, Sequence
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.http import HttpResponseBase
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
)
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from atlas import selectors, taxonomy
from atlas.api.renderers import EXPORT_RENDERERS, ExportRenderer
from atlas.explore import facet_panels
from atlas.exports import EXPORT_FORMATS, export_filename
from atlas.exportstore import file_response, stored_export
from atlas.filters import SEARCH_MAX_LENGTH, ProposalFilter, SlugListField, WorkFilter
from atlas.models import Author, Proposal, RelatedWork, Work, WorkRow
from atlas.proposals import ProposalDuplicate, ProposalInvalid, proposal_submit
from atlas.records import RecordError
from atlas.serializers import (
    AuthorSerializer,
    ChangeSerializer,
    ChangesSerializer,
    ComparisonSerializer,
    ExportDocumentSerializer,
    FacetsSerializer,
    NewWorkSerializer,
    ProposalConflictSerializer,
    ProposalSerializer,
    RelatedSerializer,
    SuggestionSerializer,
    TimelineSerializer,
    WorkSerializer,
)
from atlas.services import suggestion_submit
from atlas.throttles import ExportThrottle, ProposalThrottle, SuggestionThrottle
from loopatlas.api.conventions import ContentVersion, StrictFilterBackend, conditional

ERRORS = {
    400: OpenApiResponse(description="Invalid parameters; the body names them."),
    404: OpenApiResponse(description="No such work or page."),
}


class AtlasReadMixin(GenericAPIView):
    """Filtered works with the Explore parameters; ETags from the data version."""

    content_version: ContentVersion  # set by @conditional before the action runs

    queryset = Work.objects.none()
    filterset_class = WorkFilter
    filter_backends = [StrictFilterBackend]

    def get_queryset(self) -> QuerySet[Work]:
        return selectors.work_queryset()

    def get_filterset(self) -> WorkFilter:
        backend = StrictFilterBackend()
        return backend.get_valid_filterset(self.request, self.get_queryset(), self)


@extend_schema(responses={200: WorkSerializer, **ERRORS})
class WorkViewSet(AtlasReadMixin, viewsets.ReadOnlyModelViewSet):
    """Works, filtered exactly as on Explore; ``page_size`` up to 200."""

    serializer_class = WorkSerializer
    lookup_field = "slug"

    @conditional(selectors.data_version)
    def list(self, request: Request, *args, **kwargs) -> Response:
        """DRF's list, read as values (``WorkRow``) rather than model instances."""
        works = selectors.work_rows(self.filter_queryset(self.get_queryset()))
        page = [WorkRow(values) for values in self.paginate_queryset(works) or ()]
        return self.get_paginated_response(self.get_serializer(page, many=True).data)

    @conditional(selectors.data_version)
    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        return super().retrieve(request, *args, **kwargs)

    @extend_schema(responses={200: RelatedSerializer, 404: ERRORS[404]}, filters=False)
    @action(detail=True, pagination_class=None, filter_backends=[])
    @conditional(selectors.data_version)
    def related(self, request: Request, slug: str) -> Response:
        """Works it names, works that name it, and its nearest works, each with why."""
        unknown = sorted(set(request.query_params) - {"format"})
        if unknown:
            raise ValidationError(
                {name: ["unknown parameter; allowed: format"] for name in unknown}
            )
        lists = selectors.work_related(work=self.get_object())
        page = reverse("atlas:work", kwargs={"slug": "x"}).removesuffix("x/")

        def item(work: Work, reason: dict) -> dict:
            return {
                "slug": work.slug,
                "title": work.title,
                "month": f"{work.month:%Y-%m}",
                "recurrence_family": work.recurrence_family,
                "page_url": request.build_absolute_uri(f"{page}{work.slug}/"),
                **reason,
            }

        return Response(
            {
                kind: [item(*pair) for pair in getattr(lists, kind)]
                for kind in RelatedWork.Kind.values
            }
        )

    def get_object(self) -> Work:
        slug = self.kwargs["slug"]
        work = self.get_queryset().filter(slug=slug).first()
        if work is None:
            raise NotFound(f"No work with slug {slug!r}.")
        return work


@extend_schema(responses={200: AuthorSerializer, **ERRORS})
class AuthorViewSet(viewsets.ReadOnlyModelViewSet):
    """Authors with their number of works, most works first; ``search`` finds them by any
    part of the name (case, accents and hyphens ignored). A work list by author:
    ``/api/v1/works/?author=<slug>`` (any of several)."""

    serializer_class = AuthorSerializer
    queryset = Author.objects.none()
    filter_backends = [StrictFilterBackend]
    extra_query_params = ("search",)
    lookup_field = "slug"

    def get_queryset(self) -> QuerySet[Author]:
        search = self.request.query_params.get("search", "")
        if len(search) > SEARCH_MAX_LENGTH:
            raise ValidationError({"search": [f"at most {SEARCH_MAX_LENGTH} characters"]})
        return selectors.author_list(search=search)

    @extend_schema(
        parameters=[OpenApiParameter("search", OpenApiTypes.STR, description="Part of the name.")]
    )
    @conditional(selectors.data_version)
    def list(self, request: Request, *args, **kwargs) -> Response:
        self.filter_queryset(self.get_queryset())  # refuses unknown parameters
        return super().list(request, *args, **kwargs)

    @conditional(selectors.data_version)
    def retrieve(self, request: Request, *args, **kwargs) -> Response:
        self.filter_queryset(self.get_queryset())
        author = selectors.author_list().filter(slug=self.kwargs["slug"]).first()
        if author is None:
            raise NotFound(f"No author with slug {self.kwargs['slug']!r}.")
        return Response(self.get_serializer(author).data)


class FacetViewSet(AtlasReadMixin, viewsets.GenericViewSet):
    """Each facet's vocabulary with the count per value for the current filters.

    Single-valued facets are counted ignoring their own parameter (what choosing that
    value would add); multi-valued ones and topics within the current results.
    """

    pagination_class = None

    @extend_schema(responses={200: FacetsSerializer, 400: ERRORS[400]})
    @conditional(selectors.data_version)
    def list(self, request: Request) -> Response:
        filterset = self.get_filterset()
        panels = facet_panels(filterset, selectors.facet_counts(filterset=filterset))
        facets = [
            {
                "name": panel.name,
                "label": panel.label,
                "multi": panel.multi,
                "values": [vars(option) for option in [*panel.options, *panel.more]],
            }
            for panel in panels
        ]
        return Response({"facets": facets})


class TimelineViewSet(AtlasReadMixin, viewsets.GenericViewSet):
    """Works per month of first publication and recurrence family (what the chart draws)."""

    pagination_class = None

    @extend_schema(responses={200: TimelineSerializer, 400: ERRORS[400]})
    @conditional(selectors.data_version)
    def list(self, request: Request) -> Response:
        buckets = selectors.timeline_counts(queryset=self.filter_queryset(self.get_queryset()))
        rows = [vars(bucket) | {"month": f"{bucket.month:%Y-%m}"} for bucket in buckets]
        return Response({"count": sum(b.works for b in buckets), "buckets": rows})


COMPARED_FIELDS = (*(facet.name for facet in taxonomy.FACETS), "month")


class CompareViewSet(viewsets.GenericViewSet):
    """One to three works side by side, with the compared fields whose values differ."""

    queryset = Work.objects.none()
    pagination_class = None
    filter_backends = [StrictFilterBackend]
    extra_query_params = ("works",)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "works", OpenApiTypes.STR, required=True, description="1–3 comma-separated slugs."
            )
        ],
        responses={200: ComparisonSerializer, 400: ERRORS[400]},
    )
    @conditional(selectors.data_version)
    def list(self, request: Request) -> Response:
        self.filter_queryset(self.get_queryset())  # refuses unknown parameters
        slugs = _compare_slugs(request.query_params.get("works", ""))
        comparison = selectors.works_compare(slugs=slugs)
        if comparison.unknown:
            raise ValidationError({"works": [f"no work with slug {', '.join(comparison.unknown)}"]})
        works = WorkSerializer(comparison.works, many=True, context={"request": request}).data
        differences = [field for field in COMPARED_FIELDS if comparison.differs(field)]
        return Response({"works": works, "differences": differences})


def _compare_slugs(raw: str) -> list[str]:
    try:
        slugs = SlugListField(required=False).clean(raw)
    except DjangoValidationError as exc:
        raise ValidationError({"works": exc.messages}) from exc
    if not 1 <= len(slugs) <= selectors.COMPARE_MAX:
        raise ValidationError(
            {"works": [f"give 1 to {selectors.COMPARE_MAX} work slugs, not {len(slugs)}"]}
        )
    return slugs


# An export's answers, in each format it offers (JSON, CSV, BibTeX, RIS).
EXPORT_RESPONSES = {
    (200, fmt.media_type): OpenApiResponse(
        ExportDocumentSerializer if fmt.name == "json" else OpenApiTypes.STR,
        description=fmt.label,
    )
    for fmt in EXPORT_FORMATS.values()
} | {429: OpenApiResponse(description="Too many exports; retry later.")}


class ExportViewSet(AtlasReadMixin, viewsets.GenericViewSet):
    """The filtered works as a file: JSON, CSV, BibTeX or RIS (``format`` or ``Accept``).

    Each file states the data version it was made from; the CSV has one row per work,
    with list fields joined by ``;``.
    """

    content_version: selectors.DataVersion  # @conditional(selectors.data_version) sets it
    pagination_class = None
    renderer_classes = EXPORT_RENDERERS
    metadata_class = None  # OPTIONS is a 405: describing the endpoint is not a file
    throttle_classes = [ExportThrottle]

    @extend_schema(
        responses=EXPORT_RESPONSES | {400: ERRORS[400]},
    )
    @conditional(selectors.data_version)
    def list(self, request: Request) -> HttpResponseBase:
        works = self.filter_queryset(self.get_queryset())
        version = self.content_version

        def rows() -> list[dict[str, Any]]:
            return list(WorkSerializer(works, many=True, context={"request": request}).data)

        if set(request.query_params) <= {"format"}:  # the whole atlas: stored per version
            return _stored_export(request, version, rows)
        return _export_response(request, rows(), version.label)


def _export_response(request: Request, rows: Sequence[dict[str, Any]], version: str) -> Response:
    return Response({"version": version, "rows": rows}, headers=_export_headers(request, version))


def _export_headers(request: Request, version: str) -> dict[str, str]:
    fmt = EXPORT_FORMATS[request.accepted_renderer.format]
    disposition = f'attachment; filename="{export_filename(fmt, version)}"'
    return {"Content-Disposition": disposition, "X-Atlas-Data-Version": version}


def _stored_export(
    request: Request, version: selectors.DataVersion, rows: Callable[[], Sequence[dict[str, Any]]]
) -> HttpResponseBase:
    """The whole atlas of ``version`` in the negotiated format, from the export store:
    the same bytes the renderer makes, made once."""
    renderer: ExportRenderer = request.accepted_renderer  # type: ignore[assignment]
    key = f"{version.tag}|{request.build_absolute_uri('/')}|{renderer.format}"
    path = stored_export(key, lambda: renderer.render({"version": version.label, "rows": rows()}))
    content_type = f"{renderer.media_type}; charset={renderer.charset}"
    headers = _export_headers(request, version.label)
    return file_response(path, content_type=content_type, headers=headers)


class PinnedExportViewSet(viewsets.GenericViewSet):
    """Every work exactly as data version ``version`` exported it, byte for byte, in any
    export format: what a paper cites as "Loop Atlas data version X". A version is its own
    resource, so it takes no filters (it is the whole atlas as it was)."""

    queryset = Work.objects.none()
    filter_backends = [StrictFilterBackend]  # no filterset: any parameter but format is a 400
    pagination_class = None
    renderer_classes = EXPORT_RENDERERS
    metadata_class = None
    throttle_classes = [ExportThrottle]
    lookup_field = "version"
    lookup_value_regex = r"[0-9]+|[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z"

    @extend_schema(
        responses=EXPORT_RESPONSES | ERRORS,
        parameters=[
            OpenApiParameter(
                "version",
                OpenApiTypes.STR,
                OpenApiParameter.PATH,
                description="A data version: its number, or its time as exports state it "
                "(YYYY-MM-DDTHH:MM:SSZ, the newest change of that second).",
            )
        ],
    )
    def retrieve(self, request: Request, version: str) -> HttpResponseBase:
        self.filter_queryset(self.get_queryset())  # refuses unknown parameters
        try:
            pinned = selectors.data_version_find(version)
        except selectors.UnknownVersion as exc:
            raise NotFound(str(exc)) from exc

        def rows() -> list[dict[str, Any]]:
            fields = list(WorkSerializer().fields)  # PostgreSQL's jsonb keeps no key order
            return [
                {name: row[name] for name in fields}
                | {"page_url": request.build_absolute_uri(row["page_url"])}
                for row in selectors.version_rows(pinned)
            ]

        return _stored_export(request, pinned, rows)


def _version(request: Request, name: str) -> selectors.DataVersion:
    try:
        return selectors.data_version_find(request.query_params[name])
    except selectors.UnknownVersion as exc:
        raise ValidationError({name: [str(exc)]}) from exc


class ChangeViewSet(viewsets.GenericViewSet):
    """What each reviewed change after a data version changed: work, field, old and new
    value, when, and the basis of the new value."""

    queryset = Work.objects.none()
    content_version: selectors.DataVersion  # @conditional(selectors.data_version) sets it
    pagination_class = None

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "since",
                OpenApiTypes.STR,
                description="A data version (number or time); omitted: every change.",
            )
        ],
        responses={200: ChangesSerializer, 400: ERRORS[400]},
    )
    @conditional(selectors.data_version)
    def list(self, request: Request) -> Response:
        unknown = sorted(set(request.query_params) - {"since", "format"})
        if unknown:
            raise ValidationError(
                {name: ["unknown parameter; allowed: format, since"] for name in unknown}
            )
        since = _version(request, "since").change_id if "since" in request.query_params else 0
        changes = selectors.changes_since(after=since)
        current = self.content_version
        return Response(
            {
                "since": since,
                "data_version": current.label,
                "data_version_number": current.change_id,
                "count": len(changes),
                "changes": ChangeSerializer(changes, many=True).data,
            }
        )


class SuggestionViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    """Propose a correction of one field of one work; curators review it before it applies."""

    serializer_class = SuggestionSerializer
    throttle_classes = [SuggestionThrottle]

    @extend_schema(
        responses={
            201: SuggestionSerializer,
            400: ERRORS[400],
            429: OpenApiResponse(description="Too many suggestions; retry later."),
        }
    )
    def create(self, request: Request, *args, **kwargs) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            suggestion = suggestion_submit(**serializer.validated_data)
        except RecordError as exc:
            raise ValidationError({"proposed_value": [str(exc)]}) from exc
        return Response(SuggestionSerializer(suggestion).data, status=status.HTTP_201_CREATED)


class ProposalViewSet(mixins.CreateModelMixin, mixins.ListModelMixin, viewsets.GenericViewSet):
    """Propose a new work (checked as the data file is, duplicates refused), and the intake
    log: every proposal with its status and the curator's public reason, newest first."""

    serializer_class = ProposalSerializer
    filterset_class = ProposalFilter

    def get_queryset(self) -> QuerySet[Proposal]:
        return Proposal.objects.select_related("work").order_by("-created_at", "-id")

    def get_throttles(self):
        return [ProposalThrottle()] if self.action == "create" else []

    @extend_schema(
        request=NewWorkSerializer,
        responses={
            201: ProposalSerializer,
            400: OpenApiResponse(description="A field breaks its rules; the body names each."),
            409: ProposalConflictSerializer,
            429: OpenApiResponse(description="Too many proposals from this address."),
        },
    )
    def create(self, request: Request, *args, **kwargs) -> Response:
        try:
            proposal = proposal_submit(data=request.data)
        except ProposalInvalid as exc:
            raise ValidationError(exc.errors) from exc
        except ProposalDuplicate as exc:
            return Response(_conflict(exc), status=status.HTTP_409_CONFLICT)
        data = ProposalSerializer(proposal, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(responses={200: ProposalSerializer(many=True), **ERRORS})
    def list(self, request: Request, *args, **kwargs) -> Response:
        return super().list(request, *args, **kwargs)


def _conflict(exc: ProposalDuplicate) -> dict[str, Any]:
    candidate = exc.match.candidate
    duplicate = {
        "kind": candidate.kind,
        "id": candidate.ident,
        "title": candidate.title,
        "url": candidate.url,
        "reason": exc.match.reason,
    }
    return {"detail": str(exc), "duplicate": duplicate}
