"""The runs API (v1), registered as ``runs`` in ``loopatlas/api/urls.py``.

- ``POST /api/v1/runs/``: submit (201 with the run and its ``cancel_token``, returned only
  here; 400 naming the field; 429 naming the limit: this address's active runs
  ``PLAYGROUND_VISITOR_ACTIVE`` or submit rate ``PLAYGROUND_VISITOR_SUBMITS``, or the
  site-wide ``PLAYGROUND_MAX_QUEUED``; 503 when the run queue (the broker) cannot be
  reached: the run is then stored failed with the reason, holding no queue slot).
- ``GET /api/v1/runs/`` (recent first, paginated) and ``GET /api/v1/runs/<id>/``.
- ``GET /api/v1/runs/<id>/tokens/``: the token records as JSON, or CSV with
  ``?format=csv`` / ``Accept: text/csv`` (one row per token, cumulative per loop).
- ``POST /api/v1/runs/<id>/cancel/``: 202 for the run's creator (its ``cancel_token`` in
  the ``X-Cancel-Token`` header, or the page session that started it, with its CSRF
  token as the page's forms send it); the
  run stops between tokens, ``cancelled``. Anyone else: 403.
- ``POST /api/v1/runs/<id>/branch/`` with ``position`` and ``token_id``: a sibling whose
  prompt is the run's tokens before that generated position plus the chosen token, same
  settings (``services.run_branch_submit``); 201 as a submit, with ``compare_url``; 400
  naming ``position`` or ``token_id``; 429 and 503 as a submit. Anyone may branch any
  run; the branch belongs to who made it and counts against their limits, as a sibling.
- ``GET /api/v1/runs/models/``: the configured checkpoints (T, availability).
- ``GET /api/v1/runs/compare/?runs=a,b,c``: one to three runs of one prompt and model
  side by side (``playground.comparison``), as JSON or, with ``?format=csv``, one CSV row
  per position and run; 400 naming the problem (a bad or unknown id, more than three
  runs, different prompts or models).

The live events are not here but at ``/runs/<id>/events`` (``playground.events``).
"""

import csv
import io
from collections.abc import Callable
from typing import NoReturn

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, status, viewsets
from rest_framework.authentication import SessionAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import (
    APIException,
    NotFound,
    PermissionDenied,
    Throttled,
    ValidationError,
)
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from loopatlas.api.conventions import StrictFilterBackend
from loopatlas.middleware import RETRY_AFTER_S
from loopatlas.spreadsheet import inert
from playground import selectors, services
from playground.checkpoints import model_catalog
from playground.comparison import COMPARE_MAX, CompareError, UnknownRun, runs_compare
from playground.models import Run
from playground.serializers import (
    RunBranchSerializer,
    RunCreatedSerializer,
    RunCreateSerializer,
    RunSerializer,
    comparison_data,
    comparison_rows,
)
from playground.throttles import RunSubmitThrottle
from playground.visitors import secret_new, session_secret, visitor_address

UUID_PATTERN = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
ERRORS = {
    400: OpenApiResponse(description="Invalid parameters; the body names them."),
    404: OpenApiResponse(description="No such run or page."),
}


class QueueFullError(APIException):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_code = "queue_full"


class BrokerDownError(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_code = "broker_unavailable"
    wait = RETRY_AFTER_S  # DRF sends it as Retry-After, as the site's other 503s do


class TokensCSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        out = io.StringIO()
        rows = ([inert(cell) if isinstance(cell, str) else cell for cell in row] for row in data)
        csv.writer(out, lineterminator="\n").writerows(rows)
        return out.getvalue().encode(self.charset)


@extend_schema_view(
    list=extend_schema(responses={200: RunSerializer, **ERRORS}),
    retrieve=extend_schema(responses={200: RunSerializer, **ERRORS}),
)
class RunViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Playground runs: submit, read, export tokens, cancel."""

    queryset = Run.objects.none()
    serializer_class = RunSerializer
    filter_backends = [StrictFilterBackend]
    lookup_field = "id"
    lookup_value_regex = UUID_PATTERN

    def get_throttles(self) -> list[BaseThrottle]:
        return [RunSubmitThrottle()] if self.action in ("create", "branch") else []

    def throttled(self, request: Request, wait: float | None) -> NoReturn:
        raise Throttled(wait, detail=RunSubmitThrottle().refusal(wait))

    def get_queryset(self) -> QuerySet[Run]:
        return selectors.run_list()

    def get_object(self) -> Run:
        self.filter_queryset(self.get_queryset())  # refuses unknown parameters
        run = selectors.run_get(run_id=self.kwargs["id"])
        if run is None:
            raise NotFound(f"No run with id {self.kwargs['id']}.")
        return run

    @extend_schema(
        request=RunCreateSerializer,
        responses={
            201: RunCreatedSerializer,
            400: ERRORS[400],
            429: OpenApiResponse(description="Over a limit, which the body names."),
            503: OpenApiResponse(description="The run queue is unreachable; nothing queued."),
        },
    )
    def create(self, request: Request, *args, **kwargs) -> Response:
        form = RunCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        return self._submitted(
            request, lambda **who: services.run_submit(**form.validated_data, **who)
        )

    @extend_schema(
        request=RunBranchSerializer,
        responses={
            201: RunCreatedSerializer,
            400: ERRORS[400],
            404: ERRORS[404],
            429: OpenApiResponse(description="Over a limit, which the body names."),
            503: OpenApiResponse(description="The run queue is unreachable; nothing queued."),
        },
    )
    @action(detail=True, methods=["post"])
    def branch(self, request: Request, id: str) -> Response:
        run = self.get_object()
        form = RunBranchSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        response = self._submitted(
            request,
            lambda **who: services.run_branch_submit(run=run, **form.validated_data, **who),
        )
        compare = f"{reverse('playground:compare')}?runs={run.id},{response.data['id']}"
        response.data["compare_url"] = request.build_absolute_uri(compare)
        return response

    def _submitted(self, request: Request, submit: Callable[..., Run]) -> Response:
        """201 with the run ``submit`` made for this address (its cancel token shown
        once), or the error naming what refused it."""
        token = secret_new()
        try:
            address = visitor_address(request.META)  # the API's visitor is its address
            run = submit(visitor=address, address=address, owner_secret=token)
        except DjangoValidationError as exc:
            raise ValidationError(exc.message_dict) from exc
        except (services.QueueFull, services.VisitorLimit) as exc:
            raise QueueFullError(str(exc)) from exc
        except services.BrokerUnavailable as exc:
            raise BrokerDownError(str(exc)) from exc
        run.cancel_token = token  # type: ignore[attr-defined]  # shown once, never stored
        body = RunCreatedSerializer(run).data
        return Response(body, status=status.HTTP_201_CREATED, headers={"Location": body["url"]})

    @extend_schema(
        responses={200: OpenApiResponse(description="Token records (JSON or CSV)."), **ERRORS}
    )
    @action(
        detail=True,
        methods=["get"],
        renderer_classes=[JSONRenderer, TokensCSVRenderer],
        pagination_class=None,
    )
    def tokens(self, request: Request, id: str) -> Response:
        run = self.get_object()
        if request.accepted_renderer.format == "csv":
            filename = f"run-{run.id}-tokens.csv"
            return Response(
                list(selectors.run_token_rows(run=run)),
                headers={"Content-Disposition": f'attachment; filename="{filename}"'},
            )
        return Response(selectors.run_token_dicts(run=run))

    @extend_schema(
        request=None,
        responses={
            202: RunSerializer,
            403: OpenApiResponse(
                description="Not the run's creator, or its page session without the CSRF token."
            ),
            **ERRORS,
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, id: str) -> Response:
        secret = request.headers.get("X-Cancel-Token")
        if not secret:  # the page's session: its cookie rides on any site's form, so CSRF
            # Django's request (DRF's would parse the body, JSON only, to find the token).
            SessionAuthentication().enforce_csrf(request._request)  # type: ignore[arg-type]
            secret = session_secret(request)
        try:
            run = services.run_stop(run=self.get_object(), secret=secret)
        except services.NotOwner as exc:
            raise PermissionDenied(str(exc)) from exc
        return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        responses={
            200: OpenApiResponse(description="The configured checkpoints."),
            400: ERRORS[400],
        }
    )
    @action(detail=False, methods=["get"], pagination_class=None)
    def models(self, request: Request) -> Response:
        return Response([model.to_dict() for model in model_catalog()])


class RunCompareViewSet(viewsets.GenericViewSet):
    """One to three runs of one prompt and model side by side: the first position where
    their tokens diverge, each run's exit loop per position and the difference, and their
    stats with the rows that differ named."""

    queryset = Run.objects.none()
    pagination_class = None
    filter_backends = [StrictFilterBackend]
    extra_query_params = ("runs",)
    renderer_classes = [JSONRenderer, TokensCSVRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "runs",
                OpenApiTypes.STR,
                required=True,
                pattern=f"^{UUID_PATTERN}(,{UUID_PATTERN}){{0,{COMPARE_MAX - 1}}}$",
                description=f"1–{COMPARE_MAX} comma-separated run ids, of one prompt and model.",
            )
        ],
        responses={
            (200, "application/json"): OpenApiResponse(
                OpenApiTypes.OBJECT, description="The comparison."
            ),
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="One row per position and run."
            ),
            400: OpenApiResponse(
                description="A malformed id, more than three runs, or runs of different "
                "prompts or models; the body names it."
            ),
            404: OpenApiResponse(description="A well-formed id of no run; the body names it."),
        },
    )
    def list(self, request: Request) -> Response:
        self.filter_queryset(self.get_queryset())  # refuses unknown parameters
        try:
            comparison = runs_compare(raw=request.query_params.get("runs", ""))
        except UnknownRun as exc:
            raise NotFound(str(exc)) from exc
        except CompareError as exc:
            raise ValidationError({"runs": [str(exc)]}) from exc
        if request.accepted_renderer.format == "csv":
            return Response(
                list(comparison_rows(comparison)),
                headers={"Content-Disposition": 'attachment; filename="runs-compare.csv"'},
            )
        return Response(comparison_data(comparison))
