from __future__ import annotations

from django import forms

from processes.models import QueryEngine
from storage.models import format_choices


class TableRegisterForm(forms.Form):
    location = forms.CharField(
        max_length=1024,
        help_text="Absolute path of the table folder, or its object-store URI (s3://bucket/prefix)",
    )
    format = forms.ChoiceField(
        choices=lambda: [("", "detect"), *format_choices()], required=False, help_text="Leave on detect"
    )
    allow_nested = forms.BooleanField(
        required=False,
        label="Allow nesting",
        help_text="Register it although its folder holds, or lies inside, another registered table's",
    )


class QueryForm(forms.Form):
    sql = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "list": "table-names"})
    )
    cache = forms.BooleanField(required=False, initial=True)
    storage = forms.CharField(required=False)
    engine = forms.ChoiceField(choices=QueryEngine.choices, required=False, initial=QueryEngine.AUTO)
