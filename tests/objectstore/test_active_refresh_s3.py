"""The short refresh beat on an object store (issue 31): Delta tables under a path-root catalog on
the test SeaweedFS; a tick reads the root catalogs once (not once per table) and picks up the one
table another writer committed to."""

from __future__ import annotations

from django.db import connection
from django.test.utils import CaptureQueriesContext

from storage.models import Catalog, CatalogKind, Table
from storage.refresh import refresh_changed, refresh_moved
from tests.conftest import upload_folder
from tests.processes.conftest import delta_rows


def test_a_tick_over_object_store_tables_reads_the_root_catalogs_once_and_sees_a_commit(
    seaweedfs, s3_prefix, tmp_path, db
):
    from deltalake import write_deltalake

    Catalog.objects.create(
        name="lake", kind=CatalogKind.PATH_ROOT, properties={"root": s3_prefix, **seaweedfs.s3_properties()}
    )
    ids = []
    for i in range(3):
        folder = tmp_path / f"t{i}"
        write_deltalake(str(folder), delta_rows(0, 5))
        location = upload_folder(seaweedfs, folder, f"{s3_prefix}/t{i}")
        ids.append(
            Table.objects.create(
                name=f"t{i}", format="delta", location=location, metadata_pointer="delta:0"
            ).pk
        )
    write_deltalake(str(tmp_path / "t1"), delta_rows(5, 5), mode="append")  # another writer, on t1
    upload_folder(seaweedfs, tmp_path / "t1", f"{s3_prefix}/t1")

    queued: list[int] = []
    with CaptureQueriesContext(connection) as captured:
        report = refresh_moved(ids, refresh=queued.append)

    assert (queued, report.unchanged, report.unreadable_pointer) == ([ids[1]], 2, {})
    assert len(captured) == 2  # the rows, then the path-root catalogs once
    with CaptureQueriesContext(connection) as captured:
        long_pass = refresh_changed(ids, refresh=lambda pk: None)
    assert (long_pass.refreshed, len(captured)) == ([ids[1]], 2)
