from __future__ import annotations

from django import forms

from console.models import CatalogKind, TableFormat


class TableRegisterForm(forms.Form):
    location = forms.CharField(max_length=1024, help_text="Absolute path of the table folder")
    format = forms.ChoiceField(
        choices=[("", "detect")] + list(TableFormat.choices), required=False, help_text="Leave on detect"
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
