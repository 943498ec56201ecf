"""The ``filesystem`` result storage on an object store: a real SeaweedFS (session fixture), a real
Spark session writing and reading through pyarrow (no s3a), and the bucket listed before and after
to see the space come back."""

from __future__ import annotations

import time
import uuid

import pyarrow.fs as pafs
import pytest
from pyspark.sql import functions as F

from storage.errors import InvalidInput
from storage.io import StoreError
from storage.results.plugin import StorageDescriptor
from storage.results.registry import build_storage
from storage.spec.expressions import parse_filter

SECRET = "lakewarden-secret-key"


@pytest.fixture
def root(seaweedfs) -> str:
    return f"s3://results/cache-{uuid.uuid4().hex[:8]}"


def _descriptor(seaweedfs, root: str, **overrides: str) -> StorageDescriptor:
    descriptor = StorageDescriptor().with_type("filesystem").with_config("root", root)
    for key, value in {**seaweedfs.s3_properties(), **overrides}.items():
        descriptor.with_config(key, value)
    return descriptor


@pytest.fixture
def storage(seaweedfs, root):
    return build_storage(_descriptor(seaweedfs, root))


def _objects(seaweedfs, prefix: str) -> dict[str, int]:
    """Every object under ``s3://<prefix>`` with its size, listed on the store itself."""
    selector = pafs.FileSelector(prefix.removeprefix("s3://"), recursive=True, allow_not_found=True)
    return {
        info.path: info.size
        for info in seaweedfs.filesystem().get_file_info(selector)
        if info.type == pafs.FileType.File
    }


def _frame(spark, ids: range, parts: int = 4):
    rows = [(i, f"word-{i}", i * 0.5) for i in ids]
    return spark.createDataFrame(rows, "id long, word string, score double").repartitionByRange(parts, "id")


def test_results_round_trip_on_s3_and_the_cleanup_hook_reclaims_the_space(seaweedfs, storage, root, spark):
    before = _objects(seaweedfs, "s3://results")
    properties = storage.create("orders_by_region", {})
    assert properties["path"] == f"{root}/orders_by_region"

    stats = storage.write(_frame(spark, range(100)), properties)

    written = _objects(seaweedfs, properties["path"])
    data = sorted(path for path in written if path.endswith(".parquet"))
    assert len(data) == 4 and f"{properties['path'].removeprefix('s3://')}/_lakewarden_files.json" in written
    assert stats.rows == 100
    assert stats.size_bytes == sum(written[path] for path in data)
    assert storage.exists(properties)
    rows = sorted(tuple(r) for r in storage.read(spark, properties).collect())
    assert rows == [(i, f"word-{i}", i * 0.5) for i in range(100)]

    storage.clean(["orders_by_region"], {"orders_by_region": properties})

    assert _objects(seaweedfs, properties["path"]) == {}
    assert _objects(seaweedfs, "s3://results") == before
    assert not storage.exists(properties)
    storage.clean(["orders_by_region"], {"orders_by_region": properties})  # already gone: no error


def test_a_filtered_read_opens_only_matching_files_and_projects_columns(storage, spark):
    properties = storage.create("filtered", {})
    storage.write(_frame(spark, range(100)), properties)
    expr = parse_filter("id >= 90")

    assert len(storage.data_files(properties)) == 4
    assert len(storage.data_files(properties, expr)) == 1
    frame = storage.read(spark, properties, columns=["word"], filters=expr)
    assert frame.columns == ["word"]
    assert sorted(r.word for r in frame.collect()) == sorted(f"word-{i}" for i in range(90, 100))
    assert storage.read(spark, properties, filters=parse_filter("id > 1000")).count() == 0
    with pytest.raises(ValueError, match="unknown column"):
        storage.read(spark, properties, columns=["nope"])


def test_writing_again_replaces_the_old_files(seaweedfs, storage, spark):
    properties = storage.create("rewritten", {})
    storage.write(_frame(spark, range(50)), properties)
    first = set(_objects(seaweedfs, properties["path"]))

    storage.write(_frame(spark, range(10), parts=2), properties)

    second = set(_objects(seaweedfs, properties["path"]))
    assert len([p for p in second if p.endswith(".parquet")]) == 2
    assert not (first & second) - {p for p in first if p.endswith("_lakewarden_files.json")}
    assert sorted(r.id for r in storage.read(spark, properties).collect()) == list(range(10))


def test_an_empty_result_keeps_its_schema(storage, spark):
    properties = storage.create("empty", {})
    stats = storage.write(_frame(spark, range(10)).where(F.col("id") < 0), properties)
    assert stats.rows == 0
    assert storage.exists(properties)
    frame = storage.read(spark, properties)
    assert frame.columns == ["id", "word", "score"] and frame.count() == 0


def test_a_failed_write_leaves_nothing_behind(seaweedfs, storage, spark):
    properties = storage.create("failing", {})
    before = _objects(seaweedfs, properties["path"])
    boom = F.udf(lambda i: 1 // (i - 7), "long")
    frame = _frame(spark, range(20)).withColumn("bad", boom(F.col("id")))

    with pytest.raises(Exception, match="ZeroDivisionError"):
        storage.write(frame, properties)

    assert _objects(seaweedfs, properties["path"]) == before
    assert not storage.exists(properties)


def test_a_vanished_file_means_the_result_is_gone(seaweedfs, storage, spark):
    properties = storage.create("vanishing", {})
    storage.write(_frame(spark, range(20), parts=2), properties)
    victim = next(p for p in _objects(seaweedfs, properties["path"]) if p.endswith(".parquet"))
    seaweedfs.filesystem().delete_file(victim)

    assert not storage.exists(properties)
    with pytest.raises(FileNotFoundError, match="its files are gone"):
        storage.read(spark, properties)


def test_properties_outside_the_root_are_refused(storage, root):
    for path in (f"{root}/../elsewhere", "s3://lake/orders", f"{root}/a/b", f"{root}/%2e%2e"):
        with pytest.raises(ValueError):
            storage.exists({"path": path})
    with pytest.raises(ValueError, match="path separators"):
        storage.create("a/b", {})


# -- bad configuration -----------------------------------------------------------------------


def test_wrong_credentials_are_refused_naming_the_root_and_never_the_secret(seaweedfs, root):
    storage = build_storage(_descriptor(seaweedfs, root, **{"s3.secret-access-key": "not-the-secret-0123"}))
    with pytest.raises(StoreError) as caught:
        storage.verify()
    message = str(caught.value)
    assert root in message and "not-the-secret-0123" not in message and SECRET not in message


def test_a_missing_bucket_is_named(seaweedfs):
    storage = build_storage(_descriptor(seaweedfs, "s3://no-such-bucket/cache"))
    with pytest.raises(StoreError, match="s3://no-such-bucket/cache: bucket 'no-such-bucket' does not exist"):
        storage.verify()


def test_an_unreachable_endpoint_fails_within_the_timeouts(seaweedfs, root):
    from devtools.seaweedfs import free_port

    refused = build_storage(
        _descriptor(seaweedfs, root, **{"s3.endpoint": f"http://127.0.0.1:{free_port()}"})
    )
    silent = build_storage(
        _descriptor(
            seaweedfs,
            root,
            **{"s3.endpoint": "http://10.255.255.1:9", "s3.connect-timeout": "1", "s3.request-timeout": "2"},
        )
    )
    for storage in (refused, silent):
        started = time.monotonic()
        with pytest.raises(StoreError, match=root):
            storage.verify()
        assert time.monotonic() - started < 20


def test_a_bad_timeout_or_s3_settings_on_a_local_root_are_configuration_errors(seaweedfs, root, tmp_path):
    from storage.results.registry import StorageConfigError

    with pytest.raises(StorageConfigError, match="connect-timeout must be a number"):
        build_storage(_descriptor(seaweedfs, root, **{"s3.connect-timeout": "soon"}))
    with pytest.raises(StorageConfigError, match="object-store root"):
        build_storage(_descriptor(seaweedfs, str(tmp_path)))
    with pytest.raises(StorageConfigError, match="unknown-key|Additional properties"):
        build_storage(_descriptor(seaweedfs, root, **{"s3.unknown-key": "x"}))


# -- through the services and the API -------------------------------------------------------


@pytest.fixture
def s3_allowed(settings, warehouse):
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, "s3://results/"]  # the store's other buckets are not
    return settings


@pytest.mark.django_db
def test_registration_checks_the_root_and_the_api_masks_the_secret(
    seaweedfs, root, s3_allowed, admin_user, api_as
):
    from storage.services import storage_backend_register

    backend = storage_backend_register(name="s3-cache", descriptor=_descriptor(seaweedfs, root + "/"))
    assert backend.config["root"] == root and backend.config["s3.secret-access-key"] == SECRET

    answer = api_as(admin_user).get(f"/api/v1/storages/{backend.pk}/")
    assert answer.status_code == 200
    assert answer.json()["config"]["s3.secret-access-key"] == "********"
    assert answer.json()["config"]["s3.access-key-id"] == seaweedfs.access_key
    assert SECRET not in answer.content.decode()

    with pytest.raises(InvalidInput, match="s3://lake/cache is outside the allowed roots"):
        storage_backend_register(name="elsewhere", descriptor=_descriptor(seaweedfs, "s3://lake/cache"))
    with pytest.raises(InvalidInput, match=f"cannot reach the storage: {root}") as caught:
        storage_backend_register(
            name="wrong",
            descriptor=_descriptor(seaweedfs, root, **{"s3.secret-access-key": "wrong-secret-42"}),
        )
    assert "wrong-secret-42" not in str(caught.value)


@pytest.mark.django_db
def test_the_api_refuses_a_missing_bucket_with_a_400_naming_it(seaweedfs, s3_allowed, admin_user, api_as):
    s3_allowed.LAKEWARDEN_ALLOWED_ROOTS = [*s3_allowed.LAKEWARDEN_ALLOWED_ROOTS, "s3://missing-bucket/"]
    config = {"root": "s3://missing-bucket/cache", **seaweedfs.s3_properties()}
    answer = api_as(admin_user).post(
        "/api/v1/storages/", {"name": "missing", "type": "filesystem", "config": config}, format="json"
    )
    assert answer.status_code == 400
    assert "s3://missing-bucket/cache: bucket 'missing-bucket' does not exist" in answer.json()["error"]
    assert SECRET not in answer.content.decode()


@pytest.mark.django_db
def test_the_storage_test_runs_create_write_read_clean_on_s3(seaweedfs, root, s3_allowed, spark):
    from storage.services import storage_backend_register, storage_backend_test

    backend = storage_backend_register(name="s3-tested", descriptor=_descriptor(seaweedfs, root))
    ok, message = storage_backend_test(backend=backend, spark=spark)
    assert (ok, message) == (True, "create, write, read and clean all worked")
    assert _objects(seaweedfs, root) == {}
