"""JSON Schema pieces every built-in factory's properties share, documented once: the scheduler's
``interval`` and ``parallelism`` (``TriggerStrategy.from_properties``), and ``with_defaults``, which
writes each property's default (``default_properties``) into its schema for the admin and docs."""

from __future__ import annotations

from typing import Any

INTERVAL: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "description": "Seconds between the scheduler's evaluations of a table for this action",
}
PARALLELISM: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "description": "Processes of this action running at once, across all tables",
}
DRY_RUN: dict[str, Any] = {
    "type": "boolean",
    "description": "Write and delete nothing; the summary lists what a run would do",
}


def with_defaults(schema: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with each property's ``default`` (a JSON Schema annotation, not applied by the
    validator: the registry merges ``default_properties`` itself) taken from ``defaults``."""
    properties = {
        key: {**value, "default": defaults[key]} if key in defaults else value
        for key, value in schema.get("properties", {}).items()
    }
    return {**schema, "properties": properties}
