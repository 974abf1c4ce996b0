from django import forms

from atlas.records import CORRECTABLE_FIELDS, RecordError, evidence_source_check


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
