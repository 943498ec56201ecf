"""Per-table validation at submission (a 400 with the reason, nothing created, nothing changed),
non-retryable failures at run time, and plan previews (API, service, stored on the Process row).

The read-only tables are written once per module (pyiceberg in a SQL catalog on Postgres, deltalake)
and registered per test; the tests that run a rewrite make their own small tables."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from deltalake import write_deltalake
from django.utils import timezone

from processes.health import format_remedies, remedies_of
from processes.models import Process, ProcessStatus
from storage.health import TableFacts, table_health
from tests.processes.conftest import ICEBERG_SCHEMA, REGIONS, append_files, delta_rows, rows


@pytest.fixture(scope="module")
def lake(tmp_path_factory, sql_catalog):
    """An Iceberg table whose partitioning evolved (spec 0 unpartitioned: 3 files; spec 1 by
    region: 4 files) and a Delta table partitioned by region (4 files), written once. The
    console's catalog of ``tables`` is this SQL catalog: the same name, database and warehouse."""
    root = tmp_path_factory.mktemp("submission")
    warehouse = root / "warehouse"
    warehouse.mkdir()
    catalog = sql_catalog("submission", warehouse.as_uri())
    catalog.create_namespace("ns")
    iceberg = catalog.create_table("ns.events", schema=ICEBERG_SCHEMA)
    append_files(iceberg, [rows(i * 5, 5) for i in range(3)])
    with iceberg.update_spec() as update:
        update.add_identity("region")
    iceberg.refresh()
    append_files(iceberg, [rows(100 + i * 5, 5, REGIONS[i % 2]) for i in range(4)])
    delta = warehouse / "delta_events"
    for i in range(4):
        write_deltalake(
            str(delta), delta_rows(i * 5, 5, REGIONS[i % 2]), mode="append", partition_by=["region"]
        )
    return SimpleNamespace(
        warehouse=warehouse, catalog=catalog.name, uri=catalog.properties["uri"], iceberg=iceberg, delta=delta
    )


@pytest.fixture
def tables(lake, db, settings):
    """(Iceberg, Delta) console tables of the module's lake."""
    from storage import services

    settings.LAKEWARDEN_WAREHOUSE = lake.warehouse
    settings.LAKEWARDEN_ALLOWED_ROOTS = [lake.warehouse]
    catalog = services.catalog_create(
        name=lake.catalog,
        kind="iceberg_sql",
        properties={"uri": lake.uri, "warehouse": lake.warehouse.as_uri()},
    )
    iceberg = services.table_register(catalog=catalog, identifier="ns.events")
    return iceberg, services.table_register(location=str(lake.delta))


def tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time."""
    found = {}
    for parent, _, names in os.walk(folder):
        for name in names:
            stat = os.stat(os.path.join(parent, name))
            found[os.path.join(parent, name)] = (stat.st_size, stat.st_mtime_ns)
    return found


BAD_INPUT = [
    (
        "iceberg",
        "rewrite",
        {"strategy": "zorder", "zorder-columns": ["id", "nope"]},
        "zorder-columns: unknown column(s) nope",
    ),
    (
        "iceberg",
        "rewrite",
        {"strategy": "zorder", "zorder-columns": ["id", "region"]},
        "zorder-columns region: a partition column",
    ),
    (
        "iceberg",
        "rewrite",
        {"strategy": "sort", "sort-order": ["region"]},
        "sort-order: region only names partition columns",
    ),
    (
        "iceberg",
        "rewrite",
        {"strategy": "sort", "sort-order": [{"column": "nope"}]},
        "sort-order: unknown column(s) nope",
    ),
    (
        "iceberg",
        "rewrite",
        {"strategy": "sort"},
        "strategy sort needs a sort-order: the table has no sort order",
    ),
    (
        "iceberg",
        "rewrite",
        {"output-spec-id": 7},
        "output-spec-id 7 is not a partition spec of this table (its specs: 0, 1)",
    ),
    ("iceberg", "rewrite", {"strategy": "zorder"}, "'zorder-columns' is a required property"),
    (
        "iceberg",
        "rewrite-manifests",
        {"spec-id": 42},
        "spec-id 42 is not a partition spec of this table ([0, 1])",
    ),
    ("iceberg", "compute-statistics", {"columns": ["id", "nope"]}, "unknown column 'nope'"),
    (
        "iceberg",
        "compute-statistics",
        {"snapshot-id": 12345},
        "snapshot-id 12345 is not a snapshot of this table",
    ),
    (
        "delta",
        "rewrite",
        {"strategy": "zorder", "zorder-columns": ["nope"]},
        "zorder-columns: unknown column(s) nope",
    ),
    (
        "delta",
        "rewrite",
        {"strategy": "zorder", "zorder-columns": ["id", "region"]},
        "zorder-columns region: a partition column",
    ),
    (
        "delta",
        "rewrite",
        {"strategy": "sort", "sort-order": ["id", "region"]},
        "sort-order: region is a partition column",
    ),
    ("delta", "rewrite", {"strategy": "sort"}, "strategy sort needs a sort-order"),
]


@pytest.mark.parametrize(("fmt", "action", "params", "reason"), BAD_INPUT)
def test_bad_input_is_a_400_with_the_reason_and_changes_nothing(
    tables, lake, api_as, operator, fmt, action, params, reason
):
    table = tables[0] if fmt == "iceberg" else tables[1]
    files = tree(lake.warehouse)
    api = api_as(operator)

    for url, body in (
        ("/api/v1/processes/", {"table": table.pk, "action": action, "params": params}),
        (f"/api/v1/tables/{table.pk}/processes/preview/", {"action": action, "params": params}),
    ):
        response = api.post(url, body, format="json")
        assert response.status_code == 400, response.content
        assert reason in response.json()["error"]
        assert response.json()["field"] == "params"

    assert not Process.objects.exists()
    assert tree(lake.warehouse) == files


# Issue 29, item 11: each of these answered 201 and failed (or overflowed) in the worker.
ABSURD = [
    ("iceberg", "rewrite", "target-file-size", 1e30, 16 * 1024**3, "greater than the maximum of 17179869184"),
    ("delta", "rewrite", "target-file-size", 1e30, 16 * 1024**3, "greater than the maximum of 17179869184"),
    ("iceberg", "rewrite", "max-commits", 10**12, 1_000_000, "greater than the maximum of 1000000"),
    (
        "iceberg",
        "expire-snapshots",
        "max-age",
        "P99999999999D",
        "P36500D",
        "P99999999999D is longer than the limit of 36,500 days",
    ),
    (
        "iceberg",
        "expire-snapshots",
        "max-age",
        "P36501D",
        36_500 * 86_400,
        "longer than the limit of 36,500 days",
    ),
    ("delta", "vacuum", "retention-hours", 1e308, 876_000, "greater than the maximum of 876000"),
    ("delta", "vacuum", "retention-hours", 876_000.5, 876_000.0, "greater than the maximum of 876000"),
]


@pytest.mark.parametrize(("fmt", "action", "key", "absurd", "maximum", "reason"), ABSURD)
def test_a_parameter_over_its_maximum_is_a_400_naming_it_and_the_maximum_is_accepted(
    tables, api_as, client_as, operator, fmt, action, key, absurd, maximum, reason
):
    table = tables[0] if fmt == "iceberg" else tables[1]
    extra = {"partial-progress": True} if key == "max-commits" else {}
    api = api_as(operator)

    refused = api.post(
        "/api/v1/processes/",
        {"table": table.pk, "action": action, "params": {key: absurd, **extra}},
        format="json",
    )
    refused_form = client_as(operator).post(
        f"/tables/{table.pk}/processes/run/",
        {"action": action, "params": json.dumps({key: absurd, **extra})},
        HTTP_HX_REQUEST="true",
    )
    accepted = api.post(
        "/api/v1/processes/",
        {"table": table.pk, "action": action, "params": {key: maximum, **extra}},
        format="json",
    )

    assert refused.status_code == 400, refused.content
    assert refused.json()["field"] == "params"
    assert refused.json()["error"].startswith(f"{key}: ") and reason in refused.json()["error"]
    assert refused_form.status_code == 400 and reason in refused_form.content.decode()
    assert accepted.status_code == 201, accepted.content
    assert Process.objects.get().params[key] == maximum


def test_invalid_table_properties_are_refused_at_submission(tables, api_as, operator):
    from storage.models import Table

    iceberg, delta = tables
    for table in (iceberg, delta):
        Table.objects.filter(pk=table.pk).update(
            properties={"strategy": "zorder", "zorder-columns": ["gone"]}
        )
        response = api_as(operator).post(
            "/api/v1/processes/", {"table": table.pk, "action": "rewrite", "params": {}}, format="json"
        )
        assert response.status_code == 400
        assert "zorder-columns: unknown column(s) gone" in response.json()["error"]
        # the parameters of a submission override the table's properties
        valid = {"strategy": "binpack"}
        response = api_as(operator).post(
            "/api/v1/processes/", {"table": table.pk, "action": "rewrite", "params": valid}, format="json"
        )
        assert response.status_code == 201, response.content
    assert Process.objects.count() == 2


def test_a_z_order_on_a_column_partitioning_only_an_older_spec_is_accepted(tables, operator):
    """region partitions spec 1 only: written into spec 0, a z-order by it clusters rows."""
    from processes import services

    process = services.process_create(
        table=tables[0],
        action="rewrite",
        params={"strategy": "zorder", "zorder-columns": ["id", "region"], "output-spec-id": 0},
        user=operator,
    )
    assert process.status == ProcessStatus.PENDING
    assert process.preview["available"] is True
    assert process.preview["details"]["strategy"] == "zorder:id,region"
    assert process.preview["details"]["output_spec_id"] == 0


# --- previews ------------------------------------------------------------------------------------


def test_iceberg_rewrite_preview_counts_the_plan_and_predicts_health(tables, lake, api_as, operator):
    iceberg, _ = tables
    files = tree(lake.warehouse)
    metadata = lake.iceberg.metadata_location

    response = api_as(operator).post(
        f"/api/v1/tables/{iceberg.pk}/processes/preview/",
        {"action": "rewrite", "params": {"min-input-files": 2}},
        format="json",
    )

    assert response.status_code == 200, response.content
    answer = response.json()
    # spec 0's 3 files are rewritten into spec 1 whatever their number; spec 1's 2+2 files by region
    data_files = {task.file.file_path: task.file for task in lake.iceberg.scan().plan_files()}
    assert answer["available"] is True and answer["factory"] == "iceberg-rewrite"
    assert answer["groups"] == 3 and answer["files_in"] == 7
    assert answer["bytes_in"] == sum(f.file_size_in_bytes for f in data_files.values())
    assert answer["files_out"] == 3 and answer["bytes_out"] == answer["bytes_in"]
    assert answer["objects_to_delete"] == 0
    assert answer["details"]["rows_in"] == 35
    assert answer["details"]["output_spec_id"] == 1
    assert sorted((g["partition"], g["files"]) for g in answer["details"]["group_list"]) == [
        ("", 3),
        ("region=eu", 2),
        ("region=us", 2),
    ]
    assert any("older partition specs" in note for note in answer["notes"])
    iceberg.refresh_from_db()
    before = TableFacts(
        iceberg.file_count, iceberg.small_file_count, iceberg.instant_count, iceberg.compactable_file_count
    )
    # no partition holds 5 small files: none is compactable, the older specs' files are rewritten anyway
    assert before == TableFacts(7, 7, 2, 0)
    assert answer["facts_after"] == {
        "file_count": 3,
        "small_file_count": 3,
        "instant_count": 3,
        "compactable_file_count": 0,
    }
    now = timezone.now()  # (the score of a table never maintained does not depend on the time)
    remedies = remedies_of(format_remedies(), "iceberg")
    assert answer["health_before"] == table_health(before, None, 0, now, remedies).score
    assert answer["health_after"] == table_health(TableFacts(3, 3, 3, 0), now, 0, now, remedies).score
    assert answer["health_after"] < answer["health_before"]
    # nothing written: same metadata, same files
    lake.iceberg.refresh()
    assert lake.iceberg.metadata_location == metadata
    assert tree(lake.warehouse) == files


def test_previews_of_manifests_statistics_and_checkpoint(tables, lake, api_as, operator):
    iceberg, delta = tables
    files = tree(lake.warehouse)
    api = api_as(operator)

    def preview(table, action, params=None):
        response = api.post(
            f"/api/v1/tables/{table.pk}/processes/preview/",
            {"action": action, "params": params or {}},
            format="json",
        )
        assert response.status_code == 200, response.content
        return response.json()

    manifests = preview(iceberg, "rewrite-manifests")
    snapshot = lake.iceberg.current_snapshot()
    data_manifests = [m for m in snapshot.manifests(lake.iceberg.io) if m.content == 0]
    assert manifests["files_in"] == len(data_manifests) == 2  # one per append
    assert (
        manifests["details"]["entries"] == 7
        and manifests["details"]["manifests_planned"] == manifests["files_out"]
    )

    statistics = preview(iceberg, "compute-statistics", {"columns": ["id", "region"]})
    assert statistics["files_in"] == 7 and statistics["files_out"] == 1
    assert statistics["details"]["columns"] == ["id", "region"]
    assert statistics["details"]["rows_in"] == 35
    assert statistics["details"]["snapshot_id"] == snapshot.snapshot_id

    checkpoint = preview(delta, "checkpoint")
    assert (
        checkpoint["details"]["version"] == 3 and checkpoint["files_in"] == 4 and checkpoint["files_out"] == 1
    )
    assert checkpoint["objects_to_delete"] == 0  # every commit is younger than the 30-day log retention
    assert tree(lake.warehouse) == files


def test_an_action_without_a_preview_answers_unavailable(tables, api_as, operator, test_plugin):
    table = tables[1]
    response = api_as(operator).post(
        f"/api/v1/tables/{table.pk}/processes/preview/", {"action": "touch", "params": {}}, format="json"
    )
    assert response.status_code == 200, response.content
    assert response.json()["available"] is False


def test_the_preview_endpoint_needs_an_operator_and_is_in_the_openapi_schema(
    tables, api_as, viewer, operator
):
    response = api_as(viewer).post(
        f"/api/v1/tables/{tables[1].pk}/processes/preview/", {"action": "rewrite"}, format="json"
    )
    assert response.status_code == 403
    schema = api_as(operator).get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/tables/{id}/processes/preview/"]["post"]
    assert "without writing" in operation["description"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert set(schema["components"]["schemas"][body]["properties"]) == {"action", "params"}
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
    assert {"files_in", "health_before", "health_after", "objects_to_delete"} <= set(
        schema["components"]["schemas"][answer]["properties"]
    )


def test_the_console_preview_button_renders_the_preview(tables, client_as, operator):
    iceberg, delta = tables
    client = client_as(operator)
    page = client.get(f"/tables/{delta.pk}/processes/").content.decode()
    assert f'hx-post="/tables/{delta.pk}/processes/preview/"' in page and ">Preview</button>" in page

    answer = client.post(
        f"/tables/{delta.pk}/processes/preview/",
        {"action": "rewrite", "params": '{"min-input-files": 2}'},
        HTTP_HX_REQUEST="true",
    )
    assert answer.status_code == 200
    html = answer.content.decode()
    assert "Preview: rewrite" in html and "nothing was written" in html
    assert "<dt>File groups</dt><dd>2</dd>" in html  # two partitions of two small files each
    assert "<dt>Files in</dt><dd>4 (" in html
    assert "region=eu" in html and "region=us" in html

    refused = client.post(
        f"/tables/{delta.pk}/processes/preview/",
        {"action": "rewrite", "params": '{"strategy": "zorder", "zorder-columns": ["nope"]}'},
        HTTP_HX_REQUEST="true",
    )
    assert refused.status_code == 400 and "unknown column(s) nope" in refused.content.decode()
    bad_json = client.post(
        f"/tables/{delta.pk}/processes/preview/", {"action": "rewrite", "params": "{"}, HTTP_HX_REQUEST="true"
    )
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.content.decode()
    assert not Process.objects.exists()


DOCUMENTED = (
    "iceberg-rewrite",
    "delta-rewrite",
    "delta-purge-deletion-vectors",
    "iceberg-rewrite-manifests",
    "iceberg-compute-statistics",
    "delta-checkpoint",
    "delta-vacuum",
    "iceberg-clean-orphan-files",
    "iceberg-expire-snapshots",
    "iceberg-deletes",
)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_each_property_and_parameter_is_described_with_its_default(name):
    import jsonschema

    from processes.registry import factory_classes

    factory = factory_classes()[name]
    properties = factory.properties_schema["properties"]
    assert set(properties) == set(factory.default_properties)
    for key, schema in properties.items():
        assert schema.get("description"), f"{name}: property {key} has no description"
        assert schema.get("default", factory.default_properties[key]) == factory.default_properties[key], key
    jsonschema.Draft202012Validator(factory.properties_schema).validate(factory.default_properties)
    for key, schema in factory.params_schema["properties"].items():
        assert schema.get("description"), f"{name}: parameter {key} has no description"
