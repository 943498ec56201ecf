"""The rewrite factories' settings as JSON Schemas (Iceberg and Delta ``rewrite``): properties
(admin-editable, overridable per table by the same name) with their defaults and descriptions, and
the parameters a manual run may pass. ``compaction`` re-exports every name."""

from __future__ import annotations

from typing import Any

from processes.maintenance.schemas import (
    BYTES,
    INTERVAL,
    MAX_CONCURRENCY,
    MAX_COUNT,
    MAX_FILE_BYTES,
    MIN_BENEFIT,
    MIN_BENEFIT_SCHEMA,
    PARALLELISM,
    UNIT,
    with_defaults,
)

MIB = 1024 * 1024
DEFAULT_TARGET_FILE_SIZE = 128 * MIB

STRATEGY, SORT_ORDER, ZORDER_COLUMNS = "strategy", "sort-order", "zorder-columns"
BINPACK, SORT, ZORDER = "binpack", "sort", "zorder"
STRATEGIES = (BINPACK, SORT, ZORDER)
#: Commit property naming the ordering a clustering rewrite wrote (``Ordering.signature``).
STRATEGY_PROPERTY = "lakewarden.rewrite-strategy"


_SORT_ORDER: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {
        "oneOf": [
            {"type": "string", "minLength": 1},
            {
                "type": "object",
                "properties": {
                    "column": {"type": "string", "minLength": 1},
                    "direction": {"type": "string", "enum": ["asc", "desc"]},
                    "nulls": {"type": "string", "enum": ["first", "last"]},
                },
                "required": ["column"],
                "additionalProperties": False,
            },
        ]
    },
    "description": "Columns of the sort strategy: names, or {column, direction asc|desc, "
    "nulls first|last} (default asc; nulls first for asc, last for desc, as Iceberg); not only "
    "partition columns (Delta: no partition column)",
}
_ZORDER_COLUMNS: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "uniqueItems": True,
    "items": {"type": "string", "minLength": 1},
    "description": "Columns of the zorder strategy (not partition columns of the output spec)",
}


def _or_null(schema: dict[str, Any], default_meaning: str) -> dict[str, Any]:
    return {
        "oneOf": [{"type": "null"}, {k: v for k, v in schema.items() if k != "description"}],
        "description": f"{schema['description']}; null: {default_meaning}",
    }


#: Properties of both rewrite factories (admin-editable, overridable per table by the same name).
REWRITE_PROPERTIES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "interval": INTERVAL,
        "parallelism": PARALLELISM,
        MIN_BENEFIT: _or_null(MIN_BENEFIT_SCHEMA, "min-input-files - 1: a run of the fewest files it takes"),
        "target-file-size": {
            "type": "integer",
            "minimum": 65536,
            "maximum": MAX_FILE_BYTES,
            UNIT: BYTES,
            "description": "Bytes per output file",
        },
        "min-file-size": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_FILE_BYTES,
            UNIT: BYTES,
            "description": "Files below this size are rewritten even when above target/8",
        },
        "min-input-files": {
            "type": "integer",
            "minimum": 2,
            "maximum": MAX_COUNT,
            "description": "A partition is compacted once it has this many small files (or enough to fill"
            " a target file)",
        },
        "delete-file-threshold": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_COUNT,
            "description": "Rewrite files with at least this many delete files (0: off)",
        },
        "max-concurrent-groups": {
            "type": "integer",
            "minimum": 0,
            "maximum": MAX_CONCURRENCY,
            "description": "Groups written at once (0: as many as Spark has cores)",
        },
        "compression-codec": {
            "type": "string",
            "enum": ["", "snappy", "zstd", "gzip", "lz4", "none"],
            "description": "Codec of the new files (empty: Iceberg write.parquet.compression-codec,"
            " else zstd; ORC files: write.orc.compression-codec, else zlib; Delta: snappy)",
        },
        "engine": {
            "type": "string",
            "enum": ["arrow", "spark-sql"],
            "description": "arrow: Spark tasks read with the spec reader and write with pyarrow; "
            "spark-sql: Spark's own parquet reader and writer for groups without deletes",
        },
        STRATEGY: {
            "type": "string",
            "enum": list(STRATEGIES),
            "description": "binpack: merge small files; sort: rewrite whole partitions ordered by "
            "sort-order (Iceberg default: the table's sort order); zorder: rewrite whole partitions "
            "ordered by the interleaved bits of zorder-columns",
        },
        SORT_ORDER: _or_null(_SORT_ORDER, "the table's sort order (Iceberg), none (Delta)"),
        ZORDER_COLUMNS: _or_null(_ZORDER_COLUMNS, "none"),
    },
}
REWRITE_DEFAULTS: dict[str, Any] = {
    "interval": 3600,
    "parallelism": 1,
    MIN_BENEFIT: None,  # processes.ranking.min_benefit: min-input-files - 1
    "target-file-size": DEFAULT_TARGET_FILE_SIZE,
    "min-file-size": 0,
    "min-input-files": 5,
    "delete-file-threshold": 0,
    "max-concurrent-groups": 0,
    "compression-codec": "",
    "engine": "arrow",
    STRATEGY: BINPACK,
    SORT_ORDER: None,
    ZORDER_COLUMNS: None,
}
REWRITE_PROPERTIES_SCHEMA = with_defaults(REWRITE_PROPERTIES_SCHEMA, REWRITE_DEFAULTS)


def _strategy_is(name: str) -> dict[str, Any]:
    return {"properties": {STRATEGY: {"const": name}}, "required": [STRATEGY]}


REWRITE_PARAMS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        **{
            key: REWRITE_PROPERTIES_SCHEMA["properties"][key]
            for key in (
                "target-file-size",
                "min-file-size",
                "min-input-files",
                "delete-file-threshold",
                "engine",
            )
        },
        STRATEGY: REWRITE_PROPERTIES_SCHEMA["properties"][STRATEGY],
        SORT_ORDER: _SORT_ORDER,
        ZORDER_COLUMNS: _ZORDER_COLUMNS,
    },
    "additionalProperties": False,
    # One strategy's parameters only: zorder needs zorder-columns, sort-order belongs to sort.
    "allOf": [
        {
            "if": _strategy_is(ZORDER),
            "then": {"required": [ZORDER_COLUMNS], "not": {"required": [SORT_ORDER]}},
            "else": {"not": {"required": [ZORDER_COLUMNS]}},
        },
        {"if": _strategy_is(SORT), "else": {"not": {"required": [SORT_ORDER]}}},
    ],
}
