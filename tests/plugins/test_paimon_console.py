"""With the Paimon plugin installed, the console and the API treat Paimon tables like the built-in
formats: registered with ``format=paimon``, listed by format, badged, and the processes tab says
why compaction is not offered. (Needs the plugin-API change: formats from installed plugins.)"""

from __future__ import annotations

import re

from django.urls import reverse

from tests.plugins._paimon_tables import write_primary_key_table
from tests.plugins.test_paimon_plugin import installed  # noqa: F401 - the fixture


def test_the_api_registers_and_lists_paimon_tables(installed, warehouse, admin_user, api_as):  # noqa: F811
    api = api_as(admin_user)
    location = write_primary_key_table(str(warehouse))
    created = api.post("/api/v1/tables/", {"location": location, "format": "paimon"}, format="json")
    assert created.status_code == 201, created.content
    listed = api.get("/api/v1/tables/", {"format": "paimon"})
    assert listed.status_code == 200
    assert [t["location"] for t in listed.json()["results"]] == [location]
    assert api.get("/api/v1/tables/", {"format": "nosuch"}).status_code == 400


def test_the_processes_tab_offers_expiry_and_says_why_compaction_is_not_offered(
    installed,  # noqa: F811
    warehouse,
    operator,
    client_as,
):
    from storage.services import table_register

    table = table_register(location=write_primary_key_table(str(warehouse)))
    page = client_as(operator).get(reverse("console:table-processes", args=[table.pk]))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'class="badge fmt-paimon"' in html
    offered = re.findall(r'<select name="action" id="run-action">(.*?)</select>', html, re.S)
    actions = re.findall(r'<option value="([^"]+)"( selected)?', offered[0])
    assert sorted(action for action, _ in actions) == ["clean-orphan-files", "expire-snapshots"]
    # no rewrite to start on: the first action listed is the form's default, and only it
    assert [selected for _, selected in actions] == [" selected", ""]
    assert "Not offered: <b>rewrite</b>" in html and "Paimon writer" in html


def test_a_paimon_table_without_the_plugin_is_named(warehouse):
    import pytest

    from storage.spec import TableNotFound, load_table
    from storage.spec.registry import format_adapters

    if "paimon" in format_adapters():
        pytest.skip("the Paimon plugin is installed in this virtualenv")
    location = write_primary_key_table(str(warehouse))
    with pytest.raises(TableNotFound, match="looks like a paimon table: install the lakewarden-paimon"):
        load_table(location)


def test_the_demo_builds_and_registers_the_paimon_table_once(installed, db, warehouse):  # noqa: F811
    from devtools.demo import _build_plugin_formats, _sync
    from storage.models import Table

    catalogs = [c for c in _build_plugin_formats(warehouse, 4, lambda message: None) if "paimon" in c.name]
    location = str(warehouse / "paimon" / "demo.db" / "paimon_orders")
    assert _sync(*catalogs)["registered"] == [location]
    table = Table.objects.get(location=location)
    assert (table.format, table.instant_count, table.record_count) == ("paimon", 5, 260)
    # Its files keep every version of a key until a compaction: no records line drawn from them.
    timeline = table.metrics["timeline"]
    assert len(timeline) == 5 and all(point["records"] is None for point in timeline)
    assert all(point["files"] > 0 for point in timeline)
    from console.charts import timeline_svg

    assert "Not known per snapshot" in timeline_svg(timeline, "records", "Records")
    again = [c for c in _build_plugin_formats(warehouse, 4, lambda message: None) if "paimon" in c.name]
    assert again == catalogs and _sync(*again)["registered"] == []  # kept as it was
    assert Table.objects.filter(location=location).count() == 1
