"""Paimon tables pypaimon alone cannot read, read (or refused by name) by the plugin:

- manifests in ORC or Parquet (Java Paimon's ``manifest.format``): built here by writing a table
  with pypaimon and rewriting its manifest lists and manifests in that format, with the sizes the
  lists and snapshots record, as Java Paimon writes them;
- Paimon 0.9 manifests: a data file's entry without ``_VALUE_STATS_COLS`` and later fields (its
  value statistics cover every column), lists without the bucket and level ranges, snapshots
  without list sizes;
- the partial-update merge engine with ``ignore-delete``, which pypaimon does not implement:
  refused as ``UnsupportedFeature`` naming it, never pypaimon's ``NotImplementedError``.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pytest

from tests.plugins._paimon_tables import (
    SCHEMA,
    create,
    pypaimon_read,
    rows,
    sorted_rows,
    write,
    write_primary_key_table,
)

fastavro = pytest.importorskip("fastavro")

# the rows a read returns at each of write_primary_key_table's six snapshots
ROWS_PER_SNAPSHOT = [30, 30, 40, 40, 36, 36]


def _arrow_type(avro: object) -> tuple[pa.DataType, bool]:
    """The Arrow type (and nullability) of an Avro type of Paimon's manifest schemas."""
    if isinstance(avro, list):  # ["null", X]
        return _arrow_type(next(t for t in avro if t != "null"))[0], True
    if isinstance(avro, dict):
        if avro.get("logicalType") == "timestamp-millis":
            return pa.timestamp("ms"), False
        if avro["type"] == "array":
            return pa.list_(_arrow_type(avro["items"])[0]), False
        if avro["type"] == "record":
            return pa.struct([_arrow_field(f) for f in avro["fields"]]), False
        return _arrow_type(avro["type"])
    names = {"int": pa.int32(), "long": pa.int64(), "bytes": pa.binary(), "string": pa.string()}
    return names[avro], False


def _arrow_field(field: dict) -> pa.Field:
    data_type, nullable = _arrow_type(field["type"])
    return pa.field(field["name"], data_type, nullable=nullable)


def _naive(records: list[dict]) -> list[dict]:
    """Timestamps as an ORC file holds them: without a zone."""

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items()}
        if hasattr(value, "tzinfo") and value.tzinfo is not None:
            return value.replace(tzinfo=None)
        return value

    return [strip(r) for r in records]


def _encode(records: list[dict], avro_schema: dict, file_format: str) -> bytes:
    schema = pa.schema([_arrow_field(f) for f in avro_schema["fields"]])
    table = pa.Table.from_pylist(_naive(records), schema=schema)
    out = io.BytesIO()
    if file_format == "orc":
        import pyarrow.orc

        pyarrow.orc.write_table(table, out)
    else:
        import pyarrow.parquet

        pyarrow.parquet.write_table(table, out)
    return out.getvalue()


def _avro(path: Path) -> tuple[dict, list[dict]]:
    with path.open("rb") as f:
        reader = fastavro.reader(f)
        return reader.writer_schema, list(reader)


def _set_option(location: str, key: str, value: str) -> None:
    """The option in every schema file, as a table created (or altered) with it by Java has it."""
    for path in (Path(location) / "schema").glob("schema-*"):
        schema = json.loads(path.read_text())
        schema["options"][key] = value
        path.write_text(json.dumps(schema, indent=2))


def rewrite_manifests(location: str, file_format: str) -> None:
    """Every manifest, then every manifest list (with the manifests' new sizes), then every
    snapshot's list sizes, in ``file_format``."""
    folder = Path(location) / "manifest"
    sizes = {}
    for path in sorted(folder.glob("manifest-*")):
        if path.name.startswith("manifest-list-"):
            continue
        schema, records = _avro(path)
        path.write_bytes(_encode(records, schema, file_format))
        sizes[path.name] = path.stat().st_size
    for path in sorted(folder.glob("manifest-list-*")):
        schema, records = _avro(path)
        for record in records:
            record["_FILE_SIZE"] = sizes[record["_FILE_NAME"]]
        path.write_bytes(_encode(records, schema, file_format))
    _resize_snapshots(location)
    _set_option(location, "manifest.format", file_format)


def _resize_snapshots(location: str, *, drop: tuple[str, ...] = ()) -> None:
    folder = Path(location) / "manifest"
    for path in (Path(location) / "snapshot").glob("snapshot-*"):
        snapshot = json.loads(path.read_text())
        for key in ("baseManifestList", "deltaManifestList", "changelogManifestList"):
            if snapshot.get(key):
                snapshot[f"{key}Size"] = (folder / snapshot[key]).stat().st_size
        for key in drop:
            snapshot.pop(key, None)
        path.write_text(json.dumps(snapshot, indent=2))


# Paimon 0.9's data file fields (DataFileMeta09Serializer) and manifest list fields
FILE_FIELDS_09 = (
    "_FILE_NAME _FILE_SIZE _ROW_COUNT _MIN_KEY _MAX_KEY _KEY_STATS _VALUE_STATS _MIN_SEQUENCE_NUMBER"
    " _MAX_SEQUENCE_NUMBER _SCHEMA_ID _LEVEL _EXTRA_FILES _CREATION_TIME _DELETE_ROW_COUNT"
    " _EMBEDDED_FILE_INDEX _FILE_SOURCE"
).split()
LIST_FIELDS_09 = (
    "_VERSION _FILE_NAME _FILE_SIZE _NUM_ADDED_FILES _NUM_DELETED_FILES _PARTITION_STATS _SCHEMA_ID"
)
SNAPSHOT_KEYS_SINCE_09 = (
    "baseManifestListSize",
    "deltaManifestListSize",
    "changelogManifestListSize",
    "nextRowId",
    "uuid",
    "writerVersion",
)


def _rewrite_avro(path: Path, keep) -> None:
    schema, records = _avro(path)
    schema = keep(schema)
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records)
    path.write_bytes(out.getvalue())


def rewrite_as_paimon_09(location: str) -> None:
    folder = Path(location) / "manifest"

    def file_09(schema: dict) -> dict:
        record = next(f for f in schema["fields"] if f["name"] == "_FILE")["type"]
        record["fields"] = [f for f in record["fields"] if f["name"] in FILE_FIELDS_09]
        return schema

    def list_09(schema: dict) -> dict:
        schema["fields"] = [f for f in schema["fields"] if f["name"] in LIST_FIELDS_09.split()]
        return schema

    for path in sorted(folder.glob("manifest-*")):
        _rewrite_avro(path, list_09 if path.name.startswith("manifest-list-") else file_09)
    _resize_snapshots(location, drop=SNAPSHOT_KEYS_SINCE_09)


def write_full_stats_table(warehouse: str) -> str:
    """write_primary_key_table's table with value statistics of every column, as Paimon 0.9
    wrote them (``metadata.stats-mode`` full: ``_VALUE_STATS_COLS`` null)."""
    location = write_primary_key_table(warehouse)
    _set_option(location, "metadata.stats-mode", "full")
    return location


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[int, list[dict]]:
    """Rows pypaimon reads at each snapshot of the table before its manifests are rewritten."""
    location = write_primary_key_table(str(tmp_path_factory.mktemp("paimon-reference")))
    return {i: sorted_rows(pypaimon_read(location, **{"scan.snapshot-id": i})) for i in range(1, 7)}


def _read(table, source=None, **kwargs) -> list[dict]:
    return sorted_rows(pa.Table.from_batches(list(table.read(source, **kwargs)), schema=SCHEMA))


def _assert_reads_like_pypaimon_did(location: str, reference: dict[int, list[dict]]) -> None:
    from lakewarden_paimon import PaimonAdapter

    table = PaimonAdapter.open(location)
    assert [len(reference[i]) for i in range(1, 7)] == ROWS_PER_SNAPSHOT
    for snapshot_id in range(1, 7):
        assert _read(table, snapshot_id) == reference[snapshot_id]
    assert table.summary().record_count == 36
    assert table.summary().file_count == len(list(table.file_index().list_files_at()))
    by_split = [b for split in table.plan_splits() for b in table.read(split)]
    assert sorted_rows(pa.Table.from_batches(by_split, schema=SCHEMA)) == reference[6]
    eu = [r for r in reference[6] if r["region"] == "eu" and r["v"].startswith("f")]
    assert _read(table, filters="region = 'eu' and v like 'f%'") == eu
    changes = list(table.file_index().list_files_between(None, 6))
    assert len(changes) >= table.summary().file_count


@pytest.mark.parametrize("file_format", ["orc", "parquet"])
def test_manifests_written_in_orc_or_parquet_are_read(tmp_path, reference, file_format):
    location = write_primary_key_table(str(tmp_path))
    rewrite_manifests(location, file_format)
    manifest = next((Path(location) / "manifest").glob("manifest-list-*")).read_bytes()
    assert manifest.startswith(b"ORC" if file_format == "orc" else b"PAR1")
    _assert_reads_like_pypaimon_did(location, reference)


def test_paimon_09_manifests_without_value_stats_cols_are_read(tmp_path, reference):
    location = write_full_stats_table(str(tmp_path))
    rewrite_as_paimon_09(location)
    manifest = next(p for p in (Path(location) / "manifest").glob("manifest-*") if "list" not in p.name)
    schema, _ = _avro(manifest)
    file_fields = [
        f["name"] for f in next(f for f in schema["fields"] if f["name"] == "_FILE")["type"]["fields"]
    ]
    assert file_fields == FILE_FIELDS_09
    _assert_reads_like_pypaimon_did(location, reference)


def test_a_manifest_that_is_no_manifest_is_a_corrupt_table(tmp_path):
    from lakewarden_paimon import PaimonAdapter

    from storage.spec.errors import CorruptTable

    location = write_primary_key_table(str(tmp_path))
    rewrite_manifests(location, "orc")
    manifest = next(p for p in (Path(location) / "manifest").glob("manifest-*") if "list" not in p.name)
    manifest.write_bytes(b"ORC" + b"\x00" * 40)
    table = PaimonAdapter.open(location)
    with pytest.raises(CorruptTable, match=f"Paimon manifest .*{manifest.name} cannot be read"):
        list(table.read())


def _partial_update_table(warehouse: str) -> str:
    """A partial-update table (pypaimon writes these), then ``ignore-delete`` set on it as Java's
    ALTER TABLE ... SET does: a new schema file."""
    table, location = create(warehouse, "pu", primary_key=True)
    schema_file = Path(location) / "schema" / "schema-0"
    schema = json.loads(schema_file.read_text())
    schema["options"]["merge-engine"] = "partial-update"
    schema_file.write_text(json.dumps(schema, indent=2))
    table, _ = _reopen(warehouse)
    write(table, rows(range(6), lambda i: "eu", "a"))
    write(
        table,
        [{"id": i, "region": "eu", "v": None} for i in range(3)] + rows(range(3, 6), lambda i: "eu", "b"),
    )
    schema.update(id=1, timeMillis=schema["timeMillis"] + 1)
    schema["options"]["ignore-delete"] = "true"
    (Path(location) / "schema" / "schema-1").write_text(json.dumps(schema, indent=2))
    return location


def _reopen(warehouse: str):
    from pypaimon import CatalogFactory

    return CatalogFactory.create({"warehouse": warehouse}).get_table("db.pu"), None


def test_partial_update_with_ignore_delete_is_refused_by_name(tmp_path):
    from lakewarden_paimon import PaimonAdapter

    from storage.spec.errors import UnsupportedFeature

    location = _partial_update_table(str(tmp_path))
    table = PaimonAdapter.open(location)
    # what pypaimon does not read is refused by name; the rest of the table still answers
    with pytest.raises(UnsupportedFeature, match="partial-update merge engine with ignore-delete"):
        list(table.read())
    with pytest.raises(UnsupportedFeature, match="'ignore-delete'='true'"):
        list(table.read(table.file_index().list_files_at()))
    assert [i.id for i in table.timeline().instants()] == [1, 2]
    summary = table.summary()
    assert (summary.current_instant_id, summary.file_count) == (2, 4)
    # the rows the files hold: an upper bound of the merged rows (6), as for Iceberg equality deletes
    assert summary.record_count == 12
    assert table.definition.properties["merge-engine"] == "partial-update"


def test_partial_update_without_ignore_delete_is_read_merged(tmp_path):
    from lakewarden_paimon import PaimonAdapter

    location = _partial_update_table(str(tmp_path))
    (Path(location) / "schema" / "schema-1").unlink()
    table = PaimonAdapter.open(location)
    # nulls do not overwrite in a partial update: ids 0-2 keep "a", 3-5 take "b"
    expected = [{"id": i, "region": "eu", "v": f"{'a' if i < 3 else 'b'}{i}"} for i in range(6)]
    assert _read(table) == expected
    assert table.summary().record_count == 6
