"""Atlas pages: Explore, a work, an author, the map, Compare; picking works to compare;
suggesting corrections; proposing new works and the intake log.

Each view validates its input, calls one selector or service and renders. Pages are
whole documents; htmx requests get the swapped region only (``template#partial``).
"""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from atlas import charts, citation, exports, scope, selectors
from atlas.explore import author_page, explore_page
from atlas.feeds import feed_query
from atlas.filters import ProposalFilter, SlugListField
from atlas.forms import ProposalForm, SuggestionForm
from atlas.models import Author, Proposal, Work
from atlas.picks import picks_get, picks_set
from atlas.proposals import ProposalDuplicate, ProposalInvalid, proposal_submit
from atlas.records import CORRECTABLE_FIELDS, SLUG_RE, RecordError
from atlas.serializers import WorkSerializer
from atlas.services import suggestion_submit
from atlas.throttles import ProposalThrottle, SuggestionThrottle
from loopatlas.http import HtmxHttpRequest

COMPARE_REFUSED = "You can compare up to three works. Untick one before adding another."
SUGGESTION_THANKS = "Thank you: your suggestion waits for a curator's review."
PROPOSAL_THANKS = "Thank you: your proposal #{pk} waits for a curator's review, in the open below."
INTAKE_PAGE_SIZE = 50


@require_GET
def explore(request: HtmxHttpRequest) -> HttpResponse:
    page = explore_page(params=request.GET)
    template = "atlas/explore.html#explore" if request.htmx else "atlas/explore.html"
    context = {
        "explore": page,
        "picks": picks_get(request.session),
        "feed_query": feed_query(request.GET),
    }
    return render(request, template, context, status=200 if page.filterset.is_valid() else 400)


@require_GET
def work_detail(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    work = get_object_or_404(selectors.work_queryset(), slug=slug)
    field = request.GET.get("suggest")  # "Suggest them" links open the form on that field
    initial = {"field": field} if field in CORRECTABLE_FIELDS else {}
    return _work_page(request, work, form=SuggestionForm(initial=initial))


@require_GET
def atlas_map(request: HtmxHttpRequest) -> HttpResponse:
    """The mention graph of the works Explore's parameters select."""
    filterset = selectors.work_filter(params=request.GET)
    if not filterset.is_valid():
        return render(request, "atlas/map.html", {"filterset": filterset}, status=400)
    found = selectors.atlas_map(queryset=filterset.qs)
    context = {"filterset": filterset, "map": found, "figure": charts.mention_map(found)}
    return render(request, "atlas/map.html", context)


@require_GET
def author_detail(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    author = get_object_or_404(Author, slug=slug)
    page = author_page(author=author, page=request.GET.get("page"))
    context = {"page": page, "picks": picks_get(request.session)}
    return render(request, "atlas/author.html", context)


def _work_page(request: HtmxHttpRequest, work: Work, *, form, status: int = 200) -> HttpResponse:
    row = WorkSerializer(work, context={"request": request}).data
    context = {
        "work": work,
        "form": form,
        "bibtex": exports.bibtex_entry(row),
        "citation_meta": citation.citation_meta(row),
        "json_ld": citation.json_ld_text(citation.scholarly_article(row)),
        "related": selectors.work_related(work=work),
        "authors": selectors.work_authors(work=work),
        "picks": picks_get(request.session),
    }
    return render(request, "atlas/work.html", context, status=status)


@require_POST
def work_suggest(request: HtmxHttpRequest, slug: str) -> HttpResponse:
    work = get_object_or_404(selectors.work_queryset(), slug=slug)
    form, status = SuggestionForm(request.POST), 400
    throttle = SuggestionThrottle()
    if form.is_valid() and not throttle.allow_page_request(request):
        minutes = throttle.wait_minutes()
        form.add_error(None, f"Too many suggestions from your address; try again in {minutes} min.")
        status = 429
    elif form.is_valid():
        try:
            suggestion_submit(work=work, **form.cleaned_data)
        except RecordError as exc:
            form.add_error("proposed_value", str(exc))
        else:
            return _suggested(request, work)
    if request.htmx:
        return render(
            request, "atlas/work.html#suggest", {"work": work, "form": form}, status=status
        )
    return _work_page(request, work, form=form, status=status)


def _suggested(request: HtmxHttpRequest, work: Work) -> HttpResponse:
    if request.htmx:
        context = {"work": work, "form": SuggestionForm(), "thanks": SUGGESTION_THANKS}
        return render(request, "atlas/work.html#suggest", context)
    messages.success(request, SUGGESTION_THANKS)
    return redirect(work)


@require_GET
def compare(request: HtmxHttpRequest) -> HttpResponse:
    raw = request.GET.get("works")
    try:
        slugs = (
            picks_get(request.session) if raw is None else SlugListField(required=False).clean(raw)
        )
    except ValidationError as exc:
        return render(request, "atlas/compare.html", {"errors": exc.messages}, status=400)
    comparison = selectors.works_compare(slugs=slugs)
    return render(request, "atlas/compare.html", {"comparison": comparison})


@require_POST
def compare_pick(request: HtmxHttpRequest) -> HttpResponse:
    """Tick or untick one work for Compare (``picked`` present = ticked)."""
    slug = request.POST.get("slug", "")
    if not SLUG_RE.fullmatch(slug):  # never sent to the database (PostgreSQL refuses NUL)
        raise Http404("Not a work slug.")
    work = get_object_or_404(Work, slug=slug)
    result = picks_set(request.session, slug=work.slug, picked="picked" in request.POST)
    if request.htmx:
        context = {"work": work, "picks": result.picks, "refused": result.refused}
        return render(request, "atlas/compare_pick.html#pick-response", context)
    if result.refused:
        messages.warning(request, COMPARE_REFUSED)
    target = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure())
    return redirect(target if safe else "atlas:explore")


@require_http_methods(["GET", "HEAD", "POST"])
def work_propose(request: HtmxHttpRequest) -> HttpResponse:
    if request.method != "POST":
        return render(request, "atlas/propose.html", {"form": ProposalForm()})
    form, status = ProposalForm(request.POST), 400
    throttle = ProposalThrottle()
    if form.is_valid() and not throttle.allow_page_request(request):
        minutes = throttle.wait_minutes()
        form.add_error(None, f"Too many proposals from your address; try again in {minutes} min.")
        status = 429
    elif form.is_valid():
        try:
            proposal = proposal_submit(data=form.proposal_data())
        except ProposalInvalid as exc:
            form.add_proposal_errors(exc.errors)
        except ProposalDuplicate as exc:
            return render(
                request, "atlas/propose.html", {"form": form, "duplicate": exc.match}, status=409
            )
        else:
            messages.success(request, PROPOSAL_THANKS.format(pk=proposal.pk))
            return redirect(proposal)
    return render(request, "atlas/propose.html", {"form": form}, status=status)


@require_GET
def intake(request: HtmxHttpRequest) -> HttpResponse:
    """Every proposal, newest first: pending, accepted (with its work) or rejected (why),
    under the scope statement the reviews apply."""
    queryset = Proposal.objects.select_related("work").order_by("-created_at", "-id")
    filterset = ProposalFilter(request.GET, queryset=queryset)
    valid = filterset.is_valid()
    page = Paginator(filterset.qs if valid else queryset.none(), INTAKE_PAGE_SIZE).get_page(
        request.GET.get("page")
    )
    context = {
        "filterset": filterset,
        "page": page,
        "statuses": Proposal.Status.choices,
        "scope": scope,
    }
    return render(request, "atlas/intake.html", context, status=200 if valid else 400)
