from __future__ import annotations

import json

from django import forms

from storage.models import FORMAT_CHOICES, CatalogKind


class TableRegisterForm(forms.Form):
    location = forms.CharField(max_length=1024, help_text="Absolute path of the table folder")
    format = forms.ChoiceField(
        choices=[("", "detect")] + FORMAT_CHOICES, required=False, help_text="Leave on detect"
    )


class CatalogCreateForm(forms.Form):
    name = forms.SlugField(max_length=100)
    kind = forms.ChoiceField(choices=CatalogKind.choices)
    root = forms.CharField(required=False, help_text="Path root: the folder to search for tables")
    uri = forms.CharField(
        required=False, help_text="Iceberg: SQLAlchemy URL (SQL, empty = Lakewarden's database) or REST URL"
    )
    warehouse = forms.CharField(
        required=False, help_text="Iceberg SQL: warehouse folder URI (default: LAKEWARDEN_WAREHOUSE)"
    )

    def catalog_properties(self) -> dict[str, str]:
        return {
            key: self.cleaned_data[key] for key in ("root", "uri", "warehouse") if self.cleaned_data.get(key)
        }


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
