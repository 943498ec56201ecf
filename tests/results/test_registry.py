"""The result storage registry: discovery, validation, registration in code and YAML, secrets."""

from __future__ import annotations

import importlib.metadata

import pytest

from storage import plugins
from storage.results import registry
from storage.results.filesystem import FilesystemStorage
from storage.results.iceberg import IcebergStorage
from storage.results.plugin import StorageDescriptor
from storage.results.postgres import PostgresStorage
from storage.results.registry import (
    MASK,
    StorageConfigError,
    StorageUnavailable,
    build_storage,
    mask_config,
    storage_types,
    unmask_config,
)

# -- discovery ---------------------------------------------------------------------------------------


def test_the_built_in_storages_are_discovered_through_entry_points():
    types = storage_types()
    assert types["filesystem"] is FilesystemStorage
    assert types["iceberg"] is IcebergStorage
    assert types["postgres"] is PostgresStorage


def test_the_registry_is_read_only():
    with pytest.raises(TypeError):
        storage_types()["mine"] = FilesystemStorage  # type: ignore[index]


def test_every_storage_declares_a_closed_schema_and_a_description():
    for cls in storage_types().values():
        assert cls.config_schema["additionalProperties"] is False
        assert cls.description


def test_a_plugin_that_fails_to_import_is_reported_and_the_others_still_load(monkeypatch):
    group = registry.ENTRY_POINT_GROUP
    points = [
        importlib.metadata.EntryPoint("filesystem", "storage.results.filesystem:FilesystemStorage", group),
        importlib.metadata.EntryPoint("broken", "no_such_package.store:Store", group),
    ]
    monkeypatch.setattr(plugins, "entry_points", lambda group: points)
    registry._discover.cache_clear()
    try:
        assert list(storage_types()) == ["filesystem"]
        with pytest.raises(StorageConfigError, match="'broken' is installed but .*No module named"):
            build_storage(StorageDescriptor().with_type("broken"))
    finally:
        monkeypatch.undo()
        registry._discover.cache_clear()


# -- bad input ---------------------------------------------------------------------------------------


def test_an_unknown_type_names_the_known_ones():
    with pytest.raises(
        StorageConfigError, match=r"unknown storage type 'hdfs' \(known: filesystem, iceberg, postgres\)"
    ):
        build_storage(StorageDescriptor().with_type("hdfs"))


def test_a_missing_type_is_refused():
    with pytest.raises(StorageConfigError, match="type is missing"):
        build_storage({"intermediate-result-storage.config.root": "/tmp"})


@pytest.mark.parametrize(
    ("type_name", "config", "message"),
    [
        ("filesystem", {"root": 5}, "root: 5 is not of type 'string'"),
        ("filesystem", {}, "'root' is a required property"),
        ("filesystem", {"root": "/tmp", "bogus": 1}, "'bogus' was unexpected"),
        (
            "postgres",
            {"dsn": "postgresql://h/db", "max_rows": 0},
            "max_rows: 0 is less than the minimum of 1",
        ),
        ("postgres", {"dsn": "postgresql://h/db", "schema": "a;b"}, "schema: 'a;b' does not match"),
        ("iceberg", {"uri": "postgresql://h/db", "namespace": "a.b"}, "namespace: 'a.b' does not match"),
        ("iceberg", {"warehouse": "file:///tmp"}, "'uri' is a required property"),
    ],
)
def test_a_config_failing_its_schema_names_the_key(type_name, config, message):
    with pytest.raises(StorageConfigError) as caught:
        build_storage(StorageDescriptor(type=type_name, config=config))
    assert message in str(caught.value)


def test_a_relative_filesystem_root_is_refused():
    with pytest.raises(StorageConfigError, match="root: must be an absolute folder"):
        build_storage(StorageDescriptor().with_type("filesystem").with_config("root", "cache"))


def test_a_schema_error_on_a_secret_key_does_not_echo_the_value():
    with pytest.raises(StorageConfigError) as caught:
        build_storage(StorageDescriptor(type="postgres", config={"dsn": ["postgresql://u:hunter2@h/db"]}))
    assert "dsn:" in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_a_dsn_that_is_not_a_connection_string_is_refused_without_the_password():
    with pytest.raises(StorageConfigError) as caught:
        build_storage(StorageDescriptor(type="postgres", config={"dsn": "password=hunter2 nonsense"}))
    assert "dsn: not a Postgres connection string" in str(caught.value)
    assert "hunter2" not in str(caught.value)


# -- secrets -----------------------------------------------------------------------------------------


def test_secrets_are_masked_and_a_dsn_keeps_everything_but_its_password():
    masked = mask_config(
        PostgresStorage, {"dsn": "postgresql://cache:hunter2@db.internal:5433/results", "schema": "c"}
    )
    assert masked == {"dsn": f"postgresql://cache:{MASK}@db.internal:5433/results", "schema": "c"}


def test_a_keyword_dsn_password_is_masked():
    masked = mask_config(PostgresStorage, {"dsn": "host=db user=cache password=hunter2 dbname=results"})
    assert "hunter2" not in masked["dsn"]
    assert "host=db" in masked["dsn"]


def test_a_secret_that_is_not_a_url_is_masked_whole_and_other_keys_are_shown():
    config = {
        "uri": "postgresql+psycopg2://cat:hunter2@h/catalog",
        "warehouse": "file:///lake",
        "s3.secret-access-key": "hunter3",
        "s3.endpoint": "http://minio:9000",
    }
    masked = mask_config(IcebergStorage, config)
    assert masked["uri"] == f"postgresql+psycopg2://cat:{MASK}@h/catalog"
    assert masked["s3.secret-access-key"] == MASK
    assert masked["warehouse"] == "file:///lake"
    assert masked["s3.endpoint"] == "http://minio:9000"
    assert "hunter" not in repr(masked)


def test_a_password_in_a_url_under_a_non_secret_key_is_masked_too():
    masked = mask_config(FilesystemStorage, {"root": "/cache", "note": "s3://k:hunter2@bucket/x"})
    assert masked == {"root": "/cache", "note": f"s3://k:{MASK}@bucket/x"}


def test_resubmitting_a_masked_form_keeps_the_stored_secrets():
    stored = {"dsn": "postgresql://cache:hunter2@db/results", "schema": "c"}
    shown = mask_config(PostgresStorage, stored)
    assert unmask_config(PostgresStorage, {**shown, "schema": "d"}, stored) == {
        "dsn": "postgresql://cache:hunter2@db/results",
        "schema": "d",
    }
    changed = {"dsn": "postgresql://cache:new@db/results", "schema": "c"}
    assert unmask_config(PostgresStorage, changed, stored) == changed


# -- registration in code and YAML ------------------------------------------------------------------

YAML = """
intermediate-result-storage:
  type: postgres
  config:
    dsn: postgresql://cache:hunter2@127.0.0.1:5432/results
    schema: cached
    max_rows: 500
"""


def test_code_and_yaml_registration_give_the_same_properties_and_the_same_backend():
    in_code = (
        StorageDescriptor()
        .with_type("postgres")
        .with_config("dsn", "postgresql://cache:hunter2@127.0.0.1:5432/results")
        .with_config("schema", "cached")
        .with_config("max_rows", 500)
    )
    from_yaml = StorageDescriptor.from_yaml(YAML)
    assert in_code.to_properties() == from_yaml.to_properties()
    assert in_code.to_properties()["intermediate-result-storage.config.schema"] == "cached"

    built = [build_storage(in_code), build_storage(from_yaml), build_storage(from_yaml.to_properties())]
    assert {type(b) for b in built} == {PostgresStorage}
    assert {(b.dsn, b.schema, b.max_rows) for b in built} == {
        ("postgresql://cache:hunter2@127.0.0.1:5432/results", "cached", 500)
    }


def test_defaults_apply_when_optional_keys_are_absent():
    storage = build_storage(StorageDescriptor(type="postgres", config={"dsn": "postgresql://h/db"}))
    assert (storage.schema, storage.max_rows) == ("lakewarden_cache", 100_000)
    iceberg = build_storage(StorageDescriptor(type="iceberg", config={"uri": "postgresql://h/db"}))
    assert iceberg.namespace == "lakewarden_cache"


# -- unreachable backends ---------------------------------------------------------------------------


def test_a_postgres_dsn_that_does_not_connect_gives_a_clear_error_without_the_password():
    storage = build_storage(
        StorageDescriptor(
            type="postgres",
            config={"dsn": "postgresql://cache:hunter2@127.0.0.1:1/results", "connect_timeout": 2},
        )
    )
    with pytest.raises(StorageUnavailable) as caught:
        storage.create("r", {})
    message = str(caught.value)
    assert message.startswith("cannot connect to postgres at 127.0.0.1:1/results: ")
    assert "hunter2" not in message


def test_a_postgres_database_that_does_not_exist_is_named_in_the_error():
    storage = build_storage(
        StorageDescriptor(
            type="postgres",
            config={"dsn": "postgresql://lakewarden:hunter2@127.0.0.1:5432/no_such_db_for_results"},
        )
    )
    with pytest.raises(StorageUnavailable) as caught:
        storage.exists({"table": "lakewarden_cache.r"})
    message = str(caught.value)
    assert "cannot connect to postgres at 127.0.0.1:5432/no_such_db_for_results:" in message
    assert 'database "no_such_db_for_results" does not exist' in message
    assert "hunter2" not in message


def test_an_iceberg_catalog_that_does_not_connect_gives_a_clear_error_without_the_password():
    storage = build_storage(
        StorageDescriptor(
            type="iceberg",
            config={
                "uri": "postgresql+psycopg2://cat:hunter2@127.0.0.1:1/catalog",
                "warehouse": "file:///tmp",
            },
        )
    )
    with pytest.raises(StorageUnavailable) as caught:
        storage.create("r", {})
    message = str(caught.value)
    assert message.startswith("cannot connect to the iceberg catalog at 127.0.0.1:1/catalog: ")
    assert "hunter2" not in message
