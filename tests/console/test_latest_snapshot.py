"""One meaning of "latest" for Iceberg tables: the current snapshot (``current-snapshot-id``), as in
the Java reference. A table without one (legacy v1 metadata without ``current-snapshot-id``, or
``-1`` while snapshots exist) reads empty on every surface, and its snapshots stay in the timeline
with time travel to each working; a table rolled back to an older snapshot reads that snapshot,
not the newest one.

Each kind of table holds the same two snapshots: the first adds ids 1 and 2 in ``region=eu``, the
second id 3 in ``region=us`` (identity partitioned by region). Surfaces checked: the table row (its
counts and metrics), the overview, the Snapshots, Files, Partitions, Splits, Changes and Records
tabs, the REST API, spec reads, splits, the record index, and the Spark data source.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from storage import services
from storage.spec import load_table
from tests.spec.test_iceberg_legacy import _legacy_table

pytestmark = pytest.mark.django_db

ROWS = {0: [(1, "eu"), (2, "eu")], 1: [(1, "eu"), (2, "eu"), (3, "us")]}  # by snapshot position


@dataclass(frozen=True)
class Kind:
    """A table whose two snapshots are ``ids`` (oldest first) and whose current snapshot is the
    one at ``current`` (None: no current snapshot)."""

    location: str
    ids: list[int]
    current: int | None


def _pyiceberg_table(root: Path, sql_catalog: Any) -> tuple[Path, list[int], Path]:
    """Two appends by pyiceberg (a SQL catalog of the ``sql_catalog`` fixture, on Postgres):
    (table folder, snapshot ids, latest metadata file)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    root.mkdir(parents=True)
    catalog = sql_catalog("writer", root.as_uri())
    catalog.create_namespace("lake")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
    )
    table = catalog.create_table("lake.orders", schema=schema, partition_spec=spec)
    for ids, region in (([1, 2], "eu"), ([3], "us")):
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "region": [region] * len(ids)}))
    return (
        Path(table.location().removeprefix("file://")),
        [s.snapshot_id for s in table.snapshots()],
        Path(table.metadata_location.removeprefix("file://")),
    )


def _edited(metadata_file: Path, current: int | None) -> None:
    """A next metadata version whose current snapshot is ``current`` (-1 and no refs: none)."""
    document = json.loads(metadata_file.read_text())
    document["current-snapshot-id"] = -1 if current is None else current
    document["refs"] = {} if current is None else {"main": {"snapshot-id": current, "type": "branch"}}
    version = int(metadata_file.name.split("-", 1)[0]) + 1
    (metadata_file.parent / f"{version:05d}-{uuid.uuid4()}.metadata.json").write_text(json.dumps(document))


def _build(name: str, warehouse: Path, sql_catalog: Any) -> Kind:
    if name == "legacy-v1-without-current":
        metadata, ids = _legacy_table(warehouse, inline=False)
        return Kind(str(Path(metadata).parent.parent), ids, None)
    folder, ids, metadata = _pyiceberg_table(warehouse / name, sql_catalog)
    current = None if name == "current-minus-one" else ids[0]
    _edited(metadata, current)
    return Kind(str(folder), ids, current)


KINDS = ["legacy-v1-without-current", "current-minus-one", "rolled-back"]


@pytest.fixture(params=KINDS)
def kind(request, warehouse, sql_catalog) -> Kind:
    return _build(request.param, warehouse, sql_catalog)


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(tuple(r.values()) for r in table.to_pylist())


def _file_names(html: str) -> set[str]:
    return set(re.findall(r"[\w-]+\.parquet", html))


def _expected(kind: Kind) -> dict:
    """What "latest" shows: the current snapshot's files, rows and partitions, or nothing."""
    if kind.current is None:
        return {"rows": [], "files": 0, "partitions": set(), "records": 0, "instant": None}
    position = kind.ids.index(kind.current)
    return {
        "rows": ROWS[position],
        "files": position + 1,
        "partitions": {"region=eu", "region=us"} if position else {"region=eu"},
        "records": len(ROWS[position]),
        "instant": str(kind.current),
    }


def test_the_spec_api_reads_the_current_snapshot_and_travels_to_every_other(kind):
    table = load_table(kind.location)
    expected = _expected(kind)
    assert [i.id for i in table.timeline().instants()] == kind.ids
    latest = table.timeline().latest()
    assert (str(latest.id) if latest else None) == expected["instant"]
    assert table.summary().current_instant_id == kind.current
    assert (table.summary().file_count, table.summary().record_count) == (
        expected["files"],
        expected["records"],
    )
    assert _rows(table.read_arrow()) == expected["rows"]
    assert len(list(table.file_index().list_files_at())) == expected["files"]
    assert sum(s.estimated_rows for s in table.plan_splits()) == expected["records"]
    assert {p.partition.path for p in table.file_index().partitions_at()} == expected["partitions"]
    found = table.record_index("id").tag([3, 1])
    assert [r.found for r in found] == [expected["instant"] == str(kind.ids[1]), bool(expected["rows"])]
    for position, snapshot in enumerate(kind.ids):  # time travel to every snapshot
        assert _rows(table.read_arrow(snapshot)) == ROWS[position]
        assert len(list(table.file_index().list_files_at(snapshot))) == position + 1
        assert [r.found for r in table.record_index("id").tag([3], snapshot)] == [position == 1]
    added = list(table.file_index().list_files_between(kind.ids[0], kind.ids[1]))
    assert [c.file_slice.partition.path for c in added] == ["region=us"]


def test_the_table_row_and_every_console_surface_agree(kind, client_as, api_as, viewer):
    expected = _expected(kind)
    row = services.table_register(location=kind.location)
    assert (row.current_instant or None) == expected["instant"]
    assert (row.file_count, row.record_count, row.instant_count) == (
        expected["files"],
        expected["records"],
        2,
    )
    assert (row.total_bytes > 0) == bool(expected["files"])
    assert row.small_file_count == expected["files"]  # every file here is small
    assert {p["path"] for p in row.metrics["partitions"]} == expected["partitions"]
    assert sum(row.metrics["size_histogram"]) == expected["files"]
    assert len(row.metrics["timeline"]) == 2  # the timeline still draws both snapshots
    refreshed = services.table_refresh(table=row)
    assert (refreshed.current_instant, refreshed.file_count) == (row.current_instant, row.file_count)

    api = api_as(viewer)

    def get(path: str, **params) -> dict:
        response = api.get(f"/api/v1/tables/{row.pk}/{path}", params)
        assert response.status_code == 200, (path, response.content[-500:])
        return response.json()

    def instant_of(answer: dict | None) -> str | None:
        return str(answer["id"]) if answer else None

    assert get("")["current_instant"] == (expected["instant"] or "")
    assert [str(s["id"]) for s in get("snapshots/")] == [str(i) for i in reversed(kind.ids)]
    files = get("files/", page_size=100)
    assert instant_of(files["instant"]) == expected["instant"] and len(files["files"]) == expected["files"]
    splits = get("splits/")
    assert instant_of(splits["instant"]) == expected["instant"]
    assert splits["summary"]["parts"] == expected["files"]
    partitions = get("partitions/")
    assert {p["path"] for p in partitions["partitions"]} == expected["partitions"]
    changes = get("changes/")
    assert instant_of(changes["to"]) == expected["instant"]
    assert len(changes["files"]) == (1 if expected["instant"] else 0)
    records = get("records/", key=["1", "3"], column="id")
    assert [r["found"] for r in records["records"]] == [bool(expected["rows"]), expected["files"] == 2]
    newest = str(kind.ids[1])  # time travel through the API
    assert len(get("files/", at=newest)["files"]) == 2
    assert {p["path"] for p in get("partitions/", at=newest)["partitions"]} == {"region=eu", "region=us"}
    assert instant_of(get("changes/", to=newest)["to"]) == newest
    assert [r["found"] for r in get("records/", key="3", column="id", at=newest)["records"]] == [True]

    client = client_as(viewer)

    def page(path: str, **params) -> str:
        response = client.get(f"/tables/{row.pk}/{path}", params)
        assert response.status_code == 200, (path, response.content.decode()[-1000:])
        return response.content.decode()

    none_note = "has no current snapshot"
    overview = page("")
    assert f"<code>{expected['instant'] or 'none'}</code>" in overview
    snapshots = page("snapshots/")
    assert all(str(i) in snapshots for i in kind.ids)
    assert snapshots.count('class="badge">current</span>') == (1 if expected["instant"] else 0)
    for tab in ("files/", "partitions/", "splits/"):
        html = page(tab)
        assert (none_note in html) == (expected["instant"] is None), tab
        if tab == "partitions/":
            assert set(re.findall(r"<code>(region=\w+)</code>", html)) == expected["partitions"]
            assert len(set(re.findall(r"<code>(region=\w+)</code>", page(tab, at=newest)))) == 2
        else:
            assert len(_file_names(html)) == expected["files"], tab
            assert len(_file_names(page(tab, at=newest))) == 2, tab
    changes = page("changes/")
    assert (none_note in changes) == (expected["instant"] is None)
    assert ("region=eu" in changes) == (expected["instant"] is not None)  # the current snapshot's own
    assert "region=us" in page("changes/", to=newest)
    lookup = page("records/", keys="3", column="id")
    assert (none_note in lookup) == (expected["instant"] is None)
    assert ".parquet" in page("records/", keys="3", column="id", at=newest)


@pytest.mark.spark
def test_the_spark_data_source_reads_the_current_snapshot(kind, spark):
    from storage.spec.spark_source import read_table

    expected = _expected(kind)
    assert sorted(tuple(r) for r in read_table(spark, kind.location).collect()) == expected["rows"]
    newest = read_table(spark, kind.location, instant=kind.ids[1], filters="id >= 2")
    assert sorted(tuple(r) for r in newest.collect()) == [(2, "eu"), (3, "us")]
