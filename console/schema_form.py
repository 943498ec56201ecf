"""Forms generated from a JSON Schema (issue 34): one field per property of an object schema, for
the run-now parameters, a storage's configuration, a plugin's properties and a table's overrides.

Numbers keep their limits, booleans are checkboxes, enums selects, lists of names comma-separated
text, anything else JSON; each field shows its description and its default. Units come from the
schema (``x-unit``, ``processes.maintenance.schemas.UNIT``): bytes are entered in MiB (or in a unit
picked beside the number, ``size_units``), seconds and hours in a unit of time picked beside it.
Keys listed as secrets are password inputs whose stored value is never sent to the page.

A form's fields are named ``p:<prefix>:<key>`` (``u:<prefix>:<key>`` for a picked unit), so one
page can hold the fields of several schemas (one per action, one per storage type).
``values_from_form`` turns the submitted fields back into a dict: it only converts (text to
numbers, GiB to bytes, days to seconds); the schema's limits are checked by the service the dict
goes to. An empty field means "not set" (the default) and is left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from processes.maintenance.schemas import BYTES, HOURS, SECONDS, UNIT

MIB = 1024 * 1024
#: Units of size a size may be entered in (``size_units``), in bytes, smallest first.
SIZE_UNITS = {"MiB": MIB, "GiB": 1024 * MIB, "TiB": 1024 * 1024 * MIB}
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
    """One property as a form field; ``name`` is the input's, prefixed by the form's ``prefix``
    (the action, the storage type); ``id_prefix`` starts its HTML id (``run``, ``storage``)."""

    key: str
    prefix: str
    kind: str
    help: str = ""
    default: str = ""  # the default in words (``128 MiB``, ``7 days``), in the help text
    placeholder: str = ""  # the default as the empty field shows it, in the field's unit
    minimum: str = ""  # HTML min/max/step, in the field's unit
    maximum: str = ""
    step: str = ""
    limits: str = ""  # the range in words, for units the operator picks
    unit: str = ""  # "MiB" for sizes
    choices: list[str] = field(default_factory=list)
    checked: bool = False
    value: str = ""  # the value shown: submitted (a refused form comes back as sent) or stored
    time_unit: str = ""  # the picked unit of a duration
    size_units: list[str] = field(default_factory=list)  # units a size may be picked in
    size_unit: str = ""  # the picked unit of a size
    secret: bool = False  # a password input; its stored value never reaches the page
    is_set: bool = False  # a secret with a stored value ("empty: unchanged")
    required: bool = False
    id_prefix: str = "run"
    error: str = ""

    @property
    def name(self) -> str:
        return field_name(self.prefix, self.key)

    @property
    def unit_name(self) -> str:
        return unit_name(self.prefix, self.key)

    @property
    def html_id(self) -> str:
        return f"{self.id_prefix}-{self.prefix}-{self.key}".replace(".", "-")

    @property
    def time_units(self) -> list[str]:
        return list(TIME_UNITS)


def field_name(prefix: str, key: str) -> str:
    return f"p:{prefix}:{key}"


def unit_name(prefix: str, key: str) -> str:
    return f"u:{prefix}:{key}"


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
    if types == ["boolean"] or sorted(types) == ["boolean", "string"]:
        return BOOLEAN
    if _accepts_names(schema):
        return NAMES
    if types == ["string"]:
        return TEXT
    return JSON


def number_text(value: float) -> str:
    """A number as a form shows it: ``128``, ``0.0625``, no ``128.0`` nor exponent."""
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _readable(amount: float, units: Mapping[str, int]) -> tuple[str, str]:
    """(number, unit) in the largest of ``units`` that divides ``amount`` (``7 days``, ``2 GiB``)."""
    for unit, size in sorted(units.items(), key=lambda item: -item[1]):
        if amount and amount % size == 0:
            return number_text(amount / size), unit
    smallest = min(units, key=lambda unit: units[unit])
    return number_text(amount / units[smallest]), smallest


def _shown(schema: Mapping[str, Any], kind: str, value: Any) -> str:
    """A value of the schema's unit as the field shows it (``128 MiB``, ``7 days``, ``true``)."""
    if value is None:
        return "none"
    if isinstance(value, bool) or kind == BOOLEAN:
        return "yes" if value else "no"
    if kind == SIZE and isinstance(value, int | float):
        return f"{number_text(value / MIB)} MiB"
    if kind == DURATION and isinstance(value, int | float):
        return " ".join(_readable(value * _BASE_SECONDS[schema[UNIT]], TIME_UNITS))
    if isinstance(value, list):
        return ", ".join(v if isinstance(v, str) else json.dumps(v) for v in value)
    return value if isinstance(value, str) else json.dumps(value)


def _limits(schema: Mapping[str, Any], kind: str, field_: ParamField) -> None:
    number = _branch(schema, "integer") if "integer" in _types(schema) else _branch(schema, "number")
    low, high = number.get("minimum", number.get("exclusiveMinimum")), number.get("maximum")
    if kind == SIZE and not field_.size_units:
        field_.unit, field_.step = "MiB", "any"
        field_.minimum = number_text(low / MIB) if low is not None else ""
        field_.maximum = number_text(high / MIB) if high is not None else ""
        return
    if kind in (SIZE, DURATION):
        field_.step = "any"
        field_.minimum = "0" if low is not None and low >= 0 else ""
        parts = [f"at least {_shown(schema, kind, low)}" if low else "", _at_most(schema, kind, high)]
        field_.limits = "; ".join(p for p in parts if p)
        return
    field_.step = "1" if "integer" in _types(number) else "any"
    field_.minimum = number_text(low) if low is not None else ""
    field_.maximum = number_text(high) if high is not None else ""


def _at_most(schema: Mapping[str, Any], kind: str, high: Any) -> str:
    return f"at most {_shown(schema, kind, high)}" if high is not None else ""


def build_fields(
    prefix: str,
    schema: Mapping[str, Any],
    defaults: Mapping[str, Any],
    *,
    values: Mapping[str, Any] | None = None,
    secrets: Collection[str] = (),
    id_prefix: str = "run",
    size_units: Collection[str] = (),
) -> list[ParamField]:
    """The fields of ``schema``'s properties. ``defaults`` (a factory's properties as configured)
    replaces a property's schema default, being what is used without it; ``values`` (a stored
    configuration) fills the fields in; ``secrets`` are the keys shown as password inputs;
    ``size_units`` (of ``SIZE_UNITS``) lets sizes be entered in a unit picked beside them."""
    fields = []
    required = set(schema.get("required", []))
    for key, prop in schema.get("properties", {}).items():
        kind = kind_of(prop)
        param = ParamField(key=key, prefix=prefix, kind=kind, help=prop.get("description", ""))
        param.id_prefix, param.required = id_prefix, key in required
        param.secret = key in secrets and kind == TEXT
        param.size_units = list(size_units) if kind == SIZE else []
        param.size_unit = "MiB" if param.size_units else ""
        if kind in (NUMBER, SIZE, DURATION):
            _limits(prop, kind, param)
        if kind == CHOICE:
            param.choices = [str(choice) for choice in prop["enum"]]
        param.time_unit = "days" if kind == DURATION else ""
        if key in defaults or "default" in prop:
            _default(param, prop, defaults[key] if key in defaults else prop.get("default"))
        if values is not None and key in values:
            _stored(param, prop, values[key])
        fields.append(param)
    return fields


def _default(param: ParamField, schema: Mapping[str, Any], default: Any) -> None:
    param.default = _shown(schema, param.kind, default)
    param.checked = param.kind == BOOLEAN and default is True
    in_unit = _in_unit(param, schema, default)
    if in_unit is not None:
        param.placeholder = in_unit
    elif param.kind not in (BOOLEAN, CHOICE):
        param.placeholder = param.default


def _in_unit(param: ParamField, schema: Mapping[str, Any], value: Any) -> str | None:
    """A size or a duration as its field shows it, the field's picked unit set to the largest
    that divides it; None for anything else."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if param.kind == SIZE and param.size_units:
        text, param.size_unit = _readable(value, {unit: SIZE_UNITS[unit] for unit in param.size_units})
        return text
    if param.kind == SIZE:
        return number_text(value / MIB)
    if param.kind == DURATION:
        text, param.time_unit = _readable(value * _BASE_SECONDS[schema[UNIT]], TIME_UNITS)
        return text
    return None


def _stored(param: ParamField, schema: Mapping[str, Any], value: Any) -> None:
    """A stored value put in the field, in the field's unit (a secret only says it is set)."""
    in_unit = _in_unit(param, schema, value)
    if param.secret:
        param.is_set = bool(value)
    elif param.kind == BOOLEAN:
        param.checked = value is True or str(value).lower() == "true"
    elif in_unit is not None:
        param.value = in_unit
    elif param.kind in (NAMES, JSON) or not isinstance(value, str):
        param.value = _shown(schema, param.kind, value) if param.kind == NAMES else json.dumps(value)
    else:
        param.value = value


def fill(fields: list[ParamField], post: Mapping[str, str], errors: Mapping[str, str]) -> None:
    """Put the submitted values and the errors back into the fields (a refused form comes back
    as it was sent; a secret's typed value is not sent back)."""
    for param in fields:
        param.value = "" if param.secret else post.get(param.name, "")
        if param.kind == BOOLEAN:
            param.checked = param.name in post
        if param.kind == DURATION:
            param.time_unit = post.get(param.unit_name, param.time_unit)
        if param.size_units:
            param.size_unit = post.get(param.unit_name, param.size_unit)
        param.error = errors.get(param.key, "")


def values_from_form(
    prefix: str,
    schema: Mapping[str, Any],
    post: Mapping[str, str],
    defaults: Mapping[str, Any],
    *,
    size_units: Collection[str] = (),
) -> dict[str, Any]:
    """The dict the submitted fields of ``prefix`` make: only fields filled in (a checkbox: only
    when it differs from its default). ``FormError`` names a field whose text is no value."""
    values: dict[str, Any] = {}
    for key, prop in schema.get("properties", {}).items():
        kind = kind_of(prop)
        name = field_name(prefix, key)
        if kind == BOOLEAN:
            checked = name in post
            if checked != (defaults.get(key, prop.get("default")) is True):
                values[key] = checked
            continue
        text = (post.get(name) or "").strip()
        if text:
            unit = post.get(unit_name(prefix, key), "")
            values[key] = converted(key, prop, kind, text, unit, size_units=size_units)
    return values


def converted(
    key: str, schema: Mapping[str, Any], kind: str, text: str, unit: str, *, size_units: Collection[str] = ()
) -> Any:
    """``text`` typed in the field of ``key`` as the schema's value (``unit``: the picked one)."""
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
        if size_units and unit not in size_units:
            raise FormError(key, f"unknown unit {unit!r} (one of {', '.join(size_units)})")
        return _whole(key, schema, number * SIZE_UNITS[unit if size_units else "MiB"], round_=True)
    if kind == DURATION:
        if unit not in TIME_UNITS:
            raise FormError(key, f"unknown unit {unit!r} (one of {', '.join(TIME_UNITS)})")
        return _whole(key, schema, number * TIME_UNITS[unit] / _BASE_SECONDS[schema[UNIT]], round_=True)
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
        raise FormError(key, f"{number_text(number)} is not a whole number")
    return number


def field_error(fields: list[ParamField], message: str) -> tuple[str, str] | None:
    """(key, message) when a validation message (``key: reason``, as the registries word it) is
    about one of ``fields``; the limits are added in the field's unit."""
    key, sep, reason = message.partition(": ")
    param = next((f for f in fields if f.key == key), None) if sep else None
    if param is None:
        return None
    if param.kind == SIZE and not param.size_units and ("maximum" in reason or "minimum" in reason):
        reason += f" bytes (allowed: {param.minimum} to {param.maximum} MiB)"
    elif param.kind in (SIZE, DURATION) and param.limits:
        reason += f" (allowed: {param.limits})"
    return key, reason


# --- forms that switch between schemas (a storage's type, a catalog's kind) ----------------------


@dataclass
class Variant:
    """One of the schemas a form switches between, with its fields (prefixed by ``name``)."""

    name: str
    description: str
    schema: Mapping[str, Any]
    secrets: frozenset[str]
    fields: list[ParamField]
    others: list[str] = field(default_factory=list)  # stored keys without a field (kept as they are)


def variant(
    name: str,
    schema: Mapping[str, Any],
    *,
    description: str = "",
    secrets: Collection[str] = (),
    stored: Mapping[str, Any] | None = None,
    id_prefix: str,
) -> Variant:
    """The variant ``name`` of a form, its fields filled with ``stored`` (a registered object's)."""
    properties = schema.get("properties", {})
    return Variant(
        name=name,
        description=description,
        schema=schema,
        secrets=frozenset(secrets),
        fields=build_fields(name, schema, {}, values=stored, secrets=secrets, id_prefix=id_prefix),
        others=sorted(key for key in (stored or {}) if key not in properties),
    )


def variant_values(chosen: Variant, post: Mapping[str, str], stored: Mapping[str, Any]) -> dict[str, Any]:
    """The dict the submitted fields of ``chosen`` mean: a secret left empty is sent blank (the
    services' ``merge_secrets`` keeps the stored one) and keys without a field keep their value."""
    values = values_from_form(chosen.name, chosen.schema, post, {})
    for param in chosen.fields:
        if param.secret and param.key not in values and param.key in stored:
            values[param.key] = ""
    values.update({key: stored[key] for key in chosen.others if key in stored})
    return values


def submitted_dict(
    chosen: Variant | None,
    post: Mapping[str, str],
    stored: Mapping[str, Any],
    *,
    advanced: bool,
    json_text: str,
    key: str,
) -> dict[str, Any]:
    """What a form of variants means: its JSON under "Advanced" (``FormError`` on ``key`` when it
    is no JSON object), else the fields of the ``chosen`` variant."""
    if advanced:
        try:
            value = json.loads(json_text)
        except (json.JSONDecodeError, RecursionError) as error:
            raise FormError(key, f"not valid JSON: {error}") from None
        if not isinstance(value, dict):
            raise FormError(key, "the settings must be a JSON object")
        return value
    return variant_values(chosen, post, stored) if chosen is not None else {}


def place_errors(fields: list[ParamField], message: str) -> str:
    """Each ``key: reason`` of a refusal (parts joined by ``; ``) put beside its field; what names
    no field is returned (empty when all found their field)."""
    unplaced = []
    for part in message.split("; "):
        found = field_error(fields, part)
        if found is None:
            unplaced.append(part)
            continue
        param = next(f for f in fields if f.key == found[0])
        param.error = f"{param.error} {found[1]}".strip()
    return "; ".join(unplaced)
