"""JSON Schema pieces every built-in factory's properties share, documented once: the scheduler's
``interval`` and ``parallelism`` (``TriggerStrategy.from_properties``), and ``with_defaults``, which
writes each property's default (``default_properties``) into its schema for the admin and docs."""

from __future__ import annotations

from typing import Any

# Every number a property or parameter takes has a maximum (issue 29, item 11: a target file size
# of 1e30 bytes, 1e12 commits or a retention of 1e308 hours were accepted, then overflowed or
# failed in the worker). Each bound is far above any sensible value and below any overflow.

#: Ages and retentions: 100 years (36,500 days), in seconds; ``retention.parse_duration`` too.
MAX_AGE_SECONDS = 36_500 * 86_400
MAX_AGE_HOURS = MAX_AGE_SECONDS // 3600
#: Sizes of one output file (or manifest): 16 GiB.
MAX_FILE_BYTES = 16 * 1024**3
#: Counts used as thresholds or limits (files, manifests, commits, snapshots, versions).
MAX_COUNT = 1_000_000
#: Processes, groups or threads at once.
MAX_CONCURRENCY = 1024
#: Numbers the formats keep as a Java ``int`` (Iceberg spec ids, Paimon's options, rows per file).
MAX_INT32 = 2**31 - 1
#: Ids the formats keep as a Java ``long`` (Iceberg snapshot ids).
MIN_INT64, MAX_INT64 = -(2**63), 2**63 - 1

#: A number's unit, for forms (issue 34): a JSON Schema annotation the validator ignores. The
#: console shows and takes ``BYTES`` in MiB and ``SECONDS``/``HOURS`` in a readable unit of time,
#: and sends the number in the schema's own unit.
UNIT = "x-unit"
BYTES, SECONDS, HOURS = "bytes", "seconds", "hours"

INTERVAL: dict[str, Any] = {
    "type": "integer",
    UNIT: SECONDS,
    "minimum": 1,
    "maximum": 366 * 86_400,
    "description": "Seconds between the scheduler's evaluations of a table for this action (at most a year)",
}
PARALLELISM: dict[str, Any] = {
    "type": "integer",
    "minimum": 1,
    "maximum": MAX_CONCURRENCY,
    "description": "Processes of this action running at once, across all tables",
}
#: The scheduler's minimum benefit of a run (processes/ranking.py: points, below which a due table
#: is not asked; 0: never skipped).
MIN_BENEFIT = "min-benefit"
MIN_BENEFIT_SCHEMA: dict[str, Any] = {
    "type": "number",
    "minimum": 0,
    "maximum": MAX_COUNT,
    "description": "The scheduler skips a table when a run's predicted benefit is below this many points"
    " (small files removed + delete files removed + manifests merged + bytes reclaimed / 16 MiB +"
    " health score gain); 0: never skipped",
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
