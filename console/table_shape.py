"""The shape of a table (partitioning, sort order, masked properties, schema) as plain data, read
through the spec API once per table state: the overview tab and the workbench's schema browser
show it."""

from __future__ import annotations

import hashlib
import os

from console.charts_context import cached, remember
from storage import services
from storage.io import is_local, local_path
from storage.models import Table
from storage.secrets import mask_mapping

#: The shape of a table (partitioning, sort order, properties, schema) is kept this long at most;
#: a refresh or a new snapshot changes its key sooner.
SHAPE_SECONDS = 24 * 3600


def table_shape(table: Table) -> dict:
    """``definition`` and ``schema_fields`` of the overview tab as plain data, read through the
    spec API once per table state (its row's snapshot and refresh) instead of on every view. A
    local table whose folder is gone is opened anyway, so the page says it cannot be read."""
    facts = (table.pk, table.location, table.current_instant, str(table.refreshed_at))
    key = "lakewarden:table-shape:v1:" + hashlib.sha256(repr(facts).encode()).hexdigest()
    shape = cached(key) if folder_present(table.location) else None
    if shape is None:
        spec_table = services.table_open(table)
        definition = spec_table.definition
        shape = {
            "definition": {
                "partition_spec": {
                    "fields": [
                        {"transform": f.transform, "source_column": f.source_column}
                        for f in definition.partition_spec.fields
                    ]
                },
                "sort_columns": list(definition.sort_columns),
                "properties": mask_mapping(dict(definition.properties)),
            },
            "schema_fields": [
                {"name": f.name, "type": str(f.type), "nullable": f.nullable} for f in spec_table.schema
            ],
        }
        remember(key, shape, SHAPE_SECONDS)
    return shape


def folder_present(location: str) -> bool:
    """False for a local table whose folder is gone (an object-store prefix is not checked: that
    would cost a request per view, and a vanished table fails when opened)."""
    try:
        return not is_local(location) or os.path.isdir(local_path(location))
    except (ValueError, OSError):
        return False
