"""ORC files written for Iceberg tables whose ``write.format.default`` (data) or
``write.delete.format.default`` (position deletes; default: the data format) is ``orc``.

pyarrow's ORC writer stores Arrow field metadata as ORC type attributes, so a file carries its
field ids as Iceberg's own ORC writer (``ORCSchemaUtil``) writes them: ``iceberg.id`` and
``iceberg.required`` on every column, map keys and values and list elements included (pyarrow
reads map attributes back without them, the ORC library reads them all), ``iceberg.long-type``
on longs (``TIME`` for a ``time`` column, an ORC long of microseconds),
``iceberg.binary-type`` on binaries (``UUID``, ``FIXED`` with ``iceberg.length``), ``timestamp``
as an ORC ``timestamp``, ``timestamptz`` as ``timestamp with local time zone``. Types Iceberg's
ORC format has no mapping for here (``timestamp_ns``, ``variant``, ``unknown``) are refused with
``InputError`` before anything is written.

pyarrow exposes no ORC column statistics, so a data file's metrics are computed from the rows
as they are written (``OrcMetrics``): value, null and NaN counts and lower/upper bounds of the
primitive columns outside lists and maps, by field id, truncated as the table's
``write.metadata.metrics.*`` properties ask (``iceberg.lineage.orc_data_file``).
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from processes.maintenance.errors import InputError

PARQUET, ORC = "parquet", "orc"
FORMAT_PROPERTY = "write.format.default"
DELETE_FORMAT_PROPERTY = "write.delete.format.default"
ORC_CODEC_PROPERTY = "write.orc.compression-codec"
FIELD_ID_KEY = b"PARQUET:field_id"
ID, REQUIRED = b"iceberg.id", b"iceberg.required"
LONG_TYPE, BINARY_TYPE, LENGTH = b"iceberg.long-type", b"iceberg.binary-type", b"iceberg.length"
# the rewrite's compression-codec parameter and Iceberg's ORC codecs, as pyarrow names them
_ORC_CODECS = {"none": "uncompressed", "uncompressed": "uncompressed", "gzip": "zlib", "zlib": "zlib"}
_ORC_CODECS.update({name: name for name in ("snappy", "lz4", "zstd")})


def data_format(properties: Mapping[str, str]) -> str:
    """The format of the data files a rewrite writes: the table's ``write.format.default``
    (parquet without one); ``InputError`` for a format it cannot write (avro)."""
    return _format(properties.get(FORMAT_PROPERTY), FORMAT_PROPERTY, "rewritten")


def delete_format(properties: Mapping[str, str]) -> str:
    """The format of the position delete files the delete-file actions write: the table's
    ``write.delete.format.default``, else its ``write.format.default``, else parquet."""
    given = properties.get(DELETE_FORMAT_PROPERTY)
    name = DELETE_FORMAT_PROPERTY if given else FORMAT_PROPERTY
    return _format(given or properties.get(FORMAT_PROPERTY), name, "changed")


def _format(value: str | None, name: str, done: str) -> str:
    file_format = (value or PARQUET).strip().lower()
    if file_format not in (PARQUET, ORC):
        raise InputError(
            f"the table's {name} is {value}: only parquet and ORC files are written; nothing was {done}"
        )
    return file_format


def orc_codec(given: str, properties: Mapping[str, str]) -> str:
    """pyarrow's name of the ORC codec: ``given`` (the rewrite's compression-codec), else the
    table's ``write.orc.compression-codec``, else zlib (Iceberg's default)."""
    codec = (given or properties.get(ORC_CODEC_PROPERTY) or "zlib").lower()
    if codec not in _ORC_CODECS:
        raise InputError(
            f"ORC compression codec {codec} is not written here (use one of"
            f" {', '.join(sorted(_ORC_CODECS))}); nothing was written"
        )
    return _ORC_CODECS[codec]


# --- schema --------------------------------------------------------------------------------------


def orc_schema(schema: pa.Schema) -> pa.Schema:
    """The schema pyarrow writes an Iceberg ORC file of ``schema`` (fields carrying
    ``PARQUET:field_id``) with: the module docstring's attributes and ORC-writable types."""
    return pa.schema([_orc_field(field) for field in schema])


def _orc_field(field: pa.Field) -> pa.Field:
    metadata = field.metadata or {}
    attributes: dict[bytes, bytes] = {}
    if FIELD_ID_KEY in metadata:
        attributes = {ID: metadata[FIELD_ID_KEY], REQUIRED: b"false" if field.nullable else b"true"}
    kind, t = field.type, pa.types
    if metadata.get(b"iceberg.type") == b"variant":
        kind = pa.null()  # refused below: Iceberg's ORC format has no variant
    if t.is_struct(kind):
        kind = pa.struct([_orc_field(child) for child in kind])
    elif t.is_list(kind) or t.is_large_list(kind):
        kind = pa.list_(_orc_field(kind.value_field))
    elif t.is_map(kind):
        kind = pa.map_(_orc_field(kind.key_field), _orc_field(kind.item_field))
    elif t.is_time(kind):
        kind, attributes[LONG_TYPE] = pa.int64(), b"TIME"
    elif t.is_int64(kind):
        attributes[LONG_TYPE] = b"LONG"
    elif isinstance(kind, pa.UuidType):
        kind, attributes[BINARY_TYPE] = pa.binary(), b"UUID"
    elif t.is_fixed_size_binary(kind):
        attributes.update({BINARY_TYPE: b"FIXED", LENGTH: str(kind.byte_width).encode()})
        kind = pa.binary()
    elif t.is_binary(kind) or t.is_large_binary(kind):
        kind, attributes[BINARY_TYPE] = pa.binary(), b"BINARY"
    elif (t.is_timestamp(kind) and kind.unit != "us") or not _writable(kind):
        raise InputError(
            f"column {field.name} of type {field.type} has no Iceberg ORC mapping here; ORC files of this"
            " table cannot be written (nothing was written)"
        )
    return pa.field(field.name, kind, field.nullable, attributes or None)


def _writable(kind: pa.DataType) -> bool:
    t = pa.types
    checks = (t.is_boolean, t.is_integer, t.is_floating, t.is_decimal, t.is_date32, t.is_timestamp)
    return any(check(kind) for check in (*checks, t.is_string, t.is_large_string))


# --- metrics -------------------------------------------------------------------------------------


def _leaves(fields: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], int, pa.DataType]]:
    """(path, field id, type) of the primitive columns reached through structs only."""
    found = []
    for field in fields:
        if pa.types.is_struct(field.type):
            found += _leaves(field.type, (*path, field.name))
        elif not pa.types.is_nested(field.type) and FIELD_ID_KEY in (field.metadata or {}):
            found.append(((*path, field.name), int(field.metadata[FIELD_ID_KEY]), field.type))
    return found


class OrcMetrics:
    """The counts and bounds of the rows written to one file, by field id: [values, nulls, NaNs
    (None for non-floating columns), min, max] (min/max as Python values, None when unknown)."""

    def __init__(self, schema: pa.Schema) -> None:
        self.rows = 0
        self.leaves = _leaves(schema)
        self.columns: dict[int, list[Any]] = {
            field_id: [0, 0, 0 if pa.types.is_floating(kind) else None, None, None]
            for _, field_id, kind in self.leaves
        }

    def update(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for path, field_id, kind in self.leaves:
            column: Any = table.column(path[0])
            for name in path[1:]:
                column = pc.struct_field(column, name)  # a null struct gives a null child
            stats = self.columns[field_id]
            stats[0] += len(column)
            stats[1] += column.null_count
            if isinstance(kind, pa.BaseExtensionType):
                column = pa.chunked_array([chunk.storage for chunk in column.chunks], kind.storage_type)
            if pa.types.is_floating(kind):
                nan = pc.is_nan(column)
                stats[2] += int(pc.sum(nan).as_py() or 0)
                column = column.filter(pc.invert(nan))
            if len(column) == column.null_count:
                continue
            bounds = pc.min_max(column)
            low, high = bounds["min"].as_py(), bounds["max"].as_py()
            stats[3] = low if stats[3] is None else min(stats[3], low)
            stats[4] = high if stats[4] is None else max(stats[4], high)

    def dumps(self) -> bytes:
        """What travels from the writing task back to the driver (``iceberg.lineage.orc_data_file``)."""
        return pickle.dumps({"rows": self.rows, "columns": self.columns})


class OrcOutputFile:
    """One ORC file being written at ``fs_path`` of ``fs``: rows of ``schema`` (the table's),
    written with ``orc_schema``'s attributes, its metrics gathered (``OrcMetrics``)."""

    def __init__(self, fs: Any, fs_path: str, schema: pa.Schema, compression: str) -> None:
        import pyarrow.orc as orc

        self.schema = orc_schema(schema)
        self.metrics = OrcMetrics(schema)
        self._stream = fs.open_output_stream(fs_path)
        self._writer = orc.ORCWriter(self._stream, compression=compression)

    def write_table(self, table: pa.Table, **_: Any) -> None:
        self.metrics.update(table)
        self._writer.write(table.cast(self.schema))

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._stream.close()


def write_orc(fs: Any, fs_path: str, table: pa.Table, compression: str = "zlib") -> None:
    """``table`` (fields carrying field ids) as one ORC file (a position delete file)."""
    out = OrcOutputFile(fs, fs_path, table.schema, compression)
    try:
        out.write_table(table)
    finally:
        out.close()
