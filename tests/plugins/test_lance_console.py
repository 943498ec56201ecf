"""A Lance dataset in the console and the API, as any other table: registered by location or found
by a path-root catalog's sync, its pages and API listings answered through the plugin."""

from __future__ import annotations

import pytest
from django.urls import reverse

from storage.models import Table
from tests.plugins.lance_tables import build_demo_dataset, lance

pytestmark = pytest.mark.django_db


@pytest.fixture
def lance_table(warehouse):
    from storage import services

    path = warehouse / "lance" / "clicks"
    build_demo_dataset(str(path), appends=6, rows=20)
    return services.table_register(location=str(path)), path


def test_a_path_root_sync_finds_a_lance_dataset(warehouse):
    from storage import services

    root = warehouse / "lake"
    build_demo_dataset(str(root / "clicks"), appends=3, rows=10)
    catalog = services.catalog_create(name="lake", kind="path_root", properties={"root": str(root)})

    report = services.catalog_sync(catalog=catalog)

    assert not report.failed and report.added == [str(root / "clicks")]
    table = Table.objects.get(location=str(root / "clicks"))
    assert (table.format, table.name) == ("lance", "clicks")
    assert table.record_count == lance.dataset(str(root / "clicks")).count_rows()


def test_the_table_pages_show_versions_fragments_and_the_single_partition(lance_table, viewer, client_as):
    table, path = lance_table
    client = client_as(viewer)
    versions = lance.dataset(str(path)).versions()

    page = client.get(reverse("console:table-detail", args=[table.pk]))
    assert page.status_code == 200
    assert '<span class="badge fmt-lance">Lance</span>' in page.content.decode()
    snapshots = client.get(reverse("console:table-snapshots", args=[table.pk])).content.decode()
    assert "before-cleanup" not in snapshots or "delete" in snapshots
    assert all(str(v["version"]) in snapshots for v in versions)
    files = client.get(reverse("console:table-files", args=[table.pk])).content.decode()
    fragment = lance.dataset(str(path)).get_fragments()[0].metadata.files[0].path
    assert fragment in files
    for name in ("table-partitions", "table-splits", "table-changes"):
        assert client.get(reverse(f"console:{name}", args=[table.pk])).status_code == 200, name


def test_the_api_lists_versions_files_and_changes(lance_table, viewer, api_as):
    table, path = lance_table
    api = api_as(viewer)
    dataset = lance.dataset(str(path))

    snapshots = api.get(f"/api/v1/tables/{table.pk}/snapshots/").json()
    files = api.get(f"/api/v1/tables/{table.pk}/files/").json()
    changes = api.get(f"/api/v1/tables/{table.pk}/changes/?from=1&to={dataset.version}").json()

    listed = snapshots["results"] if isinstance(snapshots, dict) and "results" in snapshots else snapshots
    assert sorted(str(s["id"]) for s in _items(listed)) == sorted(
        str(v["version"]) for v in dataset.versions()
    )
    assert len(_items(files)) == len(dataset.get_fragments())
    assert _items(changes), changes


def _items(answer):
    """The list in an API answer (a page's ``results``/``files``/``changes``, or the list itself)."""
    if isinstance(answer, list):
        return answer
    for key in ("results", "files", "changes", "instants", "snapshots"):
        if isinstance(answer.get(key), list):
            return answer[key]
    raise AssertionError(f"no list in {sorted(answer)}")


def test_the_admin_lists_the_plugins_factories(admin_user, client_as):
    from processes.registry import ensure_plugin_rows

    ensure_plugin_rows()  # what start-up (manage.py lakewarden_plugins) does
    client = client_as(admin_user)

    page = client.get(reverse("admin:processes_pluginconfig_changelist")).content.decode()

    for name in ("lance-rewrite", "lance-expire-snapshots", "lance-optimize-indices"):
        assert name in page, name
    assert "not installed" not in page.split("lance-rewrite", 1)[1].split("</tr>", 1)[0]
