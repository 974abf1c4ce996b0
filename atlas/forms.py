from typing import Any

from django import forms

from atlas import taxonomy
from atlas.proposals import DEFAULTS
from atlas.records import CORRECTABLE_FIELDS, LIST_SEPARATOR, RecordError, evidence_source_check


class SuggestionForm(forms.Form):
    """The shape of a correction; its value is checked by ``suggestion_submit``."""

    field = forms.ChoiceField(label="Field", choices=list(CORRECTABLE_FIELDS.items()))
    proposed_value = forms.CharField(
        label="Proposed value",
        max_length=5000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="For several values (authors, modality, topics…) separate them with “;”.",
    )
    rationale = forms.CharField(
        label="Why",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Point to the paper, section or page that shows it.",
    )
    evidence_note = forms.CharField(
        label="Basis of the label (optional)",
        max_length=500,
        required=False,
        help_text="For a classification: what the source says, in a sentence.",
    )
    evidence_source = forms.CharField(
        label="Source (optional)",
        max_length=500,
        required=False,
        help_text="A URL, or “summary”, “facts” or a seed document (“seed 000”).",
    )
    contact = forms.CharField(
        label="Contact (optional)",
        max_length=200,
        required=False,
        help_text="Only curators see it, to ask you about the suggestion.",
    )

    def clean_evidence_source(self) -> str:
        source = self.cleaned_data["evidence_source"].strip()
        if source:
            try:
                evidence_source_check(source)
            except RecordError as exc:
                raise forms.ValidationError(str(exc)) from exc
        return source


def _optional(label: str, help_text: str = "", **kwargs) -> forms.CharField:
    return forms.CharField(label=label, required=False, help_text=help_text, **kwargs)


class ProposalForm(forms.Form):
    """A proposed work, as people type it: lines and ``;`` lists become the API's lists,
    and the values go to ``proposal_submit``, which checks them as the API's are."""

    title = _optional("Title", max_length=1000)
    arxiv_id = _optional("arXiv id", "e.g. 2406.01234 (give it, a URL, or both).", max_length=100)
    url = _optional("URL of the paper", "http(s) only.", max_length=1000)
    authors = _optional(
        "Authors",
        "One per line, in the paper's order.",
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    authors_et_al = forms.BooleanField(
        label="The author list is cut short", required=False, help_text="It ends in “et al.”"
    )
    month = _optional(
        "Month of first publication",
        "YYYY-MM.",
        max_length=20,
        widget=forms.TextInput(attrs={"placeholder": "2026-11"}),
    )
    month_estimated = forms.BooleanField(
        label="The month is estimated", required=False, help_text="A lower bound, not known."
    )
    venue = _optional("Venue", max_length=400)
    code_url = _optional("Code URL", max_length=1000)
    facts_source = _optional(
        "Where you checked these facts", "A URL (the paper's page, say).", max_length=800
    )
    summary = _optional(
        "Summary",
        "What the work does, in your own words (at most 5000 characters).",
        widget=forms.Textarea(attrs={"rows": 4}),
    )

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for facet in taxonomy.FACETS:
            self.fields[facet.name] = self._facet_field(facet)
        self.fields["topics"] = _optional(
            "Topics", "Lowercase slugs separated by “;” (e.g. halting; kv-cache).", max_length=2000
        )
        for facet in taxonomy.FACETS:
            self.fields[f"evidence_{facet.name}_note"] = _optional(
                f"Basis of “{facet.label}”", max_length=1000
            )
            self.fields[f"evidence_{facet.name}_source"] = _optional(
                "Its source", "A URL, or “summary”.", max_length=1000
            )
        self.fields["rationale"] = _optional(
            "Why it belongs in the atlas",
            "What makes it a work on looped or recurrent depth.",
            widget=forms.Textarea(attrs={"rows": 3}),
        )
        self.fields["contact"] = _optional(
            "Contact (optional)",
            "Only curators see it, to ask you about the proposal.",
            max_length=400,
        )

    @staticmethod
    def _facet_field(facet: taxonomy.Facet) -> forms.Field:
        if facet.multi:
            return forms.MultipleChoiceField(
                label=facet.label,
                choices=facet.choices,
                required=False,
                widget=forms.CheckboxSelectMultiple,
            )
        default = DEFAULTS.get(facet.name)
        choices = facet.choices if default else [("", "—"), *facet.choices]
        return forms.ChoiceField(
            label=facet.label, choices=choices, required=False, initial=default
        )

    def evidence_fields(self) -> list[tuple[forms.BoundField, forms.BoundField]]:
        return [
            (self[f"evidence_{facet.name}_note"], self[f"evidence_{facet.name}_source"])
            for facet in taxonomy.FACETS
        ]

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if not name.startswith("evidence_")]

    def proposal_data(self) -> dict[str, Any]:
        """The cleaned form as the API's fields (what ``proposal_check`` takes)."""
        data = dict(self.cleaned_data)
        data["authors"] = [line.strip() for line in data["authors"].splitlines() if line.strip()]
        data["topics"] = [t.strip() for t in data["topics"].split(LIST_SEPARATOR) if t.strip()]
        data["evidence"] = {}
        for facet in taxonomy.FACETS:
            note = data.pop(f"evidence_{facet.name}_note")
            source = data.pop(f"evidence_{facet.name}_source")
            if note or source:
                data["evidence"][facet.name] = {"note": note, "source": source or "summary"}
        return data

    def add_proposal_errors(self, errors: dict[str, list[str]]) -> None:
        for name, messages in errors.items():
            for message in messages:
                if name in self.fields:
                    self.add_error(name, message)
                else:  # the evidence as a whole, or a field the form does not show
                    self.add_error(None, f"{name}: {message}")
