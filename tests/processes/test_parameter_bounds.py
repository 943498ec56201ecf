"""Every number a process factory's properties or run-now parameters take has a real maximum: the
maximum is accepted, one more is refused naming the property (issue 29, item 11: a target file size
of 1e30 bytes, 1e12 commits, an age of P99999999999D days and 1e308 hours were accepted).

Walks the schemas of every discovered factory, the built-ins and the Lance and Paimon plugins."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from processes.maintenance.retention import parse_duration
from processes.maintenance.schemas import MAX_AGE_SECONDS
from processes.registry import factory_classes, validate_params, validate_properties
from storage.errors import InvalidInput

PLUGINS = ("lance-rewrite", "lance-expire-snapshots", "paimon-expire-snapshots", "paimon-clean-orphan-files")


def _numbers(schema: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(property, numeric schema) of each top-level property that takes a number, its ``oneOf``
    alternatives included."""
    found = []
    for key, value in schema.get("properties", {}).items():
        for candidate in [value, *value.get("oneOf", [])]:
            types = candidate.get("type")
            types = types if isinstance(types, list) else [types]
            if {"integer", "number"} & set(types):
                found.append((key, candidate))
    return found


def _bounded_schemas():
    for name, cls in sorted(factory_classes().items()):
        for kind, validate in (("properties", validate_properties), ("params", validate_params)):
            for key, schema in _numbers(getattr(cls, f"{kind}_schema")):
                yield f"{name} {kind} {key}", cls, kind, validate, key, schema


def test_the_plugins_are_walked_too():
    assert set(PLUGINS) <= set(factory_classes())
    assert len(list(_bounded_schemas())) >= 80


def test_every_numeric_property_and_parameter_has_a_maximum():
    unbounded = [label for label, *_, schema in _bounded_schemas() if "maximum" not in schema]

    assert not unbounded, unbounded


def test_each_maximum_is_accepted_and_one_more_is_refused_naming_the_property():
    failures = []
    for label, cls, kind, validate, key, schema in _bounded_schemas():
        maximum = schema["maximum"]
        try:
            validate(cls, {key: maximum})
        except InvalidInput as error:
            failures.append(f"{label}: the maximum {maximum} is refused: {error}")
        for over in (maximum + 1, 1e308):
            with pytest.raises(InvalidInput) as refused:
                validate(cls, {key: over})
            if not str(refused.value).startswith(f"{key}: ") or refused.value.field != kind:
                failures.append(f"{label}: {over} refused as {refused.value.field}: {refused.value}")

    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("P36500D", MAX_AGE_SECONDS), ("P5214W2D", MAX_AGE_SECONDS), ("PT3153600000S", MAX_AGE_SECONDS), (0, 0)],
)
def test_an_age_of_100_years_is_the_longest(value, seconds):
    assert parse_duration(value) == dt.timedelta(seconds=seconds)


@pytest.mark.parametrize("value", ["P36501D", "P99999999999D", "PT3153600001S", MAX_AGE_SECONDS + 1, 1e308])
def test_a_longer_age_is_refused_naming_the_limit_instead_of_overflowing(value):
    with pytest.raises(ValueError, match="longer than the limit of 36,500 days"):
        parse_duration(value)


@pytest.mark.parametrize("key", ["max-age", "trash-retention"])
def test_an_age_string_over_the_limit_is_refused_naming_the_property(key):
    cls = factory_classes()["iceberg-expire-snapshots"]
    validate = validate_params if key == "max-age" else validate_properties

    validate(cls, {key: "P36500D"})
    with pytest.raises(InvalidInput, match=f"^{key}: P36501D is longer than the limit of 36,500 days"):
        validate(cls, {key: "P36501D"})
    with pytest.raises(InvalidInput, match=f"^{key}: 'P1Y' is not a duration"):
        validate(cls, {key: "P1Y"})
