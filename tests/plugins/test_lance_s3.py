"""A Lance dataset on an object store (the test SeaweedFS): found by a path-root catalog's sync
with the root's own credentials, read as Lance reads it, compacted and expired in place, and a
failed compaction leaves no object behind."""

from __future__ import annotations

from collections import Counter

import pyarrow.fs as pafs
import pytest

from tests.plugins.lance_tables import build_demo_dataset, lance
from tests.plugins.test_lance_processes import run_now  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def _objects(seaweedfs, prefix: str) -> set[str]:
    selector = pafs.FileSelector(prefix.removeprefix("s3://"), recursive=True)
    return {i.path for i in seaweedfs.filesystem().get_file_info(selector) if i.type == pafs.FileType.File}


def _rows(dataset) -> Counter:
    return Counter(tuple(sorted(row.items())) for row in dataset.to_table().to_pylist())


@pytest.fixture
def lance_on_s3(settings, warehouse, s3_prefix, seaweedfs, s3_options, monkeypatch):
    """(console Table, location, lance storage options): the demo dataset under the test's prefix,
    registered by syncing a path root that carries the store's credentials (none in the env)."""
    from lakewarden_lance._dataset import storage_options

    from storage import services
    from storage.models import Table

    for name in ("ENDPOINT", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY"):
        monkeypatch.delenv(f"LAKEWARDEN_S3_{name}", raising=False)
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, s3_prefix]
    location = f"{s3_prefix}/clicks"
    build_demo_dataset(location, appends=6, rows=20, index=False, storage=s3_options)
    catalog = services.catalog_create(
        name=s3_prefix.rsplit("/", 1)[-1],
        kind="path_root",
        properties={"root": s3_prefix, **seaweedfs.s3_properties()},
    )
    report = services.catalog_sync(catalog=catalog)
    assert report.added == [location] and not report.failed
    return Table.objects.get(location=location), location, storage_options(location, s3_options)


def test_a_lance_dataset_on_s3_is_registered_and_read_as_lance_reads_it(lance_on_s3):
    from storage.services import table_open

    table, location, options = lance_on_s3
    dataset = lance.dataset(location, storage_options=options)

    spec = table_open(table)

    assert (table.format, table.file_count) == ("lance", 6)
    assert table.record_count == dataset.count_rows()
    assert {s.path for s in spec.file_index().list_files_at()} == {
        f"{location}/data/{f.metadata.files[0].path}" for f in dataset.get_fragments()
    }
    read = Counter(tuple(sorted(row.items())) for b in spec.read() for row in b.to_pylist())
    assert read == _rows(dataset)


def test_rewrite_and_expiry_on_s3_keep_every_row_and_lance_still_reads(lance_on_s3, run_now, seaweedfs):  # noqa: F811
    table, location, options = lance_on_s3
    before = _rows(lance.dataset(location, storage_options=options))

    rewrite = run_now(table, "rewrite")
    expire = run_now(table, "expire-snapshots", {"older-than-hours": 0, "retain-versions": 1})

    assert rewrite.status == "SUCCESS", rewrite.failure
    assert expire.status == "SUCCESS", expire.failure
    dataset = lance.dataset(location, storage_options=options)
    assert len(dataset.get_fragments()) == 1 and _rows(dataset) == before
    tagged = int(dataset.tags.list()["before-cleanup"]["version"])
    assert sorted(int(v["version"]) for v in dataset.versions()) == [tagged, dataset.version]
    at_tag = lance.dataset(location, version=tagged, storage_options=options)
    assert at_tag.count_rows() == 6 * 20  # the tag was taken before the delete
    objects = _objects(seaweedfs, location)
    for kept in (dataset, at_tag):
        for fragment in kept.get_fragments():
            assert all(
                f"{location.removeprefix('s3://')}/data/{f.path}" in objects for f in fragment.metadata.files
            )


def test_a_failed_rewrite_on_s3_leaves_no_object_behind(lance_on_s3, run_now, seaweedfs, monkeypatch):  # noqa: F811
    table, location, options = lance_on_s3
    objects = _objects(seaweedfs, location)
    version = lance.dataset(location, storage_options=options).version
    monkeypatch.setenv("LAKEWARDEN_FAILPOINTS", "before-commit=raise")

    process = run_now(table, "rewrite")

    assert process.status == "FAILED" and "failpoint before-commit" in process.failure
    assert lance.dataset(location, storage_options=options).version == version
    assert _objects(seaweedfs, location) == objects
