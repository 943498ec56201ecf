from __future__ import annotations

import json

from django import forms


class StorageBackendForm(forms.Form):
    name = forms.SlugField(max_length=100)
    type = forms.ChoiceField(choices=[])
    config = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4}),
        required=False,
        initial="{}",
        help_text='JSON, e.g. {"root": "/lake/cache"} for filesystem (empty: a folder under the warehouse)',
    )
    quota_bytes = forms.IntegerField(
        required=False, min_value=1, help_text="Optional: least recently used results are cleaned above it"
    )
    is_default = forms.BooleanField(required=False)

    def __init__(self, *args, storage_types: list[str], **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["type"].choices = [(t, t) for t in storage_types]

    def clean_config(self) -> dict:
        text = self.cleaned_data.get("config") or "{}"
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            raise forms.ValidationError(f"not valid JSON: {error}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("the configuration must be a JSON object")
        return value


class QueryForm(forms.Form):
    sql = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "list": "table-names"})
    )
    cache = forms.BooleanField(required=False, initial=True)
    storage = forms.CharField(required=False)
