"""ORC data and delete files of Iceberg tables (Hive, Impala, Trino and Spark write them).

Iceberg's ORC writer keeps each column's field id in the ORC type attribute ``iceberg.id``;
pyarrow reads type attributes as Arrow field metadata, so ``with_field_ids`` renames that key to
``PARQUET:field_id`` at every nesting level and the reader matches ORC columns by field id the
way it matches parquet ones (by name in files without ids). Values are conformed to the table's
types as parquet ones are: ORC timestamps read as nanoseconds and are cut to the table's
microseconds, Iceberg ``time`` (an ORC long of microseconds) and ``uuid``/``fixed`` (ORC binary)
cast exactly.

A file is read stripe by stripe, in file order, so row positions (position deletes, row lineage)
count from the file's first row. pyarrow does not expose stripe offsets, so an ORC file is never
cut into split parts: the whole file belongs to the part whose byte range holds offset 0
(``reads_whole_file``), and the table drops the ``split_offsets`` an ORC writer records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from storage.spec.errors import CorruptTable

ORC_FIELD_ID = b"iceberg.id"
FIELD_ID_KEY = b"PARQUET:field_id"


def with_field_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every ``iceberg.id`` attribute also under ``PARQUET:field_id``."""
    return pa.schema([_field(f) for f in schema], metadata=schema.metadata)


def _field(field: pa.Field) -> pa.Field:
    metadata = dict(field.metadata or {})
    if ORC_FIELD_ID in metadata:
        metadata[FIELD_ID_KEY] = metadata[ORC_FIELD_ID]
    return pa.field(field.name, _type(field.type), field.nullable, metadata=metadata or None)


def _type(type_: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(type_):
        return pa.struct([_field(f) for f in type_])
    if pa.types.is_map(type_):
        return pa.map_(_field(type_.key_field), _field(type_.item_field))
    if pa.types.is_large_list(type_):
        return pa.large_list(_field(type_.value_field))
    if pa.types.is_list(type_):
        return pa.list_(_field(type_.value_field))
    return type_


def reads_whole_file(start: int | None, length: int | None) -> bool:
    """Whether the split part ``[start, start + length)`` (None: the whole file) reads an ORC file."""
    return start is None or length is None or start <= 0 < start + length


class OrcFile:
    """One ORC file: its schema with field ids, its rows in batches."""

    def __init__(self, source: Any, path: str) -> None:
        import pyarrow.orc as orc

        self.path = path
        try:
            self._file = orc.ORCFile(source)
            self.schema = with_field_ids(self._file.schema)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise CorruptTable(f"{path} is not a readable ORC file: {exc}") from exc

    def batches(self, columns: list[str], batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The file's rows in file order, ``columns`` only, at most ``batch_rows`` a batch."""
        try:
            for stripe in range(self._file.nstripes):
                whole = self._file.read_stripe(stripe, columns=columns)
                for start in range(0, whole.num_rows, batch_rows):
                    yield whole.slice(start, batch_rows)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise CorruptTable(f"ORC file {self.path} cannot be read: {exc}") from exc

    def read(self, columns: list[str] | None = None) -> pa.Table:
        """The whole file (``columns`` only), its fields carrying their ids."""
        try:
            table = self._file.read(columns=columns)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise CorruptTable(f"ORC file {self.path} cannot be read: {exc}") from exc
        return table.cast(pa.schema([self.schema.field(name) for name in table.column_names]))


__all__ = ["OrcFile", "reads_whole_file", "with_field_ids"]
