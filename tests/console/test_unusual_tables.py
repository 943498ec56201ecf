"""The console shows the tables other engines write (issue 13) without errors: Iceberg v3 with
deletion vectors and v3 types, legacy v1 metadata, column defaults, nullable-union manifests,
identity partitions filled from metadata; Delta type widening and variants.

Each table is built by the spec tests' own writers, registered by location, and every tab of its
page and every read of the REST API is fetched: each answers 200 with a value of that table (a
column, a snapshot id, a file, a partition value, a record's file), or, where a column cannot be
read by design (a shredded variant), browsing still works and only the read refuses, cleanly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from storage import services
from tests.spec.iceberg_v3_tables import SNAPSHOT_ID, write_v3_table
from tests.spec.test_delta_variant import shredded_table, variant_table
from tests.spec.test_delta_widening import widened_table
from tests.spec.test_iceberg_defaults import defaults_table, v3_types_table
from tests.spec.test_iceberg_identity_partitions import _identity_table
from tests.spec.test_iceberg_legacy import _legacy_table
from tests.spec.test_iceberg_union_manifests import _union_table

pytestmark = pytest.mark.django_db


def _identity(root: Path, sql_catalog: Callable[..., Any]) -> str:
    from pyiceberg.types import IntegerType

    catalog = sql_catalog("identity", f"file://{root}")
    catalog.create_namespace("ident")
    return _identity_table(catalog, "by_int", IntegerType(), (7, -3)).metadata_location


@dataclass(frozen=True)
class Kind:
    """A table kind: how to build it under a folder, and values its pages must show."""

    build: Callable[[Path, Callable[..., Any]], str]  # (folder, the sql_catalog fixture) -> location
    format: str
    column: str  # a column of the schema
    instants: list[str]  # the timeline's ids, newest first
    files: int  # data files at ``at``
    key: tuple[str, str]  # (column, value) of a record the lookup finds
    at: str | None = None  # the instant to list at (default: the latest)
    partitions: set[str] = field(default_factory=set)  # partition values at ``at``
    missing_key: str | None = None  # a key the lookup must not find (deleted, say)
    unreadable: str | None = None  # a column the reader refuses by design
    instant_count: int = 1
    no_current: bool = False  # no current snapshot: "latest" reads empty (the Java reference)


KINDS = {
    "iceberg-v3-deletion-vectors": Kind(
        lambda root, _: str(write_v3_table(root / "v3dv").location),
        "iceberg",
        "name",
        [str(SNAPSHOT_ID)],
        3,
        ("id", "2"),
        missing_key="1",  # position 1 of the first file is in its deletion vector
    ),
    "iceberg-v3-types": Kind(
        lambda root, _: v3_types_table(root / "v3types"), "iceberg", "tsn", ["1"], 1, ("id", "2")
    ),
    "iceberg-v3-shredded-variant": Kind(
        lambda root, _: v3_types_table(root / "shredded", shredded=True),
        "iceberg",
        "v",
        ["1"],
        1,
        ("id", "1"),
        unreadable="v",
    ),
    "iceberg-legacy-v1-inline-manifests": Kind(
        lambda root, _: _legacy_table(root / "inline", inline=True)[0],
        "iceberg",
        "region",
        ["202", "101"],
        2,
        ("id", "3"),
        at="202",
        partitions={"region=eu", "region=us"},
        instant_count=2,
        no_current=True,
    ),
    "iceberg-legacy-v1-manifest-list": Kind(
        lambda root, _: _legacy_table(root / "listed", inline=False)[0],
        "iceberg",
        "region",
        ["202", "101"],
        2,
        ("id", "3"),
        at="202",
        partitions={"region=eu", "region=us"},
        instant_count=2,
        no_current=True,
    ),
    "iceberg-column-defaults": Kind(
        lambda root, _: defaults_table(root / "defaults")[0],
        "iceberg",
        "tstz",
        ["2", "1"],
        2,
        ("id", "1"),
        instant_count=2,
    ),
    "iceberg-union-manifests": Kind(
        lambda root, _: _union_table(root / "union")[0],
        "iceberg",
        "region",
        ["7"],
        2,
        ("id", "4"),
        partitions={"region=eu", "region=us"},
    ),
    "iceberg-identity-from-metadata": Kind(
        _identity,
        "iceberg",
        "p",
        [],  # pyiceberg picks the snapshot ids
        3,
        ("id", "5"),
        partitions={"p=7", "p=-3", "p=null"},
        instant_count=3,
    ),
    "delta-type-widening": Kind(
        lambda root, _: str(widened_table.__wrapped__(root)),
        "delta",
        "dec",
        ["2", "1", "0"],
        3,
        ("id", "4"),
        partitions={"p=1", "p=5000000000"},
        instant_count=3,
    ),
    "delta-variant": Kind(
        lambda root, _: str(variant_table.__wrapped__(root)),
        "delta",
        "v",
        ["1", "0"],
        2,
        ("id", "3"),
        instant_count=2,
    ),
    "delta-shredded-variant": Kind(
        lambda root, _: str(shredded_table.__wrapped__(root)),
        "delta",
        "v",
        ["0"],
        1,
        ("id", "1"),
        unreadable="v",
    ),
}


@pytest.fixture(params=list(KINDS), ids=list(KINDS))
def registered(request, warehouse, sql_catalog):
    kind = KINDS[request.param]
    location = kind.build(warehouse, sql_catalog).removeprefix("file://")
    if location.endswith(".metadata.json"):  # a table is registered by its folder
        location = str(Path(location).parent.parent)
    table = services.table_register(location=location)
    return kind, table


def _instant_ids(api, table) -> list[str]:
    response = api.get(f"/api/v1/tables/{table.pk}/snapshots/")
    assert response.status_code == 200, response.content
    return [s["id"] for s in response.json()]


def test_every_tab_of_the_table_page_shows_the_table(client_as, api_as, viewer, registered):
    kind, table = registered
    client = client_as(viewer)
    at = {"at": kind.at} if kind.at else {}

    def page(path: str, **params) -> str:
        response = client.get(f"/tables/{table.pk}/{path}", params)
        assert response.status_code == 200, (path, response.content.decode()[-2000:])
        return response.content.decode()

    overview = page("")
    assert f"<code>{kind.column}</code>" in overview and "cannot be read" not in overview
    snapshots = page("snapshots/")
    instants = _instant_ids(api_as(viewer), table)
    assert instants and all(instant in snapshots for instant in instants)
    assert page("files/", **at).count(".parquet") >= kind.files
    page("files/")  # the latest snapshot (a legacy table has no current one): no error either
    partitions = page("partitions/", **at)
    assert all(f"<code>{path}</code>" in partitions for path in kind.partitions)
    assert ".parquet" in page("splits/", **at)
    assert (".parquet" in page("changes/")) != kind.no_current
    assert ".parquet" in page("changes/", **({"to": kind.at} if kind.at else {}))
    assert ".parquet" in page("records/", keys=kind.key[1], column=kind.key[0], **at)


def test_every_api_read_answers_with_the_tables_values(api_as, viewer, registered):
    kind, table = registered
    api = api_as(viewer)
    at = {"at": kind.at} if kind.at else {}

    def get(path: str, **params) -> dict:
        response = api.get(f"/api/v1/tables/{table.pk}/{path}", params)
        assert response.status_code == 200, (path, response.content.decode()[-2000:])
        return response.json()

    detail = get("")
    assert detail["format"] == kind.format and detail["instant_count"] == kind.instant_count
    instants = _instant_ids(api, table)
    assert len(instants) == kind.instant_count
    if kind.instants:
        assert instants == kind.instants
    files = get("files/", page_size=100, **at)
    assert len([f for f in files["files"] if f["path"].endswith(".parquet")]) == kind.files, files
    assert files["instant"]["id"] == (kind.at or instants[0])
    partitions = get("partitions/", **at)["partitions"]
    assert {p["path"] for p in partitions} == (kind.partitions or {""}), partitions
    assert sum(p["file_count"] for p in partitions) == kind.files
    splits = get("splits/", **at)
    assert splits["instant"]["id"] == (kind.at or instants[0]) and splits["summary"]["parts"] >= kind.files
    keys = [kind.key[1]] + ([kind.missing_key] if kind.missing_key else [])
    lookup = get("records/", key=keys, column=kind.key[0], **at)
    assert lookup["records"][0]["found"] and lookup["records"][0]["file_path"].endswith(".parquet"), lookup
    if kind.missing_key:
        assert not lookup["records"][1]["found"], lookup


def test_the_changes_of_the_latest_snapshot_name_its_files(api_as, viewer, registered):
    kind, table = registered
    changes = api_as(viewer).get(f"/api/v1/tables/{table.pk}/changes/").json()
    newest = _instant_ids(api_as(viewer), table)[0]
    if kind.no_current:  # no current snapshot: nothing changed up to it; the newest one's changes
        assert changes["to"] is None and changes["files"] == [], changes
        changes = api_as(viewer).get(f"/api/v1/tables/{table.pk}/changes/", {"to": newest}).json()
    assert changes["to"]["id"] == newest
    assert any(f["kind"] == "added" and f["file"]["path"].endswith(".parquet") for f in changes["files"]), (
        changes
    )


def test_a_column_the_reader_refuses_is_refused_cleanly(api_as, client_as, viewer, registered):
    kind, table = registered
    if kind.unreadable is None:
        pytest.skip("every column of this table reads")
    response = api_as(viewer).get(
        f"/api/v1/tables/{table.pk}/records/", {"key": "1", "column": kind.unreadable}
    )
    assert response.status_code in (400, 409), response.content
    assert kind.unreadable in response.json()["error"], response.json()
    page = client_as(viewer).get(
        f"/tables/{table.pk}/records/", {"keys": "1", "column": kind.unreadable}, HTTP_HX_REQUEST="true"
    )
    assert page.status_code in (400, 409) and kind.unreadable in page.content.decode()
