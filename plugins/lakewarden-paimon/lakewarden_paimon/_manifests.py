"""Manifests pypaimon cannot read, handed to it in the one shape it reads.

pypaimon 2.1 reads manifest lists, manifests and index manifests as Avro only, and a data file's
entry with fields written since Paimon 1.0. Java Paimon writes them in the table's
``manifest.format`` (``orc`` or ``parquet`` as well as ``avro``), and Paimon 0.9 and older wrote no
``_VALUE_STATS_COLS`` (0.9: the value statistics cover every column), 0.8 and older no
``_FILE_SOURCE``, 0.7 and older no ``_EMBEDDED_FILE_INDEX``. pypaimon fails on both with a raw
error (fastavro's "cannot read header", a ``KeyError``).

``reading_older_manifests`` makes a table's file IO hand such a file to pypaimon as Avro in
pypaimon's own schema: ORC and Parquet read through pyarrow, old Avro entries with the missing
fields null (what they mean). Current Avro files pass through untouched. Only the fields the file
holds are written, plus those pypaimon cannot do without, so that pypaimon sees the rest as
absent, as it would in the original file.
"""

from __future__ import annotations

import copy
import datetime as dt
import io
from collections.abc import Iterable, Iterator
from typing import Any

from storage.spec.errors import CorruptTable

AVRO, ORC, PARQUET = b"Obj\x01", b"ORC", b"PAR1"
#: A data file's entry fields pypaimon reads without a default, all nullable, missing from the
#: manifests of older Paimon versions.
NEEDED_FILE_FIELDS = ("_DELETE_ROW_COUNT", "_EMBEDDED_FILE_INDEX", "_FILE_SOURCE", "_VALUE_STATS_COLS")
KINDS = ("manifest-list", "index-manifest", "manifest")  # longest prefix first


def kind_of(path: str) -> str | None:
    """``manifest``, ``manifest-list`` or ``index-manifest`` for a file of a table's ``manifest``
    folder (by Paimon's file names); None for any other file."""
    folder, _, name = str(path).rstrip("/").rpartition("/")
    if folder.rpartition("/")[2] != "manifest":
        return None
    return next((kind for kind in KINDS if name.startswith(f"{kind}-")), None)


def _schemas() -> dict[str, dict]:
    from pypaimon.manifest.index_manifest_file import INDEX_MANIFEST_ENTRY_SCHEMA
    from pypaimon.manifest.schema.manifest_entry import MANIFEST_ENTRY_SCHEMA
    from pypaimon.manifest.schema.manifest_file_meta import MANIFEST_FILE_META_SCHEMA

    return {
        "manifest": MANIFEST_ENTRY_SCHEMA,
        "manifest-list": MANIFEST_FILE_META_SCHEMA,
        "index-manifest": INDEX_MANIFEST_ENTRY_SCHEMA,
    }


def readable(data: bytes, kind: str, path: str = "") -> bytes:
    """``data`` (a manifest file of ``kind``) as Avro bytes pypaimon reads."""
    try:
        return _readable(data, kind)
    except CorruptTable:
        raise
    except Exception as exc:  # pyarrow, fastavro: a file that is not what its name says
        raise CorruptTable(f"Paimon {kind} {path or '(unnamed)'} cannot be read: {exc}") from exc


def _readable(data: bytes, kind: str) -> bytes:
    records: Iterable[Any]
    if data.startswith(AVRO):
        import fastavro

        reader = fastavro.reader(io.BytesIO(data))  # reads the header only
        writer_schema: Any = reader.writer_schema
        present = _avro_names(writer_schema)
        if kind != "manifest" or all(f"_FILE.{name}" in present for name in NEEDED_FILE_FIELDS):
            return data
        records = reader
    elif data.startswith(ORC):
        import pyarrow.orc

        table = pyarrow.orc.ORCFile(io.BytesIO(data)).read()
        present, records = _arrow_names(table.schema), _python_values(table.to_pylist())
    elif data.startswith(PARQUET):
        import pyarrow.parquet

        table = pyarrow.parquet.read_table(io.BytesIO(data))
        present, records = _arrow_names(table.schema), _python_values(table.to_pylist())
    else:  # not a format Paimon writes manifests in (pypaimon reads JSON index manifests itself)
        return data
    return _to_avro(_schema(_schemas()[kind], present), records)


def _avro_names(schema: dict) -> set[str]:
    names = set()
    for field in schema.get("fields", []):
        names.add(field["name"])
        record = field["type"]
        if isinstance(record, dict) and record.get("type") == "record":
            names.update(f"{field['name']}.{sub['name']}" for sub in record["fields"])
    return names


def _arrow_names(schema: Any) -> set[str]:
    import pyarrow as pa

    names = set()
    for field in schema:
        names.add(field.name)
        if pa.types.is_struct(field.type):
            names.update(f"{field.name}.{sub.name}" for sub in field.type)
    return names


def _schema(target: dict, present: set[str]) -> dict:
    """``target`` (pypaimon's schema) with only the fields the file has, and those pypaimon needs."""
    schema = copy.deepcopy(target)
    schema["fields"] = [f for f in schema["fields"] if f["name"] in present]
    for field in schema["fields"]:
        record = field["type"]
        if field["name"] == "_FILE" and isinstance(record, dict):
            keep = set(NEEDED_FILE_FIELDS)
            record["fields"] = [
                f for f in record["fields"] if f"_FILE.{f['name']}" in present or f["name"] in keep
            ]
    return schema


def _python_values(rows: list[dict]) -> Iterator[dict]:
    """pyarrow's values as fastavro writes them: timestamps as aware datetimes (an ORC timestamp
    has no zone: Paimon's are UTC), small integers as they are."""
    for row in rows:
        yield {name: _python(value) for name, value in row.items()}


def _python(value: Any) -> Any:
    if isinstance(value, dict):
        return {name: _python(v) for name, v in value.items()}
    if isinstance(value, list):
        return [_python(v) for v in value]
    if hasattr(value, "to_pydatetime"):  # a pandas Timestamp (nanosecond unit)
        value = value.to_pydatetime()
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    return value


def _to_avro(schema: dict, records: Iterable[Any]) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records)
    return out.getvalue()


def _new_input_stream(file_io: Any, path: Any) -> Any:
    """A file IO's ``new_input_stream``, with manifests read through ``readable``."""
    stream = super(type(file_io), file_io).new_input_stream(path)
    kind = kind_of(str(path))
    if kind is None:
        return stream
    with stream:
        data = stream.read()
    return io.BytesIO(readable(data, kind, str(path)))


_SUBCLASSES: dict[type, type] = {}


def _with_older_manifests(cls: type) -> type:
    # a plain subclass (no mixin base): an instance's class can be swapped to it
    if cls not in _SUBCLASSES:
        body = {"new_input_stream": _new_input_stream, "reads_older_manifests": True}
        _SUBCLASSES[cls] = type(f"{cls.__name__}ReadingOlderManifests", (cls,), body)
    return _SUBCLASSES[cls]


def reading_older_manifests(table: Any) -> Any:
    """``table`` (pypaimon's) whose file IO reads ORC, Parquet and pre-1.0 manifests (and every
    copy of it, which shares its file IO)."""
    file_io = table.file_io
    if not getattr(file_io, "reads_older_manifests", False):
        file_io.__class__ = _with_older_manifests(type(file_io))
    return table
