"""A table's overrides: the table properties that tune how actions treat it (``manual-actions``,
and any property of a factory that supports the table's format, laid over the factory's own by
``TableRuntime``). ``table_overrides_schema`` gathers them as one JSON Schema for a form;
``table_overrides_update`` checks them against each factory's schema and saves them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from processes.registry import configured_factories, validate_properties
from processes.scheduler import MANUAL_ACTIONS
from storage.errors import InvalidInput
from storage.models import Table

MANUAL_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Actions the scheduler never starts on this table (* for every action); Run now still runs them",
}


@dataclass
class OverridesSchema:
    """The overridable properties of a table's factories as one object schema; ``defaults`` the
    factories' configured values (what the table gets without an override) and ``owners`` the
    factories each key tunes."""

    schema: dict[str, Any]
    defaults: dict[str, Any] = field(default_factory=dict)
    owners: dict[str, list[str]] = field(default_factory=dict)


def table_overrides_schema(table: Table) -> OverridesSchema:
    properties: dict[str, Any] = {MANUAL_ACTIONS: MANUAL_SCHEMA}
    result = OverridesSchema(schema={"type": "object", "properties": properties})
    for configured in configured_factories():
        factory = configured.factory
        if table.format not in factory.supported_actions():
            continue
        for key, schema in type(factory).properties_schema.get("properties", {}).items():
            properties.setdefault(key, schema)
            result.defaults.setdefault(key, factory.properties.get(key))
            result.owners.setdefault(key, []).append(configured.name)
    return result


def table_overrides_update(*, table: Table, overrides: dict[str, Any]) -> Table:
    """Saves ``overrides`` (the overridable keys' new values; a key left out loses its override)
    as ``table``'s properties, keeping its other properties. ``InvalidInput`` (``key: reason``)
    when a factory's schema refuses a value; nothing is saved then."""
    known = table_overrides_schema(table)
    unknown = sorted(set(overrides) - set(known.schema["properties"]))
    if unknown:
        raise InvalidInput(
            f"{unknown[0]}: not a property any factory of this table reads", field="properties"
        )
    manual = overrides.get(MANUAL_ACTIONS, [])
    if not isinstance(manual, list) or not all(isinstance(name, str) for name in manual):
        raise InvalidInput(f"{MANUAL_ACTIONS}: a list of action names", field="properties")
    for configured in configured_factories():
        cls = type(configured.factory)
        mine = {k: v for k, v in overrides.items() if k in cls.properties_schema.get("properties", {})}
        if mine and table.format in configured.factory.supported_actions():
            validate_properties(cls, {**configured.factory.properties, **mine})
    kept = {k: v for k, v in (table.properties or {}).items() if k not in known.schema["properties"]}
    table.properties = {**kept, **overrides}
    table.save(update_fields=["properties"])
    return table
