from __future__ import annotations

from django import forms

from processes.models import QueryEngine
from storage.models import CatalogKind, format_choices


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


#: Form field -> catalog property, for the object store's credentials (pyiceberg's names).
S3_FIELDS = {
    "s3_endpoint": "s3.endpoint",
    "s3_access_key_id": "s3.access-key-id",
    "s3_secret_access_key": "s3.secret-access-key",
    "s3_region": "s3.region",
}


class CatalogCreateForm(forms.Form):
    name = forms.SlugField(max_length=100)
    kind = forms.ChoiceField(choices=CatalogKind.choices)
    root = forms.CharField(
        required=False,
        help_text="Path root: the folder or object-store prefix (s3://bucket/prefix) to search for tables",
    )
    uri = forms.CharField(
        required=False, help_text="Iceberg: SQLAlchemy URL (SQL, empty = Lakewarden's database) or REST URL"
    )
    warehouse = forms.CharField(
        required=False,
        help_text="Iceberg: warehouse (SQL: folder URI, default LAKEWARDEN_WAREHOUSE; REST: e.g. s3://lakehouse/)",
    )
    credential = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Iceberg REST: OAuth client credential client_id:secret (or a token below)",
    )
    token = forms.CharField(
        required=False, widget=forms.PasswordInput(render_value=False), help_text="Iceberg REST: bearer token"
    )
    s3_endpoint = forms.CharField(
        required=False, label="S3 endpoint", help_text="Object store: e.g. http://127.0.0.1:8333 (empty: AWS)"
    )
    s3_access_key_id = forms.CharField(required=False, label="S3 access key id")
    s3_secret_access_key = forms.CharField(
        required=False, label="S3 secret access key", widget=forms.PasswordInput(render_value=False)
    )
    s3_region = forms.CharField(required=False, label="S3 region")

    def catalog_properties(self) -> dict[str, str]:
        keys = ("root", "uri", "warehouse", "credential", "token")
        properties = {key: self.cleaned_data[key] for key in keys if self.cleaned_data.get(key)}
        properties.update(
            {
                prop: self.cleaned_data[field]
                for field, prop in S3_FIELDS.items()
                if self.cleaned_data.get(field)
            }
        )
        return properties


class QueryForm(forms.Form):
    sql = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "list": "table-names"})
    )
    cache = forms.BooleanField(required=False, initial=True)
    storage = forms.CharField(required=False)
    engine = forms.ChoiceField(choices=QueryEngine.choices, required=False, initial=QueryEngine.AUTO)
