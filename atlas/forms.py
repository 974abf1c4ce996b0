from django import forms

from atlas.records import CORRECTABLE_FIELDS


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
    contact = forms.CharField(
        label="Contact (optional)",
        max_length=200,
        required=False,
        help_text="Only curators see it, to ask you about the suggestion.",
    )
