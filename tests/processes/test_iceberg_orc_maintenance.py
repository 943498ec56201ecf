"""Maintenance of Iceberg tables whose data or delete files are ORC, alone or beside parquet, as
Hive, Impala, Trino and Spark write them (issue 29, item 19).

The ORC files are written here as Iceberg's ORC writer writes them (field ids as ``iceberg.id``
type attributes, via pyarrow) and committed through the SQL catalog: data files by a fast append,
delete files by another writer's row delta (``test_iceberg_deletes.commit_row_delta``). The
tables are the processes' usual ones (``make_iceberg``: ids numbered across the files, five rows
a file, every value derived from the id). Each process runs through the executor; the rows read
after (our reader, deletes applied) must be the rows read before, as a multiset.
"""

from __future__ import annotations

import datetime as dt
import io
import os
import pickle
import uuid
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.orc as orc
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat, ManifestContent, ManifestEntryStatus
from pyiceberg.typedef import Record
from pyiceberg.types import LongType

from processes.maintenance.errors import InputError
from processes.maintenance.iceberg.deletes.writing import POSITION_SCHEMA, position_metrics
from processes.maintenance.orc_output import OrcOutputFile, orc_schema
from processes.maintenance.outputs import local_path
from processes.models import ProcessStatus
from storage.formats.iceberg.commit import read_entries, read_manifest_list
from tests.objectstore.test_iceberg_maintenance_s3 import make_rest_iceberg, rest_catalog  # noqa: F401
from tests.processes.conftest import multiset, rows
from tests.processes.test_iceberg_deletes import commit_row_delta, files_under, live_deletes, ours

pytestmark = pytest.mark.django_db(transaction=True)

ORC_DEFAULT = {"write.format.default": "orc"}


# --- writing ORC files as Iceberg's ORC writer does -------------------------------------------------


def with_orc_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` with each field's ``PARQUET:field_id`` as the ``iceberg.id`` ORC attribute."""
    return pa.schema(
        [
            pa.field(f.name, f.type, f.nullable, {b"iceberg.id": f.metadata[b"PARQUET:field_id"]})
            for f in schema
        ]
    )


def write_orc(table, path: str, content: pa.Table) -> int:
    """``content`` as an ORC file at ``path`` through the table's file IO; its size."""
    buffer = io.BytesIO()
    orc.write_table(content, buffer)
    with table.io.new_output(path).create(overwrite=True) as out:
        out.write(buffer.getvalue())
    return len(buffer.getvalue())


def append_orc(table, parts: list[pa.Table]) -> list[str]:
    """One fast append of one ORC data file per part (no column metrics, as some writers do);
    their paths."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    schema = with_orc_ids(schema_to_pyarrow(table.schema(), include_field_ids=True))
    table.refresh()
    files = []
    for part in parts:
        path = f"{table.location()}/data/{uuid.uuid4()}.orc"
        size = write_orc(table, path, part.cast(schema))
        data_file = DataFile.from_args(
            _table_format_version=2,
            content=DataFileContent.DATA,
            file_path=path,
            file_format=FileFormat.ORC,
            partition=Record(),
            record_count=part.num_rows,
            file_size_in_bytes=size,
        )
        data_file.spec_id = table.metadata.default_spec_id
        files.append(data_file)
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)
    table.refresh()
    return [f.file_path for f in files]


def orc_position_deletes(table, named: dict[str, list[int]], *, bounds: bool = True) -> DataFile:
    """An ORC position delete file of ``named`` (data file -> positions) in the data folder."""
    pairs = sorted((path, pos) for path, positions in named.items() for pos in positions)
    content = pa.Table.from_arrays(
        [pa.array([p for p, _ in pairs], pa.string()), pa.array([q for _, q in pairs], pa.int64())],
        schema=POSITION_SCHEMA,
    )
    path = f"{table.location()}/data/{uuid.uuid4()}-position.orc"
    size = write_orc(table, path, content.cast(with_orc_ids(POSITION_SCHEMA)))
    metrics = position_metrics(content) if bounds else {"record_count": len(pairs)}
    return _delete_file(path, size, DataFileContent.POSITION_DELETES, metrics)


def orc_equality_deletes(table, ids: list[int]) -> DataFile:
    """An ORC equality delete file on ``id`` deleting ``ids``."""
    field_id = table.schema().find_field("id").field_id
    schema = pa.schema([pa.field("id", pa.int64(), False, {b"iceberg.id": str(field_id).encode()})])
    path = f"{table.location()}/data/{uuid.uuid4()}-equality.orc"
    size = write_orc(table, path, pa.table({"id": ids}, schema=schema))
    return _delete_file(
        path, size, DataFileContent.EQUALITY_DELETES, {"record_count": len(ids)}, equality_ids=[field_id]
    )


def _delete_file(path: str, size: int, content, metrics: dict, **extra) -> DataFile:
    data_file = DataFile.from_args(
        _table_format_version=3,
        content=content,
        file_path=path,
        file_format=FileFormat.ORC,
        partition=Record(),
        file_size_in_bytes=size,
        **metrics,
        **extra,
    )
    data_file.spec_id = 0
    return data_file


def data_files(table) -> dict[str, DataFile]:
    """The live data files of the current snapshot by path."""
    table.refresh()
    return {
        entry.data_file.file_path: entry.data_file
        for manifest in read_manifest_list(table.io, table.current_snapshot())
        if manifest.content == ManifestContent.DATA
        for entry in read_entries(table.io, manifest)
        if entry.status != ManifestEntryStatus.DELETED
    }


def expected(ids: range, deleted: set[int]) -> Counter:
    return multiset(rows(ids.start, len(ids)).filter(pa.array([i not in deleted for i in ids])))


def formats(table) -> Counter:
    return Counter(f.file_format for f in data_files(table).values())


@pytest.fixture
def mixed_table(make_iceberg):
    """Three parquet files (ids 0..14) and three ORC files (ids 15..29), unpartitioned, with an ORC
    position delete file deleting ids 16, 22 (ORC) and 3 (parquet)."""

    def make(properties=None):
        console_table, table = make_iceberg(files=3, rows_per_file=5, properties=properties)
        orc_paths = append_orc(table, [rows(15 + 5 * i, 5) for i in range(3)])
        parquet_paths = [p for p in data_files(table) if p.endswith(".parquet")]
        named = {orc_paths[0]: [1], orc_paths[1]: [2], parquet_paths[0]: [3]}
        commit_row_delta(table, [orc_position_deletes(table, named)])
        return console_table, table

    return make


MIXED_DELETED = {16, 22, 3}


# --- rewrite -----------------------------------------------------------------------------------------


def test_a_rewrite_compacts_orc_and_parquet_files_into_one_parquet_file(mixed_table, run_now):
    console_table, table = mixed_table()
    assert formats(table) == Counter({FileFormat.PARQUET: 3, FileFormat.ORC: 3})
    before = ours(table)
    assert before == expected(range(30), MIXED_DELETED)

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 6 and process.summary["files_out"] == 1
    assert formats(table) == Counter({FileFormat.PARQUET: 1})
    [path] = data_files(table)
    assert path.endswith("-compacted.parquet")
    assert ours(table) == before  # the ORC position deletes were applied while reading
    assert sum(before.values()) == 27


def test_a_table_whose_default_format_is_orc_is_compacted_into_orc_with_ids_and_metrics(
    mixed_table, run_now, spark
):
    console_table, table = mixed_table(ORC_DEFAULT)
    before = ours(table)

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 6 and process.summary["files_out"] == 1
    assert formats(table) == Counter({FileFormat.ORC: 1})
    [(path, data_file)] = data_files(table).items()
    assert path.endswith("-compacted.orc")
    assert ours(table) == before == expected(range(30), MIXED_DELETED)
    schema = table.schema()
    ids = {f.name: f.field_id for f in schema.fields}
    # the field ids are ORC type attributes, as the ORC library (Iceberg's Java reader's) reads them
    jvm = spark._jvm
    reader = jvm.org.apache.orc.OrcFile.createReader(
        jvm.org.apache.hadoop.fs.Path(local_path(path)),
        jvm.org.apache.orc.OrcFile.readerOptions(jvm.org.apache.hadoop.conf.Configuration()),
    )
    orc_types = reader.getSchema()
    attributes = {
        name: {a: child.getAttributeValue(a) for a in child.getAttributeNames()}
        for name, child in zip(orc_types.getFieldNames(), orc_types.getChildren(), strict=True)
    }
    assert {name: a["iceberg.id"] for name, a in attributes.items()} == {k: str(v) for k, v in ids.items()}
    assert attributes["id"] == {
        "iceberg.id": str(ids["id"]),
        "iceberg.required": "true",
        "iceberg.long-type": "LONG",
    }
    assert attributes["name"]["iceberg.required"] == "false"
    assert orc_types.findSubtype("ts").getCategory().getName() == "timestamp"
    assert reader.getNumberOfRows() == 27
    # metrics computed from the rows written: every row but the three deleted ones
    assert data_file.record_count == 27
    assert data_file.value_counts[ids["id"]] == 27
    assert data_file.null_value_counts[ids["name"]] == 5  # ids 0, 7, 14, 21, 28 have no name
    assert data_file.lower_bounds[ids["id"]] == to_bytes(LongType(), 0)
    assert data_file.upper_bounds[ids["id"]] == to_bytes(LongType(), 29)
    assert data_file.lower_bounds[ids["name"]] == b"name-1"  # string order; truncated to 16
    # Spark's own ORC reader reads the file's values
    frame = spark.read.orc(local_path(path))
    assert sorted(r["id"] for r in frame.select("id").collect()) == sorted(
        i for i in range(30) if i not in MIXED_DELETED
    )


def test_a_table_whose_default_format_is_avro_is_refused_and_nothing_is_written(mixed_table, run_now):
    from processes import executor, services
    from processes.models import ProcessTrigger
    from storage.errors import InvalidInput

    console_table, table = mixed_table({"write.format.default": "avro"})
    head, files = table.current_snapshot().snapshot_id, files_under(table)
    refusal = "write.format.default is avro: only parquet and ORC files are written; nothing was rewritten"

    with pytest.raises(InvalidInput, match=refusal):  # at submission: a 400
        run_now(console_table, "rewrite")
    # a run whose table changed after submission (as the scheduler's, which is not checked again)
    process = services.process_create(table=console_table, action="rewrite", trigger=ProcessTrigger.SCHEDULE)
    executor.run_process(process.pk)
    process.refresh_from_db()

    assert process.status == ProcessStatus.FAILED and process.attempt == 1
    assert refusal in process.failure
    table.refresh()
    assert table.current_snapshot().snapshot_id == head and files_under(table) == files


def test_orc_output_keeps_every_type_and_refuses_those_iceberg_orc_lacks(tmp_path, spark):
    from pyarrow import fs as pafs

    from storage.formats.iceberg.read import SliceReader
    from storage.spec.models import DataFile as SpecDataFile
    from storage.spec.models import FileSlice, PartitionDescriptor

    def fid(name, kind, field_id, nullable=True):
        return pa.field(name, kind, nullable, {b"PARQUET:field_id": str(field_id).encode()})

    schema = pa.schema(
        [
            fid("t", pa.time64("us"), 1),
            fid("u", pa.uuid(), 2),
            fid("f", pa.binary(3), 3),
            fid("tz", pa.timestamp("us", tz="UTC"), 4),
            fid("s", pa.struct([fid("d", pa.decimal128(9, 2), 6)]), 5),
            fid("m", pa.map_(fid("key", pa.large_string(), 8, False), fid("value", pa.int32(), 9)), 7),
            fid("l", pa.list_(fid("element", pa.float64(), 11)), 10),
            fid("x", pa.float64(), 12),
        ]
    )
    content = pa.table(
        {
            "t": [dt.time(1, 2, 3, 4), None],
            "u": [uuid.UUID(int=5).bytes, uuid.UUID(int=6).bytes],
            "f": [b"abc", b"xyz"],
            "tz": [dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.UTC), None],
            "s": [{"d": Decimal("1.25")}, {"d": None}],
            "m": [[("k", 1)], []],
            "l": [[1.5, 2.5], None],
            "x": [float("nan"), 2.0],
        },
        schema=schema,
    )
    path = str(tmp_path / "all.orc")
    out = OrcOutputFile(pafs.LocalFileSystem(), path, schema, "zstd")
    out.write_table(content)
    out.close()
    from pyiceberg.io.pyarrow import PyArrowFileIO

    reader = SliceReader(PyArrowFileIO(), schema, None, None)
    data_file = SpecDataFile(path=path, size_bytes=os.path.getsize(path), record_count=2, file_format="orc")
    read = pa.Table.from_batches(reader.read(FileSlice(PartitionDescriptor(""), data_file, ())))
    assert read.drop(["x"]).to_pylist() == content.drop(["x"]).to_pylist()
    assert [str(x) for x in read["x"].to_pylist()] == ["nan", "2.0"]
    # Iceberg's ORC attributes, map keys and values included (the ORC library reads them)
    jvm = spark._jvm
    types = jvm.org.apache.orc.OrcFile.createReader(
        jvm.org.apache.hadoop.fs.Path(path),
        jvm.org.apache.orc.OrcFile.readerOptions(jvm.org.apache.hadoop.conf.Configuration()),
    ).getSchema()

    def attributes(name):
        child = types.findSubtype(name)
        return {a: child.getAttributeValue(a) for a in child.getAttributeNames()}

    assert attributes("t") == {"iceberg.id": "1", "iceberg.required": "false", "iceberg.long-type": "TIME"}
    assert attributes("u")["iceberg.binary-type"] == "UUID"
    assert attributes("f") == {
        "iceberg.id": "3",
        "iceberg.required": "false",
        "iceberg.binary-type": "FIXED",
        "iceberg.length": "3",
    }
    assert types.findSubtype("tz").getCategory().getName() == "timestamp with local time zone"
    assert attributes("s.d")["iceberg.id"] == "6"
    assert attributes("m._key") == {"iceberg.id": "8", "iceberg.required": "true"}
    assert attributes("m._value")["iceberg.id"] == "9"
    assert attributes("l._elem")["iceberg.id"] == "11"
    # counts and bounds by field id, NaN counted apart, lists and maps left out
    columns = pickle.loads(out.metrics.dumps())["columns"]
    assert columns[1] == [2, 1, None, dt.time(1, 2, 3, 4), dt.time(1, 2, 3, 4)]
    assert columns[6] == [2, 1, None, Decimal("1.25"), Decimal("1.25")]
    assert columns[12] == [2, 0, 1, 2.0, 2.0]
    assert set(columns) == {1, 2, 3, 4, 6, 12}
    for kind in (pa.timestamp("ns"), pa.null()):
        with pytest.raises(InputError, match="has no Iceberg ORC mapping"):
            orc_schema(pa.schema([fid("x", kind, 1)]))


# --- delete files ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("properties", "written"), [(None, FileFormat.PARQUET), (ORC_DEFAULT, FileFormat.ORC)]
)
def test_orc_position_deletes_are_compacted_into_the_tables_delete_format(
    make_iceberg, run_now, properties, written
):
    console_table, table = make_iceberg(files=2, rows_per_file=5, properties=properties)
    orc_paths = append_orc(table, [rows(10, 5), rows(15, 5)])
    parquet_path = next(p for p in data_files(table) if p.endswith(".parquet"))
    commit_row_delta(table, [orc_position_deletes(table, {orc_paths[0]: [0]})])
    commit_row_delta(table, [orc_position_deletes(table, {orc_paths[1]: [1], parquet_path: [2]})])
    commit_row_delta(table, [orc_position_deletes(table, {orc_paths[0]: [3]})])
    before = ours(table)
    assert before == expected(range(20), {10, 16, 13, parquet_ids(parquet_path, 2)})

    process = run_now(console_table, "rewrite-position-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["removed_position_delete_files"] == 3 and summary["added_delete_files"] == 1
    assert summary["entries_in"] == summary["entries_out"] == 4
    [(new, _)] = live_deletes(table)
    assert new.file_format == written and new.record_count == 4
    assert new.file_path.endswith(f".{written.value.lower()}")
    assert ours(table) == before


def parquet_ids(path: str, position: int) -> int:
    import pyarrow.parquet as pq

    return pq.read_table(local_path(path), columns=["id"])["id"][position].as_py()


def test_an_orc_position_delete_file_naming_no_live_file_is_found_by_reading_it(mixed_table, run_now):
    console_table, table = mixed_table()
    stray = orc_position_deletes(table, {f"{table.location()}/data/gone.orc": [0, 1]}, bounds=False)
    commit_row_delta(table, [stray])
    before = ours(table)

    process = run_now(console_table, "remove-dangling-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["removed_files"] == [stray.file_path]
    assert process.summary["delete_files_read"] == 2  # both ORC files span several data files
    assert [f.file_format for f, _ in live_deletes(table)] == [FileFormat.ORC]
    assert ours(table) == before == expected(range(30), MIXED_DELETED)


def test_orc_equality_deletes_become_orc_position_deletes_on_an_orc_table(make_iceberg, run_now):
    console_table, table = make_iceberg(files=0, properties=ORC_DEFAULT)
    append_orc(table, [rows(5 * i, 5) for i in range(4)])
    commit_row_delta(table, [orc_equality_deletes(table, [1, 7, 12, 99])])
    before = ours(table)
    assert before == expected(range(20), {1, 7, 12})

    process = run_now(console_table, "convert-equality-deletes")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    summary = process.summary
    assert summary["removed_equality_delete_files"] == 1 and summary["positions_written"] == 3
    [(new, _)] = live_deletes(table)
    assert new.content == DataFileContent.POSITION_DELETES and new.file_format == FileFormat.ORC
    assert new.file_path.endswith("-compacted.orc") and new.record_count == 3
    named = orc.read_table(local_path(new.file_path))
    assert sorted(named["pos"].to_pylist()) == [1, 2, 2]  # id 1 of file 0, 7 of file 1, 12 of file 2
    assert named.schema.field("pos").metadata == {
        b"iceberg.id": b"2147483545",
        b"iceberg.required": b"true",
        b"iceberg.long-type": b"LONG",
    }
    assert ours(table) == before


# --- orphans and statistics ------------------------------------------------------------------------


def test_orphan_cleanup_deletes_an_unreferenced_orc_file_and_keeps_the_live_ones(
    mixed_table, run_now, old_mtime
):
    console_table, table = mixed_table()
    root = Path(local_path(table.location()))
    orphan = root / "data" / "never-committed.orc"
    orphan.write_bytes(b"ORC not really")
    for folder, _, names in os.walk(root):
        for name in names:
            old_mtime(Path(folder, name), 10)
    live_orc = {local_path(p) for p in data_files(table) if p.endswith(".orc")}
    live_orc |= {local_path(f.file_path) for f, _ in live_deletes(table)}
    before = ours(table)

    process = run_now(console_table, "clean-orphan-files")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["deleted_files"] == 1 and not orphan.exists()
    assert len(live_orc) == 4 and all(Path(p).exists() for p in live_orc)
    assert ours(table) == before


def test_statistics_count_the_distinct_values_of_orc_data_files_after_their_deletes(mixed_table, run_now):
    console_table, table = mixed_table()

    process = run_now(console_table, "compute-statistics", {"engine": "local", "columns": ["id", "region"]})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["rows_read"] == 27
    assert process.summary["ndv"] == {"id": 27, "region": 2}
    table.refresh()
    [stats] = table.metadata.statistics
    assert [b.properties["ndv"] for b in stats.blob_metadata] == ["27", "2"]


# --- object store --------------------------------------------------------------------------------


def test_on_an_object_store_orc_files_are_compacted_into_orc_in_place(make_rest_iceberg, seaweedfs, run_now):
    """A REST-catalog table on S3 whose default format is ORC: the new ORC file is written in
    place under the attempt's unique name, beside its inputs, and committed."""
    from tests.objectstore.test_iceberg_maintenance_s3 import objects

    console_table, table = make_rest_iceberg(files=0)
    with table.transaction() as tx:
        tx.set_properties(**ORC_DEFAULT)
    append_orc(table, [rows(5 * i, 5) for i in range(5)])
    commit_row_delta(table, [orc_position_deletes(table, {next(iter(data_files(table))): [0, 4]})])
    before = ours(table)
    assert sum(before.values()) == 23

    process = run_now(console_table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 5 and process.summary["files_out"] == 1
    [(path, data_file)] = data_files(table).items()
    assert data_file.file_format == FileFormat.ORC and data_file.record_count == 23
    name = path.rsplit("/", 1)[1]
    assert name.startswith(f"lakewarden-p{process.pk}-") and name.endswith("-g00000-part-00000.orc")
    assert objects(seaweedfs, table.location())[path] == data_file.file_size_in_bytes
    assert ours(table) == before
