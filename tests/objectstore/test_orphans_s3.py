"""Orphan cleanup on the object store (SeaweedFS) lists the table location a page at a time (issue
35): its peak memory does not grow with the number of objects, and what it finds is exactly the
unreferenced objects of the table, odd key names included, nothing outside the table."""

from __future__ import annotations

import datetime as dt

import pytest

from processes.maintenance.iceberg import orphans as iceberg_orphans
from storage.models import Table
from tests.objectstore.test_delta_maintenance_s3 import objects, storage_options  # noqa: F401
from tests.objectstore.test_hostile_tables_s3 import make_table, s3_catalog  # noqa: F401
from tests.processes.conftest import delta_rows
from tests.processes.memory_probe import CAN_RESET_PEAK, orphan_name, probe
from tests.processes.test_trash import run  # noqa: F401

#: Odd but canonical key names: each must come back from the listing exactly as stored.
ODD_NAMES = (
    "a b.parquet",
    "ünïcødé-€.parquet",
    "per%cent%20twenty.parquet",
    "plus+sign.parquet",
    "tilde~[brackets]{braces}^|`.parquet",
    "deep/er/and deeper/x.parquet",
)


@pytest.mark.skipif(not CAN_RESET_PEAK, reason="needs Linux's clear_refs")
def test_the_listing_on_the_object_store_does_not_grow_with_the_number_of_objects(
    seaweedfs, s3_prefix, tmp_path
):
    env = {
        "LAKEWARDEN_S3_ENDPOINT": seaweedfs.endpoint,
        "LAKEWARDEN_S3_ACCESS_KEY_ID": seaweedfs.access_key,
        "LAKEWARDEN_S3_SECRET_ACCESS_KEY": seaweedfs.secret_key,
        "LAKEWARDEN_S3_REGION": "us-east-1",
    }
    found = {}
    for count in (10_000, 40_000):
        root = f"{s3_prefix}/n{count}/db/events"
        bucket_key = root.removeprefix("s3://lake/")
        made = seaweedfs.make_empty_objects(
            "lake", (orphan_name(bucket_key, i) for i in range(count)), mtime=0
        )
        assert made == count
        # every tenth object named for deletion, in path order (asserted by the probe)
        found[count] = probe(tmp_path, "orphans_s3", count, root=root, env=env)

    # 4x the objects (30,000 more): pyarrow's listing, one list of the whole location, grew by
    # about 1 KB per object (+28 MB here); a page of 1,000 keys at a time does not grow (the scan
    # as a whole grew by about 4.5 MB: more sorted runs to merge, each with its block).
    growth = found[40_000]["growth_mb"] - found[10_000]["growth_mb"]
    assert growth < 12, found


def put(seaweedfs, location: str, size: int = 3) -> None:
    with seaweedfs.filesystem().open_output_stream(location.removeprefix("s3://")) as out:
        out.write(b"z" * size)


@pytest.mark.django_db(transaction=True)
def test_orphans_on_the_object_store_are_exactly_the_tables_unreferenced_objects_odd_names_included(
    s3_catalog, run, seaweedfs, storage_options, monkeypatch
):
    from deltalake import write_deltalake

    console, table = make_table(s3_catalog)
    location = table.location()
    odd = sorted(f"{location}/data/{name}" for name in ODD_NAMES)
    for path in odd:
        put(seaweedfs, path)
    nested = f"{location}/nested"
    write_deltalake(nested, delta_rows(0, 3), storage_options=storage_options)
    Table.objects.create(location=nested, format="delta", name="nested")
    left_alone = [
        f"{location}/data/slash%2Fencoded.parquet",  # not canonical: never removed
        f"{location}/.lakewarden-staging/7/part.parquet",
        f"{location}/.lakewarden-trash/7/part.parquet",
        f"{location}2/data/sibling.parquet",  # beside the table, not in it
    ]
    for path in left_alone:
        put(seaweedfs, path)
    before = objects(seaweedfs, location.rsplit("/", 1)[0])
    monkeypatch.setattr(iceberg_orphans, "utcnow", lambda: dt.datetime.now(dt.UTC) + dt.timedelta(days=10))

    dry = run(console, "clean-orphan-files", {"min-age": 3600, "dry-run": True})

    assert dry.summary["orphan_files"] == len(odd) and dry.summary["orphan_bytes"] == 3 * len(odd)
    assert dry.summary["files"] == odd
    assert dry.summary["too_young_to_delete"] == 0 and "kept" not in dry.summary
    assert objects(seaweedfs, location.rsplit("/", 1)[0]) == before

    done = run(console, "clean-orphan-files", {"min-age": 3600})

    assert done.summary["files"] == odd
    assert done.summary["deleted_files"] == len(odd) and done.summary["delete_failures"] == 0
    after = objects(seaweedfs, location.rsplit("/", 1)[0])
    assert set(after) == set(before) - set(odd)
    assert set(left_alone) <= set(after)
    table.refresh()
    assert table.scan().to_arrow().num_rows == 10


def test_a_key_object_store_cannot_name_stops_the_listing_before_anything_is_deleted(
    seaweedfs, s3_prefix, s3_options
):
    import time

    from storage.io import StoreError
    from storage.io.guard import PathGuard

    root = f"{s3_prefix}/t"
    orphan, bad = f"{root}/data/orphan.parquet", f"{root}/data/new\nline.parquet"
    for path in (orphan, bad):
        put(seaweedfs, path)
    guard = PathGuard.build(root, roots=["s3://lake"])

    with pytest.raises(StoreError, match="the listing failed: .*new"):
        iceberg_orphans.scan_location(root, [], guard=guard, cutoff=time.time() + 60, storage=s3_options)

    assert set(objects(seaweedfs, root)) == {orphan, bad}


def test_progress_reports_objects_bytes_and_candidates_while_listing_pages(
    seaweedfs, s3_prefix, s3_options, monkeypatch
):
    import time

    from storage.io.guard import PathGuard

    monkeypatch.setattr(iceberg_orphans.ListingProgress, "EVERY", 2)
    root = f"{s3_prefix}/t"
    for i in range(6):
        put(seaweedfs, f"{root}/data/{i}.parquet", size=10)

    class Context:
        def __init__(self) -> None:
            self.reports: list[tuple[int, int, str]] = []

        def check_cancelled(self) -> None:
            pass

        def report_progress(self, done: int, total: int, message: str = "") -> None:
            self.reports.append((done, total, message))

    context = Context()
    guard = PathGuard.build(root, roots=["s3://lake"])
    referenced = [f"{root}/data/{i}.parquet" for i in range(4)]
    with iceberg_orphans.scan_location(
        root, referenced, guard=guard, cutoff=time.time() + 60, context=context, storage=s3_options
    ) as scan:
        assert [o.location for o in scan.orphans] == [f"{root}/data/4.parquet", f"{root}/data/5.parquet"]

    assert context.reports[:3] == [
        (2, 0, "listing: 2 objects seen, 20 bytes"),
        (4, 0, "listing: 4 objects seen, 40 bytes"),
        (6, 0, "listing: 6 objects seen, 60 bytes"),
    ]
    assert context.reports[-1] == (
        2,
        6,
        "comparing: 6 objects seen (60 bytes), 2 unreferenced (20 bytes), 2 old enough to remove",
    )


def test_empty_objects_made_in_bulk_are_exactly_the_keys_asked_for(seaweedfs, s3_prefix, s3_options):
    """``make_empty_objects`` (fs.meta.load): every key, the last included, empty, with the
    mtime asked for; nothing else under the bucket; and the store still serves afterwards."""
    from storage.io.objects import list_pages

    key = s3_prefix.removeprefix("s3://lake/")
    names = [f"{key}/part-{i:05d}.parquet" for i in range(2_500)]
    assert seaweedfs.make_empty_objects("lake", iter(names), mtime=1_700_000_000) == len(names)
    pages = list_pages(s3_prefix, s3_options)
    assert pages is not None
    listed = [entry for page in pages for entry in page]
    assert [location for location, _, _ in listed] == [f"s3://lake/{name}" for name in names]
    assert {size for _, size, _ in listed} == {0}
    assert {int(stamp) for _, _, stamp in listed} == {1_700_000_000}
    put(seaweedfs, f"lake/{key}/zz-after.bin")  # a PUT still answered: the filer did not panic
    again = list_pages(s3_prefix, s3_options)
    assert again is not None
    assert [location for page in again for location, _, _ in page][-2:] == [
        f"s3://lake/{names[-1]}",
        f"s3://lake/{key}/zz-after.bin",
    ]
