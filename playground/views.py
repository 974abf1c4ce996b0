"""Playground pages: the prompt page, a run's permalink, recent runs, Stop without JavaScript,
"Compare with…", "compare with full depth" and branching at a token, the compare view of
up to three runs, and the Frontier view.

Each view validates its input, calls one selector or service and renders. The prompt
form posts here (htmx or a plain POST); its parameters go through the same serializer and
service as ``POST /api/v1/runs/``, and ``static/js/playground.js`` then follows the run
over SSE (``/runs/<id>/events``, in ``playground.events``). htmx requests get the
swapped region only.
"""

import uuid
from collections.abc import Callable

from django.core.exceptions import ValidationError
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseForbidden
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from loopatlas.http import HtmxHttpRequest
from playground import selectors, services
from playground.checkpoints import model_catalog, model_frontier, model_get
from playground.comparison import CompareError, UnknownRun, runs_compare
from playground.forms import CompareForm, RunForm, model_initial
from playground.frontier import (
    POINT_PARAMETER,
    depth_tables,
    frontier_rows,
    point_find,
    point_label,
    point_settings,
    point_try_url,
)
from playground.models import Run
from playground.pages import RunView, run_context, run_view
from playground.serializers import RunBranchSerializer, RunCreateSerializer
from playground.services import MAX_PROMPT_CHARS
from playground.throttles import RunSubmitThrottle
from playground.visitors import session_secret, visitor_address, visitor_of_session

TEMPLATE = "playground/playground.html"
COMPARE_TEMPLATE = "playground/compare.html"
RECENT_RUNS = 10
LISTED_RUNS = 50
# The form's settings a run's page or a query string may fill in.
SETTING_FIELDS = (
    "exit_rule",
    "q",
    "kl_threshold",
    "act_eps",
    "loops",
    "extrapolate",
    "kv_policy",
    "max_new_tokens",
    "seed",
)
SAMPLING_FIELDS = ("decoding", "temperature", "top_p")


@require_http_methods(["GET", "POST"])
def index(request: HtmxHttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _submit(request, RunForm(request.POST))
    form = RunForm(initial=_initial_from_query(request.GET))
    return _page(request, form, frontier_note=_frontier_note(request.GET))


def _initial_from_query(query) -> dict[str, object]:
    """Settings to start from, as links give them (``?model=…&exit_rule=fixed&loops=3``,
    the Frontier's "try this setting"): a link naming a model starts from that model's
    own defaults, and what the link sets wins. The form checks them when submitted."""
    model = model_get(name=query.get("model", ""))
    initial: dict[str, object] = {} if model is None else model_initial(model)
    names = ("prompt", "model", *SETTING_FIELDS, *SAMPLING_FIELDS)
    return initial | {name: query[name][:MAX_PROMPT_CHARS] for name in names if query.get(name)}


def _frontier_note(query) -> dict | None:
    """The frontier point a "try this setting" link came from, when it names a stored one."""
    model = model_get(name=query.get("model", ""))
    if model is None or not query.get(POINT_PARAMETER):
        return None
    frontier = model_frontier(model=model)
    point = point_find(frontier, query[POINT_PARAMETER])
    if frontier is None or point is None:
        return None
    return {"model": model.name, "label": point_label(point), "point": point} | {
        "metric": frontier.get("metric", "accuracy"),
        "settings": point_settings(point, frontier),
    }


def _submit(request: HtmxHttpRequest, form: RunForm) -> HttpResponse:
    status = 400
    throttle = RunSubmitThrottle()
    if form.is_valid() and not throttle.allow_page_request(request):
        form.add_error(None, throttle.refusal(throttle.wait()))
        status = 429
    elif form.is_valid():
        try:
            run = _run_submit(request, form.run_parameters())
        except (services.QueueFull, services.VisitorLimit) as exc:
            form.add_error(None, str(exc))
            status = 429
        except services.BrokerUnavailable as exc:
            form.add_error(None, str(exc))
            status = 503
        except ValidationError as exc:
            _add_errors(form, exc)
        else:
            if not request.htmx:
                return redirect(run)
            context = run_context(run_view(run=run, tokens=[])) | {"can_stop": True}
            response = render(request, f"{TEMPLATE}#run-view", context, status=201)
            response["HX-Push-Url"] = run.get_absolute_url()
            response["HX-Trigger"] = "run-created"
            return response
    if request.htmx:
        response = render(request, f"{TEMPLATE}#run-form", {"form": form}, status=status)
        response["HX-Retarget"] = "#run-form"
        response["HX-Reswap"] = "outerHTML"
        return response
    return _page(request, form, status=status)


@require_POST
def run_compare_start(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Start siblings of a run ("Compare with…") and open them in the compare view."""
    run = _run_or_404(run_id)
    form = CompareForm.for_run(run, request.POST)
    if not form.is_valid():
        errors = [
            f"{name}: {' '.join(map(str, messages))}" for name, messages in form.errors.items()
        ]
        return _compare_page(request, errors=errors, status=400)
    variants = form.variants(run)
    return _siblings_start(
        request,
        run,
        lambda **who: services.run_compare_submit(
            run=run, variants=variants, mode=form.cleaned_data["mode"], **who
        ),
        cost=len(variants),  # one submit per run
    )


@require_POST
def run_full_depth_start(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Compare with full depth: a sibling computing every loop, whose settling loops the
    compare view sets against this run's exits."""
    run = _run_or_404(run_id)
    return _siblings_start(
        request, run, lambda **who: [services.run_full_depth_submit(run=run, **who)]
    )


@require_POST
def run_branch_start(request: HttpRequest, run_id: uuid.UUID) -> HttpResponse:
    """Branch a run at a token: a sibling with another token at a generated position,
    opened in the compare view with the branch point marked."""
    run = _run_or_404(run_id)
    checked = RunBranchSerializer(data=request.POST)
    if not checked.is_valid():
        errors = [f"{name}: {' '.join(map(str, msgs))}" for name, msgs in checked.errors.items()]
        return _compare_page(request, errors=errors, status=400)
    return _siblings_start(
        request,
        run,
        lambda **who: [services.run_branch_submit(run=run, **checked.validated_data, **who)],
    )


def _run_or_404(run_id: uuid.UUID) -> Run:
    run = selectors.run_get(run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    return run


def _siblings_start(
    request: HttpRequest, run: Run, submit: Callable[..., list[Run]], cost: int = 1
) -> HttpResponse:
    """Start siblings of ``run`` for this session (``submit`` takes the visitor, its
    address and the owner secret; ``cost`` submits of its rate), then open them with
    ``run`` in the compare view."""
    throttle = RunSubmitThrottle()
    if not throttle.allow_page_request(request, cost=cost):
        return _compare_page(request, errors=[throttle.refusal(throttle.wait())], status=429)
    secret = session_secret(request, create=True)
    try:
        siblings = submit(
            visitor=visitor_of_session(secret),
            address=visitor_address(request.META),
            owner_secret=secret,
        )
    except (services.QueueFull, services.VisitorLimit) as exc:
        return _compare_page(request, errors=[str(exc)], status=429)
    except services.BrokerUnavailable as exc:
        return _compare_page(request, errors=[str(exc)], status=503)
    except ValidationError as exc:
        return _compare_page(request, errors=_messages(exc), status=400)
    ids = ",".join(str(item.id) for item in [run, *siblings])
    return redirect(f"{reverse('playground:compare')}?runs={ids}")


def _messages(error: ValidationError) -> list[str]:
    if not hasattr(error, "error_dict"):
        return error.messages
    return [f"{name}: {' '.join(msgs)}" for name, msgs in error.message_dict.items()]


@require_GET
def run_compare(request: HtmxHttpRequest) -> HttpResponse:
    """Up to three runs of one prompt side by side (``playground.comparison``)."""
    try:
        comparison = runs_compare(raw=request.GET.get("runs", ""))
    except UnknownRun as exc:  # a well-formed id of no run: not found, as in the API
        return _compare_page(request, errors=[str(exc)], status=404)
    except CompareError as exc:
        return _compare_page(request, errors=[str(exc)], status=400)
    context = {"comparison": comparison}
    if _region_only(request):  # the page's module refreshing the comparison while runs stream
        return render(request, f"{COMPARE_TEMPLATE}#comparison", context)
    return render(request, COMPARE_TEMPLATE, context)


def _compare_page(request: HttpRequest, *, errors: list[str], status: int) -> HttpResponse:
    return render(request, COMPARE_TEMPLATE, {"errors": errors}, status=status)


def _run_submit(request: HttpRequest, params: dict) -> Run:
    """The API's own checks and service, on the form's parameters; the run belongs to
    this browser session, and counts against its address's slots too."""
    checked = RunCreateSerializer(data=params)
    if not checked.is_valid():
        raise ValidationError(checked.errors)
    secret = session_secret(request, create=True)
    return services.run_submit(
        **checked.validated_data,
        visitor=visitor_of_session(secret),
        address=visitor_address(request.META),
        owner_secret=secret,
    )


def _add_errors(form: RunForm, error: ValidationError) -> None:
    if not hasattr(error, "error_dict"):
        form.add_error(None, error)
        return
    for name, messages in error.message_dict.items():
        form.add_error(name if name in form.fields else None, messages)


def _page(
    request: HtmxHttpRequest,
    form: RunForm,
    *,
    run: RunView | None = None,
    can_stop: bool = False,
    status: int = 200,
    frontier_note: dict | None = None,
) -> HttpResponse:
    context = run_context(run) | {
        "form": form,
        "frontier_note": frontier_note,
        "recent_runs": selectors.run_list()[:RECENT_RUNS],
        "can_stop": can_stop,
    }
    return render(request, TEMPLATE, context, status=status)


@require_GET
def run_detail(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = selectors.run_get(run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    view = run_view(run=run, tokens=list(selectors.run_tokens(run=run)))
    owned = services.run_owned(run=run, secret=session_secret(request))
    if _region_only(request):
        return render(request, f"{TEMPLATE}#run-view", run_context(view) | {"can_stop": owned})
    form = RunForm(initial=_initial(run))
    return _page(request, form, run=view, can_stop=owned)


def _region_only(request: HtmxHttpRequest) -> bool:
    """An htmx swap, not htmx restoring a page from history (which needs all of it)."""
    return bool(request.htmx) and not request.htmx.history_restore_request


def _initial(run) -> dict:
    """The run's own settings in the form, to tweak and run again."""
    params = run.params
    sample = bool(params.get("temperature"))
    initial = {
        "prompt": run.prompt,
        "model": run.model,
        "decoding": "sample" if sample else "greedy",
    }
    for name in SETTING_FIELDS:
        if params.get(name) is not None:
            initial[name] = params[name]
    if sample:
        initial |= {"temperature": params["temperature"], "top_p": params.get("top_p")}
    return initial


@require_GET
def run_list(request: HtmxHttpRequest) -> HttpResponse:
    if _region_only(request):  # the prompt page's list, refreshed when a run starts or ends
        context: dict[str, object] = {"recent_runs": selectors.run_list()[:RECENT_RUNS]}
        return render(request, f"{TEMPLATE}#recent-runs", context)
    context = {"recent_runs": selectors.run_list()[:LISTED_RUNS], "all_runs": True}
    return render(request, "playground/runs.html", context)


@require_POST
def run_stop(request: HtmxHttpRequest, run_id: uuid.UUID) -> HttpResponse:
    run = selectors.run_get(run_id=run_id)
    if run is None:
        raise Http404("No such run.")
    try:
        services.run_stop(run=run, secret=session_secret(request))
    except services.NotOwner as exc:
        return HttpResponseForbidden(str(exc))
    if request.htmx:
        return HttpResponse(status=204)  # the stream reports the run stopping
    return redirect(run)


@require_GET
def frontier(request: HttpRequest) -> HttpResponse:
    """Every configured model's stored depth-accuracy frontier: charts, the table of its
    Pareto points (every point with ``?points=all``), a CSV link."""
    models = []
    for i, model in enumerate(model_catalog()):
        stored = _with_try_urls(model, model_frontier(model=model))
        rows = frontier_rows(stored) if stored else []
        models.append(
            {
                "model": model,
                "frontier": stored,
                "rows": rows,
                "pareto_rows": [row for row in rows if row["pareto"]],
                "slug": f"frontier-{i}",
                "data_id": f"frontier-{i}-data",
                "depth": depth_tables(stored) if stored else None,
                "depth_id": f"frontier-{i}-calibration",
            }
        )
    context = {"models": models, "all_points": request.GET.get("points") == "all"}
    return render(request, "playground/frontier.html", context)


def _with_try_urls(model, frontier: dict | None) -> dict | None:
    """Each point with the link that tries its setting in the playground."""
    if frontier is None or not model.available:
        return frontier
    points = [
        point | {"try_url": point_try_url(model=model, frontier=frontier, point=point)}
        for point in frontier["points"]
        if isinstance(point, dict)
    ]
    return frontier | {"points": points}


@require_GET
def frontier_csv(request: HttpRequest, name: str) -> FileResponse:
    model = model_get(name=name)
    path = None if model is None else model.path / "frontier.csv"
    if path is None or not path.is_file():
        raise Http404(f"no stored frontier for model {name!r}")
    return FileResponse(path.open("rb"), as_attachment=True, filename=f"{name}-frontier.csv")
