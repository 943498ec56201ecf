"""Every console tab and API read of tables on the object store: a Delta table written on S3 by
deltalake and a Hudi table (a Spark-written fixture uploaded to S3) answer with their real values,
the Hudi one exactly as its local copy does; a path root on S3 is added and synced from the
console; the table pages show no secret."""

from __future__ import annotations

import pytest
from django.urls import reverse

from storage import services
from storage.models import Catalog, CatalogKind, Table
from tests.conftest import upload_folder
from tests.objectstore.test_registration_s3 import write_delta_s3

pytestmark = pytest.mark.django_db

TABS = ["table-detail", "table-snapshots", "table-files", "table-partitions", "table-splits", "table-changes"]
HUDI = "cow_v6_simplekeygen_nonhivestyle"


@pytest.fixture
def lake_root(settings, warehouse, s3_prefix, seaweedfs, monkeypatch):
    """The test's prefix as an allowed root and a path-root catalog holding its credentials (the
    environment has none)."""
    for name in ("ENDPOINT", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY"):
        monkeypatch.delenv(f"LAKEWARDEN_S3_{name}", raising=False)
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY", raising=False)
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, s3_prefix]
    seaweedfs.filesystem().create_dir(s3_prefix.removeprefix("s3://"))
    with seaweedfs.filesystem().open_output_stream(f"{s3_prefix.removeprefix('s3://')}/README") as out:
        out.write(b"tables live below")
    services.catalog_create(
        name="lake", kind=CatalogKind.PATH_ROOT, properties={"root": s3_prefix, **seaweedfs.s3_properties()}
    )
    return s3_prefix


@pytest.fixture
def delta_s3(lake_root, s3_options):
    location = write_delta_s3(f"{lake_root}/orders", s3_options, commits=3, rows=10)
    return services.table_register(location=location)


def test_every_api_read_of_a_delta_table_on_s3_answers_with_its_real_values(delta_s3, api_as, viewer):
    api = api_as(viewer)
    base = f"/api/v1/tables/{delta_s3.pk}"

    detail = api.get(f"{base}/").json()
    snapshots = api.get(f"{base}/snapshots/").json()
    files = api.get(f"{base}/files/").json()
    at_first = api.get(f"{base}/files/", {"at": "0", "filter": "id >= 5"}).json()
    partitions = api.get(f"{base}/partitions/").json()
    splits = api.get(f"{base}/splits/", {"target_size": 1}).json()
    changes = api.get(f"{base}/changes/", {"from": "0", "to": "2"}).json()
    records = api.get(f"{base}/records/", {"key": ["25", "31"], "column": "id"}).json()

    assert (detail["format"], detail["location"], detail["record_count"], detail["file_count"]) == (
        "delta",
        f"{delta_s3.location}",
        30,
        3,
    )
    assert [s["id"] for s in snapshots] == ["2", "1", "0"]
    assert {s["operation"] for s in snapshots} == {"append"}
    assert len(files["files"]) == 3 and sum(f["record_count"] for f in files["files"]) == 30
    assert all(f["path"].startswith(f"{delta_s3.location}/part-") for f in files["files"])
    assert len(at_first["files"]) == 1 and at_first["files"][0]["stats"]["upper_bounds"]["id"] == 9
    assert [(p["file_count"], p["record_count"]) for p in partitions["partitions"]] == [(3, 30)]
    assert splits["summary"]["count"] == 3 and splits["summary"]["estimated_rows"] == 30
    assert (changes["from"]["id"], changes["to"]["id"], len(changes["files"])) == ("0", "2", 2)
    found = {r["key"]: r for r in records["records"]}
    assert found[25]["found"] and found[25]["file_path"].startswith(delta_s3.location)
    assert not found[31]["found"]


def test_every_console_tab_of_a_delta_table_on_s3_shows_its_real_values(
    delta_s3, client_as, viewer, seaweedfs
):
    client = client_as(viewer)
    spec_table = services.table_open(delta_s3)
    latest = spec_table.timeline().latest()
    names = [f.path.rsplit("/", 1)[-1] for f in spec_table.file_index().list_files_at(latest)]
    assert len(names) == 3

    bodies = {}
    for name in [*TABS, "table-records", "table-processes"]:
        page = client.get(reverse(f"console:{name}", args=[delta_s3.pk]), {"keys": "4", "column": "id"})
        assert page.status_code == 200, (name, page.content.decode()[:300])
        bodies[name] = page.content.decode()
        assert "cannot be read" not in bodies[name] and seaweedfs.secret_key not in bodies[name]

    assert "region" in bodies["table-detail"] and delta_s3.location in bodies["table-detail"]
    assert all(f"<code>{version}</code>" in bodies["table-snapshots"] for version in ("0", "1", "2"))
    assert all(f"?at={version}" in bodies["table-snapshots"] for version in ("0", "1", "2"))
    assert all(name in bodies["table-files"] for name in names)
    assert all(name in bodies["table-splits"] for name in names)
    holder = [n for n in names if n in bodies["table-records"]]  # id 4 is in the first commit's file
    assert len(holder) == 1 and "<td>yes</td>" in bodies["table-records"]


def test_a_hudi_table_on_s3_answers_as_its_local_copy_does(
    lake_root, seaweedfs, hudi_fixture, settings, api_as, viewer, client_as
):
    local_path = hudi_fixture(HUDI)
    settings.LAKEWARDEN_ALLOWED_ROOTS = [*settings.LAKEWARDEN_ALLOWED_ROOTS, local_path.parent]
    location = upload_folder(seaweedfs, local_path, f"{lake_root}/trips")
    on_s3 = services.table_register(location=location)
    local = services.table_register(location=str(local_path))
    api = api_as(viewer)

    def answers(table: Table) -> dict:
        base = f"/api/v1/tables/{table.pk}"
        files = api.get(f"{base}/files/", {"page_size": 500}).json()["files"]
        return {
            "facts": (
                table.format,
                table.current_instant,
                table.file_count,
                table.record_count,
                table.instant_count,
            ),
            "snapshots": [s["id"] for s in api.get(f"{base}/snapshots/").json()],
            "files": sorted(
                (f["path"].rsplit("/", 1)[-1], f["partition_path"], f["record_count"]) for f in files
            ),
            "partitions": sorted(
                (p["path"], p["file_count"], p["record_count"])
                for p in api.get(f"{base}/partitions/").json()["partitions"]
            ),
            "splits": api.get(f"{base}/splits/").json()["summary"],
            "changes": len(api.get(f"{base}/changes/").json()["files"]),
        }

    s3_answers, local_answers = answers(on_s3), answers(local)
    assert on_s3.location == location and on_s3.format == "hudi"
    assert s3_answers == local_answers
    assert s3_answers["facts"][3] > 0 and len(s3_answers["files"]) >= 1 and len(s3_answers["partitions"]) >= 2
    client = client_as(viewer)
    first_file = s3_answers["files"][0][0]
    for name in TABS:
        page = client.get(reverse(f"console:{name}", args=[on_s3.pk]))
        assert page.status_code == 200, (name, page.content.decode()[:300])
        assert "cannot be read" not in page.content.decode()
    assert first_file in client.get(reverse("console:table-files", args=[on_s3.pk])).content.decode()
    assert (
        s3_answers["snapshots"][0]
        in client.get(reverse("console:table-snapshots", args=[on_s3.pk])).content.decode()
    )


def test_the_console_adds_a_path_root_on_s3_syncs_it_and_refuses_a_wrong_secret(
    settings, warehouse, s3_prefix, s3_options, seaweedfs, client_as, admin_user
):
    settings.LAKEWARDEN_ALLOWED_ROOTS = [warehouse, s3_prefix]
    write_delta_s3(f"{s3_prefix}/team/orders", s3_options, commits=1)
    properties = seaweedfs.s3_properties()
    form = {
        "name": "s3-root",
        "kind": CatalogKind.PATH_ROOT,
        "p:path_root:root": s3_prefix,
        "p:path_root:s3.endpoint": properties["s3.endpoint"],
        "p:path_root:s3.access-key-id": properties["s3.access-key-id"],
        "p:path_root:s3.secret-access-key": "typed-wrong-secret",
        "p:path_root:s3.region": "us-east-1",
    }
    client = client_as(admin_user)

    refused = client.post(reverse("console:catalog-create"), form)
    created = client.post(
        reverse("console:catalog-create"), {**form, "p:path_root:s3.secret-access-key": seaweedfs.secret_key}
    )
    catalog = Catalog.objects.get()
    synced = client.post(reverse("console:catalog-sync", args=[catalog.pk]), follow=True)

    assert refused.status_code == 400
    assert s3_prefix in refused.content.decode() and "SIGNATURE_DOES_NOT_MATCH" in refused.content.decode()
    assert "typed-wrong-secret" not in refused.content.decode()
    assert created.status_code == 302
    assert "1 added" in synced.content.decode()
    assert seaweedfs.secret_key not in synced.content.decode()
    assert list(Table.objects.values_list("location", "record_count")) == [(f"{s3_prefix}/team/orders", 10)]
