"""v3 row lineage (Iceberg spec, "Row Lineage") as two metadata columns a read asks for by name.

``_row_id`` (field id 2147483540) and ``_last_updated_sequence_number`` (2147483539), both
``long``, are not part of the table schema: a read without ``columns`` (``SELECT *``) does not
return them, as in the Java reference and Spark; naming them in ``columns`` or ``filters`` does, on
a table with row lineage (format v3 with ``next-row-id``). A user column of the same name keeps
the name (the metadata column is then not reachable by it).

Values stored in the data file (a column with the field id, written when a row was moved to a new
file) win. A null or absent value is inherited, as the spec says:

* ``_row_id`` = the data file's ``first_row_id`` (its own, else inherited from its manifest, see
  ``index.RowIds``) + the row's position in the file: its physical position, counted before
  deletes and deletion vectors drop rows, so a row keeps its id whatever is deleted around it;
  null when the file has no ``first_row_id`` (files of snapshots written before an upgrade to v3);
* ``_last_updated_sequence_number`` = the data file's data sequence number.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storage.spec.models import DataFile

ROW_ID = "_row_id"
LAST_UPDATED_SEQUENCE_NUMBER = "_last_updated_sequence_number"
ROW_ID_FIELD_ID = 2147483540
LAST_UPDATED_FIELD_ID = 2147483539
NAMES = (ROW_ID, LAST_UPDATED_SEQUENCE_NUMBER)
_FIELD_ID = b"PARQUET:field_id"
_IDS = {ROW_ID_FIELD_ID, LAST_UPDATED_FIELD_ID}


def _field(name: str, field_id: int) -> pa.Field:
    return pa.field(name, pa.int64(), True, {_FIELD_ID: str(field_id).encode()})


FIELDS = (_field(ROW_ID, ROW_ID_FIELD_ID), _field(LAST_UPDATED_SEQUENCE_NUMBER, LAST_UPDATED_FIELD_ID))


def has_row_lineage(metadata: Any) -> bool:
    """Whether the table tracks row lineage: format v3 or later with a ``next-row-id``."""
    return int(metadata.format_version) >= 3 and getattr(metadata, "next_row_id", None) is not None


def metadata_columns(schema: pa.Schema) -> pa.Schema:
    """The lineage columns a read of ``schema`` can add (those whose name no column takes)."""
    return pa.schema([f for f in FIELDS if f.name not in schema.names])


def with_lineage(schema: pa.Schema) -> pa.Schema:
    """``schema`` followed by the lineage columns whose name it does not use."""
    extra = metadata_columns(schema)
    return pa.schema([*schema, *extra], metadata=schema.metadata) if len(extra) else schema


def is_lineage(field: pa.Field) -> bool:
    metadata = field.metadata or {}
    return _FIELD_ID in metadata and int(metadata[_FIELD_ID]) in _IDS


def mentions(names: Iterable[str] | None) -> bool:
    """Whether any of ``names`` (columns, or a filter's dotted columns) is a lineage column."""
    return names is not None and any(n.split(".", 1)[0] in NAMES for n in names)


def lineage_positions(fields: Sequence[pa.Field]) -> list[int]:
    """Indexes of the lineage columns among ``fields`` (a batch's columns)."""
    return [i for i, f in enumerate(fields) if is_lineage(f)]


def fill(batch: pa.RecordBatch, positions: list[int], data_file: DataFile, offset: int) -> pa.RecordBatch:
    """``batch`` (rows ``offset ..`` of ``data_file``, before deletes) with the lineage columns at
    ``positions`` inherited where the file stores null or nothing (module docstring)."""
    if not positions:
        return batch
    arrays = list(batch.columns)
    for index in positions:
        stored = arrays[index]
        inherited = _inherited(batch.schema.field(index), data_file, offset, batch.num_rows)
        if inherited is None or stored.null_count == 0:
            continue
        arrays[index] = inherited if stored.null_count == len(stored) else pc.coalesce(stored, inherited)
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


def _inherited(field: pa.Field, data_file: DataFile, offset: int, count: int) -> pa.Array | None:
    field_id = int((field.metadata or {})[_FIELD_ID])
    if field_id == ROW_ID_FIELD_ID:
        first = data_file.extra.get("first_row_id")
        if first is None:
            return None
        start = int(first) + offset
        return pa.array(np.arange(start, start + count, dtype=np.int64), pa.int64())
    sequence = data_file.extra.get("sequence_number")
    if sequence is None:
        return None
    return pa.repeat(pa.scalar(int(sequence), pa.int64()), count)
