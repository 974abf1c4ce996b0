"""Curators' side: works, the review queues of suggestions and proposals, and the change
history."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join

from atlas import proposals, records, services
from atlas.duplicates import POSSIBLE_DUPLICATE_RATIO, matches
from atlas.models import AtlasChange, FieldChange, Proposal, Suggestion, Work, WorkTag


class WorkTagInline(admin.TabularInline):
    model = WorkTag
    extra = 0


class FieldChangeInline(admin.TabularInline):
    """The work's history: every reviewed change of each of its fields, oldest first."""

    model = FieldChange
    extra = 0
    can_delete = False
    fields = readonly_fields = ("change", "when", "field", "old", "new", "evidence")
    verbose_name = "change"
    verbose_name_plural = "history"

    @admin.display(description="when")
    def when(self, row: FieldChange) -> str:
        return f"{row.change.at:%Y-%m-%d %H:%M} UTC (version {row.change.pk})"

    def get_queryset(self, request: HttpRequest) -> QuerySet[FieldChange]:
        return super().get_queryset(request).select_related("change")

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Work)
class WorkAdmin(admin.ModelAdmin):
    list_display = ["title", "month", "recurrence_family", "depth_control", "reviewed_at"]
    list_filter = ["recurrence_family", "depth_control", "kv_strategy", "training_regime"]
    search_fields = ["title", "slug", "summary"]
    readonly_fields = ["citation_key", "reviewed_at"]
    inlines = [WorkTagInline, FieldChangeInline]

    def save_model(self, request: HttpRequest, obj: Work, form, change: bool) -> None:
        saved = Work.objects.filter(pk=obj.pk).first() if change else None
        self._before = services.work_state(saved) if saved else None
        super().save_model(request, obj, form, change)

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        if form.has_changed() or any(formset.has_changed() for formset in formsets):
            work = form.instance
            services.atlas_change_record(
                kind=AtlasChange.Kind.EDIT,
                summary=f"{work.slug} edited by {request.user}",
                changes=[(work, self._before, services.work_state(work))],
            )


EDITABLE_IN_REVIEW = ("review_note", "evidence_note", "evidence_source")


@admin.register(Suggestion)
class SuggestionAdmin(admin.ModelAdmin):
    """The review queue: approving applies the value to the work; both record the curator."""

    list_display = ["id", "work", "field", "current_value", "proposed_value", "status"]
    list_filter = ["status", "field"]
    search_fields = ["work__title", "work__slug", "proposed_value", "rationale"]
    actions = ["approve", "reject"]
    fields = [
        "work",
        "field",
        "current_value",
        "proposed_value",
        "rationale",
        "evidence_note",
        "evidence_source",
        "contact",
        "status",
        "created_at",
        "previous_value",
        "reviewed_by",
        "reviewed_at",
        "review_note",
    ]
    # The curator may reword the evidence (it becomes the label's basis) before approving.
    readonly_fields = [str(name) for name in fields if name not in EDITABLE_IN_REVIEW]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Suggestion]:
        return super().get_queryset(request).prefetch_related("work__tags")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="current value")
    def current_value(self, suggestion: Suggestion) -> str:
        if suggestion.field not in records.CORRECTABLE_FIELDS:
            return "—"
        value = services.work_field_value(work=suggestion.work, field=suggestion.field)
        return records.value_to_text(value)

    @admin.action(description="Approve and apply the selected suggestions", permissions=["change"])
    def approve(self, request: HttpRequest, queryset: QuerySet[Suggestion]) -> None:
        self._review(request, queryset, services.suggestion_approve, "approved")

    @admin.action(description="Reject the selected suggestions", permissions=["change"])
    def reject(self, request: HttpRequest, queryset: QuerySet[Suggestion]) -> None:
        self._review(request, queryset, services.suggestion_reject, "rejected")

    def _review(self, request, queryset, service, verb: str) -> None:
        done = 0
        for suggestion in queryset:
            try:
                service(suggestion=suggestion, reviewer=request.user)
            except services.ReviewError as exc:
                self.message_user(request, str(exc), messages.WARNING)
            else:
                done += 1
        if done:
            self.message_user(request, f"{done} suggestion(s) {verb}.", messages.SUCCESS)


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    """The intake queue: a curator sees a proposal beside its possible duplicates, may edit
    any field, and accepts it (the work is added, a new data version) or rejects it with
    a public reason. Both buttons save the edits first."""

    change_form_template = "admin/atlas/proposal/change_form.html"
    list_display = ["id", "title", "arxiv_id", "status", "created_at", "reviewed_at"]
    list_display_links = ["id", "title"]
    list_filter = ["status"]
    search_fields = ["title", "arxiv_id", "url", "summary"]
    readonly_fields = [
        "possible_duplicates",
        "contact",
        "status",
        "created_at",
        "reviewed_by",
        "reviewed_at",
        "work",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Proposal | None = None) -> bool:
        reviewed = obj is not None and obj.status != Proposal.Status.PENDING
        return not reviewed and super().has_change_permission(request, obj)

    @admin.display(description="possible duplicates")
    def possible_duplicates(self, proposal: Proposal) -> str:
        candidates = proposals.duplicate_candidates(exclude=proposal)
        found = matches(
            title=proposal.title,
            arxiv_id=proposal.arxiv_id,
            candidates=candidates,
            ratio=POSSIBLE_DUPLICATE_RATIO,
            main_titles=True,
        )
        if not found:
            return "None found."
        rows = ((m.candidate.url, m.candidate.title, m.reason) for m in found)
        return format_html(
            "<ul>{}</ul>", format_html_join("", '<li><a href="{}">{}</a> ({})</li>', rows)
        )

    def response_change(self, request: HttpRequest, obj: Proposal) -> HttpResponse:
        review = {"_accept": proposals.proposal_accept, "_reject": proposals.proposal_reject}
        chosen = [name for name in review if name in request.POST]
        if not chosen:
            return super().response_change(request, obj)
        try:
            done = review[chosen[0]](proposal=obj, reviewer=request.user, note=obj.review_note)
        except services.ReviewError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(request.path)
        verb = "accepted: its work is in the atlas" if done.work else "rejected"
        self.message_user(request, f"Proposal #{done.pk} {verb}.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:atlas_proposal_changelist"))


@admin.register(AtlasChange)
class AtlasChangeAdmin(admin.ModelAdmin):
    """The history of reviewed changes; the newest entry is the data version."""

    list_display = ["at", "kind", "summary"]
    list_filter = ["kind"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False
