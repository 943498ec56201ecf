"""A plugin's properties in the admin as a form generated from its ``properties_schema``
(``console.schema_form``, issue 34), the raw JSON behind "Advanced".

``PropertiesField`` replaces the JSON box of ``PluginConfig.properties``: its widget shows one
field per property (the stored value filled in, the factory's default beside it) and reads the
submitted fields back into the properties dict; a field whose text is no value, or a value the
schema refuses, is shown beside its field and nothing is saved.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.template.loader import render_to_string

from console import schema_form
from console.schema_form import FormError

#: The prefix of the generated fields' names (``p:props:<key>``).
PREFIX = "props"


class PropertiesWidget(forms.Widget):
    template_name = "admin/lakewarden/plugin_properties.html"

    def __init__(self, schema: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        super().__init__()
        self.schema, self.defaults = dict(schema), dict(defaults)
        self.errors: dict[str, str] = {}
        self.submitted: Mapping[str, str] | None = None

    def value_from_datadict(self, data, files, name):
        self.submitted = data
        # a post without the generated fields' marker (a script, an old page) is the JSON
        advanced = bool(data.get(f"{name}-advanced")) or data.get(f"{name}-form") != "fields"
        return {"advanced": advanced, "json": data.get(name, ""), "post": data}

    def get_context(self, name, value, attrs):
        context = super().get_context(name, value, attrs)
        stored = _stored(value)
        fields = schema_form.build_fields(
            PREFIX, self.schema, self.defaults, values=stored, id_prefix="plugin"
        )
        if self.submitted is not None:
            schema_form.fill(fields, self.submitted, self.errors)
        advanced = isinstance(value, dict) and value.get("advanced") is True
        bound = isinstance(value, dict) and "post" in value
        text = value["json"] if bound else json.dumps(stored, indent=2, sort_keys=True)
        context["widget"].update(
            fields=fields,
            advanced=advanced,
            json_text=text,
            schema_text=json.dumps(self.schema, indent=2, sort_keys=True),
        )
        return context

    def render(self, name, value, attrs=None, renderer=None):
        # the project's templates (templates/admin/...), not the form renderer's own folders
        return render_to_string(self.template_name, self.get_context(name, value, attrs))


def _stored(value: Any) -> dict[str, Any]:
    """The properties a bound or unbound value holds (a submitted form: none, the fields say)."""
    if isinstance(value, dict) and "post" in value:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value or "{}")
        except json.JSONDecodeError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


class PropertiesField(forms.Field):
    """The properties dict the widget's fields (or its JSON, under Advanced) mean."""

    widget: PropertiesWidget

    def __init__(self, schema: Mapping[str, Any], defaults: Mapping[str, Any], **kwargs) -> None:
        kwargs.setdefault("required", False)
        super().__init__(widget=PropertiesWidget(schema, defaults), **kwargs)

    def to_python(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict) or "post" not in value:
            return _stored(value)
        if value["advanced"]:
            try:
                parsed = json.loads(value["json"] or "{}")
            except (json.JSONDecodeError, RecursionError) as error:
                raise forms.ValidationError(f"not valid JSON: {error}") from None
            if not isinstance(parsed, dict):
                raise forms.ValidationError("the properties must be a JSON object")
            return parsed
        widget = self.widget
        try:
            return schema_form.values_from_form(PREFIX, widget.schema, value["post"], widget.defaults)
        except FormError as error:
            widget.errors[error.key] = error.message
            raise forms.ValidationError(str(error)) from None

    def has_changed(self, initial, data) -> bool:
        try:
            return self.to_python(data) != _stored(initial)
        except forms.ValidationError:
            return True

    def place(self, message: str) -> None:
        """A refusal of the schema (``key: reason``) shown beside its field too."""
        fields = schema_form.build_fields(PREFIX, self.widget.schema, self.widget.defaults)
        found = schema_form.field_error(fields, message)
        if found is not None:
            self.widget.errors[found[0]] = found[1]
