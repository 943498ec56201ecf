"""Iceberg REST catalogs for real (SeaweedFS's built-in catalog): created through the API with
uri, warehouse, credential and s3.* properties, synced, and every API endpoint and console tab of a
REST table answering with the table's real values; a catalog that answers 401, 404 or 500, hangs,
or is not there is refused within bounded time with the uri and the status or error type named
(never the catalog's own text), no secret shown, nothing written; secrets masked in the API, the console and the admin."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
import uuid

import pyarrow as pa
import pytest
from django.urls import reverse

from storage.models import Catalog, CatalogKind, Table
from storage.secrets import MASK

pytestmark = pytest.mark.django_db

CATALOGS = "/api/v1/catalogs/"


def _secrets(seaweedfs) -> list[str]:
    return [seaweedfs.secret_key, f"{seaweedfs.access_key}:{seaweedfs.secret_key}"]


@pytest.fixture
def writer(seaweedfs):
    """pyiceberg's own RestCatalog on the store (the "other engine" writing the tables)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("writer", type="rest", **seaweedfs.rest_catalog_properties())


@pytest.fixture
def rest_table(writer):
    """``ns_<n>.orders``: partitioned by region, three appends of 10 rows (3 snapshots, 6 files)."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    writer.create_namespace(namespace)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "region", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region")
    )
    table = writer.create_table(f"{namespace}.orders", schema=schema, partition_spec=spec)
    for commit in range(3):
        ids = range(commit * 10, commit * 10 + 10)
        table.append(
            pa.table(
                {"id": pa.array(ids, pa.int64()), "region": pa.array([("eu", "us")[i % 2] for i in ids])}
            )
        )
    return table


@pytest.fixture
def registered(seaweedfs, rest_table, api_as, admin_user):
    """The REST catalog created and synced through the API; (catalog id, table row, pyiceberg table)."""
    api = api_as(admin_user)
    created = api.post(
        CATALOGS,
        {
            "name": f"rest-{uuid.uuid4().hex[:6]}",
            "kind": "iceberg_rest",
            "properties": seaweedfs.rest_catalog_properties(),
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    synced = api.post(f"{CATALOGS}{created.json()['id']}/sync/")
    assert synced.status_code == 200, synced.content
    identifier = ".".join(rest_table.name())
    assert identifier in synced.json()["added"]
    return created.json(), Table.objects.get(identifier=identifier), rest_table


def test_a_rest_catalog_is_created_with_its_secrets_masked_everywhere(
    seaweedfs, registered, api_as, admin_user, client_as
):
    catalog, _, _ = registered
    assert catalog["properties"]["credential"] == MASK
    assert catalog["properties"]["s3.secret-access-key"] == MASK
    assert catalog["properties"]["uri"] == seaweedfs.rest_uri
    assert catalog["properties"]["s3.access-key-id"] == seaweedfs.access_key
    pages = [
        api_as(admin_user).get(CATALOGS).content.decode(),
        api_as(admin_user).get(f"{CATALOGS}{catalog['id']}/").content.decode(),
        client_as(admin_user).get(reverse("console:catalog-detail", args=[catalog["id"]])).content.decode(),
        client_as(admin_user).get(f"/admin/storage/catalog/{catalog['id']}/change/").content.decode(),
    ]
    for page in pages:
        assert seaweedfs.rest_uri in page
        for secret in _secrets(seaweedfs):
            assert secret not in page
    stored = Catalog.objects.get(pk=catalog["id"]).properties
    assert stored["credential"] == f"{seaweedfs.access_key}:{seaweedfs.secret_key}"


def test_every_api_read_of_a_rest_table_answers_with_its_real_values(registered, api_as, viewer):
    _, table, iceberg = registered
    api = api_as(viewer)
    base = f"/api/v1/tables/{table.pk}"
    snapshot_ids = [str(s.snapshot_id) for s in iceberg.snapshots()]
    data_files = {task.file.file_path for task in iceberg.scan().plan_files()}
    assert len(data_files) == 6

    detail = api.get(f"{base}/").json()
    assert detail["catalog"] == table.catalog.name and detail["format"] == "iceberg"
    assert detail["location"].startswith("s3://lakehouse/")
    assert (detail["current_instant"], detail["record_count"], detail["file_count"]) == (
        snapshot_ids[-1],
        30,
        6,
    )

    assert [s["id"] for s in api.get(f"{base}/snapshots/").json()] == list(reversed(snapshot_ids))

    files = api.get(f"{base}/files/", {"page_size": 500}).json()
    assert files["instant"]["id"] == snapshot_ids[-1]
    assert {f["path"] for f in files["files"]} == data_files
    assert sum(f["record_count"] for f in files["files"]) == 30
    eu = api.get(f"{base}/files/", {"filter": "region = 'eu'", "at": snapshot_ids[0]}).json()
    assert [f["partition"] for f in eu["files"]] == [{"region": "eu"}]
    stats = eu["files"][0]["stats"]  # eu holds the even ids of the first append
    assert (stats["lower_bounds"]["id"], stats["upper_bounds"]["id"]) == (0, 8)

    partitions = api.get(f"{base}/partitions/").json()
    assert sorted((p["path"], p["file_count"], p["record_count"]) for p in partitions["partitions"]) == [
        ("region=eu", 3, 15),
        ("region=us", 3, 15),
    ]

    splits = api.get(f"{base}/splits/", {"target_size": 1}).json()
    assert splits["summary"]["count"] == 6
    assert {part["path"] for split in splits["splits"] for part in split["parts"]} == data_files

    changes = api.get(f"{base}/changes/", {"from": snapshot_ids[0], "to": snapshot_ids[2]}).json()
    assert changes["to"]["id"] == snapshot_ids[2]
    assert len(changes["files"]) == 4 and {f["kind"] for f in changes["files"]} == {"added"}

    records = api.get(f"{base}/records/", {"key": ["7", "999"], "column": "id"}).json()
    found = {r["key"]: r for r in records["records"]}
    assert found[7]["found"] and found[7]["file_path"] in data_files
    assert not found[999]["found"]


def test_every_console_tab_of_a_rest_table_shows_its_real_values(registered, client_as, viewer):
    _, table, iceberg = registered
    client = client_as(viewer)
    snapshot_ids = [str(s.snapshot_id) for s in iceberg.snapshots()]
    file_name = sorted(task.file.file_path for task in iceberg.scan().plan_files())[0].rsplit("/", 1)[-1]
    expected = {
        "table-detail": ["region", "identity", table.location],
        "table-snapshots": snapshot_ids,
        "table-files": [file_name],
        "table-partitions": ["region=eu", "region=us"],
        "table-splits": [file_name],
        "table-changes": [snapshot_ids[-1]],
        "table-records": ["Records"],
        "table-processes": [table.name],
    }
    for name, texts in expected.items():
        page = client.get(reverse(f"console:{name}", args=[table.pk]), {"page_size": 500})
        assert page.status_code == 200, (name, page.content.decode()[:500])
        body = page.content.decode()
        for text in texts:
            assert text in body, (name, text)
        assert "cannot be read" not in body and "cannot read" not in body, name
    holder = [task.file.file_path for task in iceberg.scan(row_filter="id = 0").plan_files()]
    assert len(holder) == 1
    lookup = client.get(reverse("console:table-records", args=[table.pk]), {"keys": "0", "column": "id"})
    assert lookup.status_code == 200 and holder[0].rsplit("/", 1)[-1] in lookup.content.decode()


# --- catalogs that refuse -------------------------------------------------------------------------


class _Answer500(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's naming)
        body = json.dumps(
            {"error": {"message": "the catalog database is down", "type": "ServerError", "code": 500}}
        )
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def server_500():
    """A real HTTP server on a free port answering every request with 500."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer500)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent_server():
    """A port that accepts connections (the kernel's backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()


@pytest.fixture
def closed_port():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("no-credential", "Unauthorized"),
        ("wrong-credential", "invalid_client"),
        ("not-found", "NotFound"),
        ("server-error", "ServerError: HTTP 500 from"),
        ("silent", "timed out"),
        ("closed-port", "Connection refused"),
    ],
)
def test_a_rest_catalog_that_refuses_is_not_created(
    case, expected, seaweedfs, server_500, silent_server, closed_port, api_as, admin_user
):
    properties = seaweedfs.rest_catalog_properties()
    if case == "no-credential":
        del properties["credential"]
    elif case == "wrong-credential":
        properties["credential"] = "lakewarden:wrong-credential-secret"
    elif case == "not-found":
        properties["uri"] += "/no/such/path"
    elif case == "server-error":
        properties["uri"] = server_500
    elif case == "silent":
        properties.update({"uri": silent_server, "s3.connect-timeout": "1", "s3.request-timeout": "2"})
    elif case == "closed-port":
        properties["uri"] = closed_port
    started = time.monotonic()

    response = api_as(admin_user).post(
        CATALOGS, {"name": "refused", "kind": "iceberg_rest", "properties": properties}, format="json"
    )

    elapsed = time.monotonic() - started
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["field"] == "properties"
    assert properties["uri"] in body["error"] and expected.lower() in body["error"].lower(), body
    assert "the catalog database is down" not in body["error"]  # a status, never the target's text
    for secret in [*_secrets(seaweedfs), "wrong-credential-secret"]:
        assert secret not in response.content.decode()
    assert elapsed < 15, elapsed  # the silent server: one 2 s read timeout, not a hang
    assert Catalog.objects.count() == 0 and Table.objects.count() == 0


def test_a_catalog_that_starts_failing_answers_409_naming_it(
    registered, server_500, api_as, admin_user, client_as, seaweedfs
):
    catalog, table, _ = registered
    row = Catalog.objects.get(pk=catalog["id"])
    row.properties = {**row.properties, "uri": server_500}
    row.save()
    before = Table.objects.filter(catalog=row).count()
    api = api_as(admin_user)

    sync = api.post(f"{CATALOGS}{row.pk}/sync/")
    files = api.get(f"/api/v1/tables/{table.pk}/files/")
    page = client_as(admin_user).get(reverse("console:table-snapshots", args=[table.pk]))
    overview = client_as(admin_user).get(reverse("console:table-detail", args=[table.pk]))
    refreshed = api.post(f"/api/v1/tables/{table.pk}/refresh/")

    assert sync.status_code == 409 and server_500 in sync.json()["error"], sync.content
    assert "HTTP 500 from" in sync.json()["error"]
    assert files.status_code == 409 and table.name in files.json()["error"], files.content
    assert "HTTP 500 from" in files.json()["error"]
    assert page.status_code == 409 and "HTTP 500 from" in page.content.decode()
    assert overview.status_code == 200 and "HTTP 500 from" in overview.content.decode()
    assert refreshed.status_code == 200 and "HTTP 500 from" in refreshed.json()["refresh_error"]
    for answer in (sync, files, page, overview, refreshed):
        for secret in _secrets(seaweedfs):
            assert secret not in answer.content.decode()
    assert Table.objects.filter(catalog=row).count() == before


def test_the_console_form_creates_a_rest_catalog_and_refuses_a_bad_one(seaweedfs, client_as, admin_user):
    properties = seaweedfs.rest_catalog_properties()
    form = {
        "kind": CatalogKind.ICEBERG_REST,
        "p:iceberg_rest:uri": properties["uri"],
        "p:iceberg_rest:warehouse": properties["warehouse"],
        "p:iceberg_rest:credential": properties["credential"],
        "p:iceberg_rest:s3.endpoint": properties["s3.endpoint"],
        "p:iceberg_rest:s3.access-key-id": properties["s3.access-key-id"],
        "p:iceberg_rest:s3.secret-access-key": properties["s3.secret-access-key"],
        "p:iceberg_rest:s3.region": "us-east-1",
    }
    client = client_as(admin_user)

    refused = client.post(
        reverse("console:catalog-create"), {**form, "name": "bad", "p:iceberg_rest:credential": "x:wrong-one"}
    )
    created = client.post(reverse("console:catalog-create"), {**form, "name": "good"})

    assert refused.status_code == 400 and "invalid_client" in refused.content.decode()
    assert (
        "wrong-one" not in refused.content.decode() and seaweedfs.secret_key not in refused.content.decode()
    )
    assert created.status_code == 302
    assert list(Catalog.objects.values_list("name", flat=True)) == ["good"]
    assert Catalog.objects.get().properties["s3.secret-access-key"] == seaweedfs.secret_key


def test_the_admin_refuses_to_add_a_catalog_that_does_not_answer(closed_port, client_as, admin_user):
    answer = client_as(admin_user).post(
        "/admin/storage/catalog/add/",
        {
            "name": "unreachable",
            "kind": CatalogKind.ICEBERG_REST,
            "properties": json.dumps({"uri": closed_port, "token": "admin-typed-token-value"}),
        },
    )

    assert answer.status_code == 200  # the form again, with the error
    body = answer.content.decode()
    assert closed_port in body and "Connection refused" in body
    assert "admin-typed-token-value" not in body
    assert Catalog.objects.count() == 0
