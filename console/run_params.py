"""The "Run now" form, generated from the JSON Schema of a factory's run-now parameters (issue 34)
by ``console.schema_form``: one field per property (numbers with their limits, booleans as
checkboxes, enums as selects, lists of names as comma-separated text), its default and
description, and units where the schema names one (``x-unit``): bytes are shown and entered in MiB,
seconds and hours in a unit of time picked beside the number.

``params_from_form`` turns the submitted fields back into the params dict. It only converts (text
to numbers, MiB to bytes, days to seconds); the limits are checked where the raw JSON's are, by
``processes.services`` against the schema. An empty field means "the default" and is not sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from console import schema_form
from console.schema_form import TIME_UNITS, FormError, ParamField, field_name, kind_of

__all__ = ["TIME_UNITS", "ActionForm", "FormError", "ParamField", "field_name", "kind_of"]


def build_fields(action: str, schema: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[ParamField]:
    """The fields of ``schema``'s properties; ``defaults`` (the factory's properties as configured
    for the table) replaces a property's schema default, being what a run without it uses."""
    return schema_form.build_fields(action, schema, defaults)


fill = schema_form.fill


def submitted(post: Mapping[str, str], action: str) -> bool:
    """Whether the POST carries the generated form's fields of ``action``."""
    prefix = f"p:{action}:"
    return post.get("form") == "fields" or any(name.startswith(prefix) for name in post)


def params_from_form(
    action: str, schema: Mapping[str, Any], post: Mapping[str, str], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The params dict the submitted fields of ``action`` make: only fields filled in (a checkbox:
    only when it differs from its default). ``FormError`` names a field whose text is no value."""
    return schema_form.values_from_form(action, schema, post, defaults)


# --- the form of a table's actions ---------------------------------------------------------------


@dataclass
class ActionForm:
    """One action offered on the table, with its parameters' fields."""

    action: str
    factory: str
    description: str
    schema: dict[str, Any]
    defaults: dict[str, Any]  # the factory's properties as configured for the table
    fields: list[ParamField]


def action_forms(table: Any, offered: list[dict[str, Any]]) -> list[ActionForm]:
    """The run form of each action ``selectors.actions_for_format`` offers on ``table``."""
    from processes.registry import configured_factories
    from processes.runtime import TableRuntime

    factories = {configured.name: configured.factory for configured in configured_factories()}
    forms = []
    for offer in offered:
        factory = factories.get(offer["factory"])
        defaults = TableRuntime(table, factory.properties).config if factory is not None else {}
        schema = offer["params_schema"]
        forms.append(
            ActionForm(
                action=offer["action"],
                factory=offer["factory"],
                description=offer["description"],
                schema=schema,
                defaults=defaults,
                fields=build_fields(offer["action"], schema, defaults),
            )
        )
    return forms


def default_action(forms: list[ActionForm]) -> str:
    """The action the form starts on: the format's rewrite where it has one, else the first."""
    from processes.plugin import REWRITE

    actions = [form.action for form in forms]
    return REWRITE if REWRITE in actions else (actions[0] if actions else "")


def field_error(form: ActionForm, message: str) -> tuple[str, str] | None:
    """(key, message) when a validation message (``key: reason``, as ``processes.registry``
    words it) is about one of the form's fields; the limits are added in the field's unit."""
    return schema_form.field_error(form.fields, message)
