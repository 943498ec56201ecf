"""A small Delta writer from the protocol, for tables deltalake cannot write (type widening,
variant, hand-made column mapping histories): commits of protocol, metaData and add actions in
``_delta_log/<version>.json`` and parquet data files written with pyarrow in whatever types the
test says."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyroaring import BitMap64

TABLE_ID = "8a0e5e66-2f36-4a7c-9f0e-6f1d1c0a5b11"
COMMIT_MILLIS = 1_700_000_000_000


def field(name: str, type_: Any, *, nullable: bool = True, **metadata: Any) -> dict[str, Any]:
    """A Delta schema field; ``metadata`` keys use ``_`` for ``.`` (``delta_typeChanges``)."""
    return {
        "name": name,
        "type": type_,
        "nullable": nullable,
        "metadata": {key.replace("_", "."): value for key, value in metadata.items()},
    }


def mapped(name: str, type_: Any, column_id: int, physical: str) -> dict[str, Any]:
    """A field under column mapping: its id and physical name."""
    return {
        "name": name,
        "type": type_,
        "nullable": True,
        "metadata": {"delta.columnMapping.id": column_id, "delta.columnMapping.physicalName": physical},
    }


def changes(*steps: tuple[str, str], field_path: str | None = None) -> list[dict[str, Any]]:
    """A ``delta.typeChanges`` list: (fromType, toType) steps, oldest first."""
    found = []
    for from_type, to_type in steps:
        change = {"fromType": from_type, "toType": to_type}
        if field_path is not None:
            change["fieldPath"] = field_path
        found.append(change)
    return found


def protocol(*reader_features: str) -> dict[str, Any]:
    writer = sorted({*reader_features, "appendOnly", "invariants"})
    return {
        "protocol": {
            "minReaderVersion": 3,
            "minWriterVersion": 7,
            "readerFeatures": sorted(reader_features),
            "writerFeatures": writer,
        }
    }


def metadata(
    fields: Iterable[Mapping[str, Any]],
    partition_columns: Iterable[str] = (),
    configuration: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metaData": {
            "id": TABLE_ID,
            "format": {"provider": "parquet", "options": {}},
            "schemaString": json.dumps({"type": "struct", "fields": list(fields)}),
            "partitionColumns": list(partition_columns),
            "configuration": dict(configuration or {}),
            "createdTime": COMMIT_MILLIS,
        }
    }


def data_file(
    table: Path,
    data: pa.Table,
    *,
    stats: str | None = None,
    partition: Mapping[str, str | None] | None = None,
    row_group_size: int | None = None,
) -> dict[str, Any]:
    """Write ``data`` as a parquet file of the table (types as given) and return its add action;
    ``stats`` is the stats JSON text as a writer of those types would record it."""
    folder = "/".join(f"{k}={v}" for k, v in (partition or {}).items())
    relative = f"{folder + '/' if folder else ''}part-{uuid.uuid4().hex}.parquet"
    target = table / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, target, row_group_size=row_group_size)
    add: dict[str, Any] = {
        "path": relative,
        "partitionValues": dict(partition or {}),
        "size": target.stat().st_size,
        "modificationTime": COMMIT_MILLIS,
        "dataChange": True,
    }
    if stats is not None:
        add["stats"] = stats
    return {"add": add}


def commit(table: Path, version: int, *actions: Mapping[str, Any], operation: str = "WRITE") -> None:
    log = table / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    info = {
        "commitInfo": {
            "timestamp": COMMIT_MILLIS + version * 1000,
            "operation": operation,
            "operationParameters": {"mode": "Append"},
        }
    }
    lines = [json.dumps(action) for action in (info, *actions)]
    (log / f"{version:020d}.json").write_text("\n".join(lines) + "\n", encoding="utf-8")


_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def z85(data: bytes) -> str:
    """Z85 text of ``data`` (padded to 4 bytes), as Delta stores inline deletion vectors."""
    data += b"\0" * (-len(data) % 4)
    out = []
    for start in range(0, len(data), 4):
        (number,) = struct.unpack(">I", data[start : start + 4])
        chars = []
        for _ in range(5):
            number, digit = divmod(number, 85)
            chars.append(_Z85[digit])
        out.append("".join(reversed(chars)))
    return "".join(out)


def inline_vector(positions: list[int]) -> dict[str, Any]:
    """An inline deletion vector descriptor removing ``positions``."""
    blob = struct.pack("<i", 1681511377) + BitMap64(positions).serialize()
    return {
        "storageType": "i",
        "pathOrInlineDv": z85(blob),
        "sizeInBytes": len(blob),
        "cardinality": len(positions),
    }
