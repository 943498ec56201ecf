"""One conformance suite for every result storage: the same assertions over filesystem, iceberg and
postgres, each built through the registry the way the console builds it.

Rows read back are compared with the frame that was written; filtered reads with pyarrow's own
filtering of that frame (``to_arrow``). "Really reclaims" is checked on the storage itself: the
folder on disk, the catalog and the table's files, ``information_schema``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import types as T

from storage.results.plugin import IntermediateResultStorage, StorageDescriptor
from storage.results.registry import build_storage
from storage.spec.expressions import parse_filter, to_arrow

UTC = dt.UTC

SCHEMA = T.StructType(
    [
        T.StructField("id", T.LongType()),
        T.StructField("amount", T.DoubleType()),
        T.StructField("price", T.DecimalType(10, 2)),
        T.StructField("note", T.StringType()),
        T.StructField("flag", T.BooleanType()),
        T.StructField("day", T.DateType()),
        T.StructField("ts", T.TimestampType()),
        T.StructField(
            "info", T.StructType([T.StructField("a", T.IntegerType()), T.StructField("tag", T.StringType())])
        ),
    ]
)


def _source_rows(ids: range, tag: str = "x") -> list[tuple]:
    rows = []
    for i in ids:
        note = None if i % 4 == 0 else ("o'neil" if i == 7 else f"n{i}")
        rows.append(
            (
                i,
                i * 1.25,
                decimal.Decimal(i) / 4 + decimal.Decimal("0.01"),
                note,
                i % 3 == 0,
                dt.date(2024, 1, 1) + dt.timedelta(days=i),
                dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=7 * i),
                None if i == 5 else (i % 5, f"{tag}{i % 2}"),
            )
        )
    return rows


def _frame(spark, ids: range = range(40), tag: str = "x"):
    # Four files holding disjoint id ranges, so a filter on id can prune files.
    return spark.createDataFrame(_source_rows(ids, tag), SCHEMA).repartitionByRange(4, "id")


def _rows(frame) -> list[dict]:
    return sorted((row.asDict(recursive=True) for row in frame.collect()), key=lambda r: r["id"])


# -- the backends ----------------------------------------------------------------------------------


@dataclass
class Backend:
    """A configured storage plus how to look behind it: ``physical(props)`` notes where the data
    lives, ``gone(noted)`` says whether all of it has been removed, ``files(props, expr)`` lists
    the files a read with ``expr`` opens (None for a backend without files)."""

    name: str
    storage: IntermediateResultStorage
    physical: Callable[[dict], Any]
    gone: Callable[[Any], bool]
    files: Callable[[dict, Any], list[str]] | None
    located: Callable[[dict], bool]


def _filesystem(tmp_path_factory, throwaway_database) -> Backend:
    root = tmp_path_factory.mktemp("result-cache")
    storage = build_storage(StorageDescriptor().with_type("filesystem").with_config("root", str(root)))
    return Backend(
        name="filesystem",
        storage=storage,
        physical=lambda props: Path(props["path"]),
        gone=lambda path: not path.exists() and not list(path.parent.glob(f".{path.name}*")),
        files=lambda props, expr: storage.data_files(props, expr),
        located=lambda props: Path(props["path"]).is_dir(),
    )


def _iceberg(tmp_path_factory, throwaway_database) -> Backend:
    dsn = throwaway_database("catalog")
    warehouse = tmp_path_factory.mktemp("iceberg-cache")
    storage = build_storage(
        StorageDescriptor()
        .with_type("iceberg")
        .with_config("type", "sql")
        .with_config("uri", dsn.replace("postgresql://", "postgresql+psycopg2://"))
        .with_config("warehouse", warehouse.as_uri())
        .with_config("namespace", "scratch")
    )

    def physical(props: dict) -> tuple[str, str, list[str]]:
        table = storage.catalog().load_table(props["identifier"])
        data_files = [f.path for f in storage.spec_table(props).file_index().list_files_at()]
        return props["identifier"], table.location(), data_files

    def gone(noted: tuple[str, str, list[str]]) -> bool:
        identifier, location, data_files = noted
        folder = Path(location.removeprefix("file://"))
        on_disk = [p for p in data_files if Path(p.removeprefix("file://")).exists()]
        return not storage.catalog().table_exists(identifier) and not folder.exists() and not on_disk

    def files(props: dict, expr: Any) -> list[str]:
        return [f.path for f in storage.spec_table(props).file_index().list_files_at(None, expr)]

    def located(props: dict) -> bool:
        namespace = props["identifier"].rpartition(".")[0]
        return (namespace,) in storage.catalog().list_namespaces()

    return Backend("iceberg", storage, physical, gone, files, located)


def _postgres(tmp_path_factory, throwaway_database) -> Backend:
    dsn = throwaway_database("rows")
    storage = build_storage(
        StorageDescriptor().with_type("postgres").with_config("dsn", dsn).with_config("schema", "scratch")
    )

    def physical(props: dict) -> tuple[str, str]:
        schema, _, table = props["table"].partition(".")
        return schema, table

    def gone(noted: tuple[str, str]) -> bool:
        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                list(noted),
            ).fetchone()[0]
        return found == 0

    def located(props: dict) -> bool:
        with psycopg.connect(dsn) as conn:
            return bool(
                conn.execute(
                    "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                    [props["table"].partition(".")[0]],
                ).fetchone()[0]
            )

    return Backend("postgres", storage, physical, gone, None, located)


BUILDERS = {"filesystem": _filesystem, "iceberg": _iceberg, "postgres": _postgres}


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def backend(request, tmp_path_factory, throwaway_database) -> Backend:
    built = BUILDERS[request.param](tmp_path_factory, throwaway_database)
    yield built
    close = getattr(built.storage, "close", None)
    if close is not None:
        close()


@pytest.fixture(scope="module")
def source(spark):
    return _frame(spark)


@pytest.fixture(scope="module")
def stored(backend, source):
    """The source frame written once per backend: (properties, write stats)."""
    properties = backend.storage.create("conformance", {})
    stats = backend.storage.write(source, properties)
    return properties, stats


def _name() -> str:
    return f"result_{uuid.uuid4().hex[:10]}"


# -- create ------------------------------------------------------------------------------------------


def test_create_returns_properties_that_locate_the_result_and_prepares_the_location(backend):
    name = _name()
    properties = backend.storage.create(name, {"owner": "tests"})
    assert properties["owner"] == "tests"
    assert any(name in str(value) for key, value in properties.items() if key != "owner")
    assert backend.located(properties)
    assert not backend.storage.exists(properties)


def test_create_refuses_a_name_that_escapes_the_location(backend):
    with pytest.raises(ValueError):
        backend.storage.create("../outside", {})


# -- write and read ----------------------------------------------------------------------------------


def test_write_then_read_returns_the_rows_that_were_written(backend, stored, source, spark):
    properties, _ = stored
    assert _rows(backend.storage.read(spark, properties)) == _rows(source)


def test_write_reports_the_rows_and_a_size(stored, source):
    _, stats = stored
    assert stats.rows == source.count()
    assert stats.size_bytes > 0


def test_read_keeps_the_written_column_types(backend, stored, spark):
    properties, _ = stored
    assert backend.storage.read(spark, properties).schema.simpleString() == SCHEMA.simpleString()


def test_projection_returns_only_the_asked_columns_in_the_asked_order(backend, stored, source, spark):
    properties, _ = stored
    frame = backend.storage.read(spark, properties, columns=["note", "id"])
    assert frame.columns == ["note", "id"]
    assert sorted(map(tuple, frame.collect()), key=lambda r: r[1]) == sorted(
        map(tuple, source.select("note", "id").collect()), key=lambda r: r[1]
    )


def test_projection_of_an_unknown_column_is_refused(backend, stored, spark):
    properties, _ = stored
    with pytest.raises(Exception, match="nope"):
        backend.storage.read(spark, properties, columns=["id", "nope"]).collect()


FILTERS = [
    "id < 10",
    "id >= 12 and id < 20",
    "not (id = 3)",
    "price >= 5.00 and note is not null",
    "note is null or flag = true",
    "note in ('n1', 'n2', 'o''neil')",
    "note not in ('n1', 'n2')",
    "note starts with 'n1'",
    "note = 'o''neil'",
    "note > 'n3'",
    "amount > 30.0",
    "day < date '2024-01-10'",
    "ts >= timestamp '2024-01-05 00:00:00+00:00'",
    "info.a = 2",
    "info.tag = 'x1' or info.a is null",
]


@pytest.mark.parametrize("text", FILTERS)
def test_a_filter_returns_exactly_the_rows_pyarrow_selects(backend, stored, source, spark, text):
    properties, _ = stored
    arrow = source.toArrow()
    expr = parse_filter(text, arrow.schema)
    expected = sorted(arrow.filter(to_arrow(expr)).column("id").to_pylist())
    frame = backend.storage.read(spark, properties, columns=["id"], filters=expr)
    assert sorted(r.id for r in frame.collect()) == expected
    assert frame.columns == ["id"]


def test_a_filter_that_can_prune_opens_fewer_files(backend, stored, source):
    if backend.files is None:
        pytest.skip(f"{backend.name} stores rows in a table, not files: the filter runs in the database")
    properties, _ = stored
    expr = parse_filter("id < 5", source.toArrow().schema)
    everything = backend.files(properties, None)
    pruned = backend.files(properties, expr)
    assert len(everything) == 4
    assert 0 < len(pruned) < len(everything)
    assert set(pruned) <= set(everything)


def test_a_filter_no_row_matches_returns_an_empty_frame_with_the_schema(backend, stored, spark, source):
    properties, _ = stored
    expr = parse_filter("id > 1000", source.toArrow().schema)
    frame = backend.storage.read(spark, properties, filters=expr)
    assert frame.collect() == []
    assert frame.schema.simpleString() == SCHEMA.simpleString()


def test_an_empty_frame_round_trips(backend, spark):
    properties = backend.storage.create(_name(), {})
    stats = backend.storage.write(spark.createDataFrame([], SCHEMA), properties)
    assert stats.rows == 0
    frame = backend.storage.read(spark, properties)
    assert frame.collect() == []
    assert frame.schema.simpleString() == SCHEMA.simpleString()


def test_writing_again_replaces_the_stored_rows(backend, spark):
    properties = backend.storage.create(_name(), {})
    backend.storage.write(_frame(spark, range(0, 10)), properties)
    second = _frame(spark, range(100, 105), tag="y")
    backend.storage.write(second, properties)
    assert _rows(backend.storage.read(spark, properties)) == _rows(second)


def test_two_names_do_not_collide(backend, spark):
    a, b = _name(), _name()
    props_a = backend.storage.create(a, {})
    props_b = backend.storage.create(b, {})
    frame_a, frame_b = _frame(spark, range(0, 8)), _frame(spark, range(50, 53), tag="b")
    backend.storage.write(frame_a, props_a)
    backend.storage.write(frame_b, props_b)
    assert _rows(backend.storage.read(spark, props_a)) == _rows(frame_a)
    assert _rows(backend.storage.read(spark, props_b)) == _rows(frame_b)

    backend.storage.clean([a], {a: props_a})
    assert not backend.storage.exists(props_a)
    assert _rows(backend.storage.read(spark, props_b)) == _rows(frame_b)
    backend.storage.clean([b], {b: props_b})


# -- exists and clean --------------------------------------------------------------------------------


def test_exists_after_write_and_not_after_clean_and_clean_really_reclaims(backend, spark):
    name = _name()
    properties = backend.storage.create(name, {})
    backend.storage.write(_frame(spark, range(0, 20)), properties)
    assert backend.storage.exists(properties)
    noted = backend.physical(properties)
    assert not backend.gone(noted)

    backend.storage.clean([name], {name: properties})

    assert not backend.storage.exists(properties)
    assert backend.gone(noted)


def test_cleaning_twice_or_before_any_write_is_fine(backend, spark):
    written, unwritten = _name(), _name()
    props = {written: backend.storage.create(written, {}), unwritten: backend.storage.create(unwritten, {})}
    backend.storage.write(_frame(spark, range(0, 3)), props[written])
    backend.storage.clean([written, unwritten], props)
    backend.storage.clean([written, unwritten], props)
    assert not backend.storage.exists(props[written])
    assert not backend.storage.exists(props[unwritten])


def test_a_result_whose_data_was_removed_behind_its_back_does_not_exist(backend, spark):
    properties = backend.storage.create(_name(), {})
    backend.storage.write(_frame(spark, range(0, 12)), properties)
    if backend.files is not None:
        victim = backend.files(properties, None)[0]
        os.remove(victim.removeprefix("file://"))
    else:
        with psycopg.connect(backend.storage.dsn) as conn:
            schema, _, table = properties["table"].partition(".")
            conn.execute(psycopg.sql.SQL("DROP TABLE {}").format(psycopg.sql.Identifier(schema, table)))
    assert not backend.storage.exists(properties)


def test_a_write_that_fails_leaves_the_previous_rows_or_nothing_never_half(backend, spark):
    properties = backend.storage.create(_name(), {})
    previous = _frame(spark, range(0, 6))
    backend.storage.write(previous, properties)
    noted = backend.physical(properties)
    # fails in the Spark job for the last rows, after other partitions may have been written
    failing = _frame(spark, range(0, 40)).selectExpr("*", "if(id = 39, raise_error('boom'), id) as boom")
    with pytest.raises(Exception, match="boom"):
        backend.storage.write(failing, properties)
    if backend.storage.exists(properties):
        assert _rows(backend.storage.read(spark, properties)) == _rows(previous)
    else:
        # a backend may drop the old result before rewriting it: a cache recomputes it anyway
        assert backend.gone(noted)
