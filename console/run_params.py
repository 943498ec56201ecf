"""The "Run now" form, generated from the JSON Schema of a factory's run-now parameters (issue 34):
one field per property (numbers with their limits, booleans as checkboxes, enums as selects, lists
of names as comma-separated text), its default and description, and units where the schema names
one (``x-unit``, ``processes.maintenance.schemas.UNIT``): bytes are shown and entered in MiB,
seconds and hours in a unit of time picked beside the number.

``params_from_form`` turns the submitted fields back into the params dict. It only converts (text
to numbers, MiB to bytes, days to seconds); the limits are checked where the raw JSON's are, by
``processes.services`` against the schema. An empty field means "the default" and is not sent.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processes.maintenance.schemas import BYTES, HOURS, SECONDS, UNIT

MIB = 1024 * 1024
#: Units of time a duration is entered in, in seconds, largest first.
TIME_UNITS = {"days": 86_400, "hours": 3_600, "minutes": 60, "seconds": 1}
#: The unit (in seconds) of each ``x-unit`` that is a duration.
_BASE_SECONDS = {SECONDS: 1, HOURS: 3_600}
#: What kind of field each kind of schema gets: the template switches on it.
NUMBER, DURATION, SIZE, BOOLEAN, CHOICE, TEXT, NAMES, JSON = (
    "number",
    "duration",
    "size",
    "boolean",
    "choice",
    "text",
    "names",
    "json",
)


class FormError(ValueError):
    """A field's value that is not a value of its kind ("abc" in a number): ``key`` names it."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass
class ParamField:
    """One parameter as a form field; ``name`` is the input's, prefixed by the action."""

    key: str
    action: str
    kind: str
    help: str = ""
    default: str = ""  # the default in words (``128 MiB``, ``7 days``), in the help text
    placeholder: str = ""  # the default as the empty field shows it, in the field's unit
    minimum: str = ""  # HTML min/max/step, in the field's unit
    maximum: str = ""
    step: str = ""
    limits: str = ""  # the range in words, for durations (whose unit the operator picks)
    unit: str = ""  # "MiB" for sizes
    choices: list[str] = field(default_factory=list)
    checked: bool = False
    value: str = ""  # what was submitted (kept when the form comes back with an error)
    time_unit: str = ""  # the picked unit of a duration
    error: str = ""

    @property
    def name(self) -> str:
        return field_name(self.action, self.key)

    @property
    def unit_name(self) -> str:
        return f"u:{self.action}:{self.key}"

    @property
    def html_id(self) -> str:
        return f"run-{self.action}-{self.key}"

    @property
    def time_units(self) -> list[str]:
        return list(TIME_UNITS)


def field_name(action: str, key: str) -> str:
    return f"p:{action}:{key}"


def _types(schema: Mapping[str, Any]) -> list[str]:
    declared = schema.get("type", [])
    types = [declared] if isinstance(declared, str) else list(declared)
    for branch in schema.get("oneOf", []):
        types += _types(branch)
    return types


def _branch(schema: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    """The part of ``schema`` of that type (a ``oneOf`` of null and an array: the array)."""
    for branch in schema.get("oneOf", []):
        if kind in _types(branch):
            return branch
    return schema


def _accepts_names(schema: Mapping[str, Any]) -> bool:
    """An array whose items may be plain strings (column names): typed as ``a, b, c``."""
    array = _branch(schema, "array")
    return "array" in _types(array) and "string" in _types(array.get("items", {}))


def kind_of(schema: Mapping[str, Any]) -> str:
    types = _types(schema)
    if "enum" in schema:
        return CHOICE
    if "integer" in types or "number" in types:
        unit = schema.get(UNIT)
        return SIZE if unit == BYTES else DURATION if unit in _BASE_SECONDS else NUMBER
    if types == ["boolean"]:
        return BOOLEAN
    if _accepts_names(schema):
        return NAMES
    if types == ["string"]:
        return TEXT
    return JSON


def _number(value: float) -> str:
    """A number as a form shows it: ``128``, ``0.0625``, no ``128.0`` nor exponent."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _readable_duration(seconds: float) -> tuple[str, str]:
    """(number, unit) in the largest unit that divides ``seconds`` (``7 days``, ``90 minutes``)."""
    for unit, size in TIME_UNITS.items():
        if seconds and seconds % size == 0:
            return _number(seconds / size), unit
    return _number(seconds), "seconds"


def _shown(schema: Mapping[str, Any], kind: str, value: Any) -> str:
    """A value of the schema's unit as the field shows it (``128 MiB``, ``7 days``, ``true``)."""
    if value is None:
        return "none"
    if isinstance(value, bool) or kind == BOOLEAN:
        return "yes" if value else "no"
    if kind == SIZE and isinstance(value, int | float):
        return f"{_number(value / MIB)} MiB"
    if kind == DURATION and isinstance(value, int | float):
        number, unit = _readable_duration(value * _BASE_SECONDS[schema[UNIT]])
        return f"{number} {unit}"
    if isinstance(value, list):
        return ", ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value)


def _limits(schema: Mapping[str, Any], kind: str, field_: ParamField) -> None:
    number = _branch(schema, "integer") if "integer" in _types(schema) else _branch(schema, "number")
    low, high = number.get("minimum", number.get("exclusiveMinimum")), number.get("maximum")
    if kind == SIZE:
        field_.unit, field_.step = "MiB", "any"
        field_.minimum = _number(low / MIB) if low is not None else ""
        field_.maximum = _number(high / MIB) if high is not None else ""
        return
    if kind == DURATION:
        field_.step = "any"
        field_.minimum = "0" if low is not None and low >= 0 else ""
        parts = [f"at least {_shown(schema, kind, low)}" if low else "", _at_most(schema, kind, high)]
        field_.limits = "; ".join(p for p in parts if p)
        return
    field_.step = "1" if "integer" in _types(number) else "any"
    field_.minimum = _number(low) if low is not None else ""
    field_.maximum = _number(high) if high is not None else ""


def _at_most(schema: Mapping[str, Any], kind: str, high: Any) -> str:
    return f"at most {_shown(schema, kind, high)}" if high is not None else ""


def build_fields(action: str, schema: Mapping[str, Any], defaults: Mapping[str, Any]) -> list[ParamField]:
    """The fields of ``schema``'s properties; ``defaults`` (the factory's properties as configured
    for the table) replaces a property's schema default, being what a run without it uses."""
    fields = []
    for key, prop in schema.get("properties", {}).items():
        kind = kind_of(prop)
        param = ParamField(key=key, action=action, kind=kind, help=prop.get("description", ""))
        if kind in (NUMBER, SIZE, DURATION):
            _limits(prop, kind, param)
        if kind == CHOICE:
            param.choices = [str(choice) for choice in prop["enum"]]
        param.time_unit = "days" if kind == DURATION else ""
        if key in defaults or "default" in prop:
            _default(param, prop, defaults[key] if key in defaults else prop.get("default"))
        fields.append(param)
    return fields


def _default(param: ParamField, schema: Mapping[str, Any], default: Any) -> None:
    param.default = _shown(schema, param.kind, default)
    param.checked = param.kind == BOOLEAN and default is True
    number = isinstance(default, int | float) and not isinstance(default, bool)
    if param.kind == SIZE and number:
        param.placeholder = _number(default / MIB)
    elif param.kind == DURATION and number:
        param.placeholder, param.time_unit = _readable_duration(default * _BASE_SECONDS[schema[UNIT]])
    elif param.kind not in (BOOLEAN, CHOICE):
        param.placeholder = param.default


def fill(fields: list[ParamField], post: Mapping[str, str], errors: Mapping[str, str]) -> None:
    """Put the submitted values and the errors back into the fields (a refused form comes back
    as it was sent)."""
    for param in fields:
        param.value = post.get(param.name, "")
        if param.kind == BOOLEAN:
            param.checked = param.name in post
        if param.kind == DURATION:
            param.time_unit = post.get(param.unit_name, param.time_unit)
        param.error = errors.get(param.key, "")


def submitted(post: Mapping[str, str], action: str) -> bool:
    """Whether the POST carries the generated form's fields of ``action``."""
    prefix = f"p:{action}:"
    return post.get("form") == "fields" or any(name.startswith(prefix) for name in post)


def params_from_form(
    action: str, schema: Mapping[str, Any], post: Mapping[str, str], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """The params dict the submitted fields of ``action`` make: only fields filled in (a checkbox:
    only when it differs from its default). ``FormError`` names a field whose text is no value."""
    params: dict[str, Any] = {}
    for key, prop in schema.get("properties", {}).items():
        kind = kind_of(prop)
        name = field_name(action, key)
        if kind == BOOLEAN:
            checked = name in post
            if checked != (defaults.get(key, prop.get("default")) is True):
                params[key] = checked
            continue
        text = (post.get(name) or "").strip()
        if text:
            params[key] = _converted(key, prop, kind, text, post.get(f"u:{action}:{key}", ""))
    return params


def _converted(key: str, schema: Mapping[str, Any], kind: str, text: str, time_unit: str) -> Any:
    if kind == CHOICE:
        return _choice(key, schema, text)
    if kind == NAMES:
        return [name.strip() for name in text.split(",") if name.strip()]
    if kind == JSON:
        try:
            return json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise FormError(key, "not valid JSON") from None
    if kind == TEXT:
        return text
    number = _parse_number(key, text)
    if kind == SIZE:
        return _whole(key, schema, number * MIB, round_=True)
    if kind == DURATION:
        if time_unit not in TIME_UNITS:
            raise FormError(key, f"unknown unit {time_unit!r} (one of {', '.join(TIME_UNITS)})")
        return _whole(key, schema, number * TIME_UNITS[time_unit] / _BASE_SECONDS[schema[UNIT]], round_=True)
    return _whole(key, schema, number, round_=False)


def _choice(key: str, schema: Mapping[str, Any], text: str) -> Any:
    for choice in schema["enum"]:
        if str(choice) == text:
            return choice
    raise FormError(key, f"{text!r} is not one of {', '.join(map(str, schema['enum']))}")


def _parse_number(key: str, text: str) -> float:
    try:
        number = float(text.replace(",", "").replace("_", ""))
    except ValueError:
        raise FormError(key, f"{text!r} is not a number") from None
    if not math.isfinite(number):
        raise FormError(key, f"{text!r} is not a number")
    return number


def _whole(key: str, schema: Mapping[str, Any], number: float, *, round_: bool) -> int | float:
    """``number`` as the schema's type: an int for an integer (a converted unit rounded to it, a
    typed fraction refused); a float parameter keeps its fraction, a whole one is sent as an int."""
    if number.is_integer() or (round_ and "integer" in _types(schema)):
        return int(round(number))
    if "number" not in _types(schema):
        raise FormError(key, f"{_number(number)} is not a whole number")
    return number


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
    key, sep, reason = message.partition(": ")
    param = next((f for f in form.fields if f.key == key), None) if sep else None
    if param is None:
        return None
    if param.kind == SIZE and ("maximum" in reason or "minimum" in reason):
        reason += f" bytes (allowed: {param.minimum} to {param.maximum} MiB)"
    elif param.kind == DURATION and param.limits:
        reason += f" (allowed: {param.limits})"
    return key, reason
