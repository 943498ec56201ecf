"""A table's overrides as a form generated from its factories' schemas (issue 34, "per-table
overrides"): a field per property the table's factories read plus ``manual-actions``, the
factory's setting as the default, saved as the table's properties (its other properties kept),
a refused value beside its field with nothing saved, admins only."""

from __future__ import annotations

import pytest

from processes.registry import configured_factories
from processes.runtime import TableRuntime
from processes.scheduler import manual_actions
from storage import services
from storage.models import Table
from tests.console.forms_html import controls
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def orders(warehouse, test_plugin):
    table = services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))
    table.properties = {"owner": "sales"}
    table.save()
    return table


def _url(table) -> str:
    return f"/tables/{table.pk}/overrides/"


def _as_a_browser_sends(client, table, **typed: str) -> dict[str, str]:
    """The form as rendered (checked boxes included), with ``typed`` values (``p:override:...``)."""
    form = controls(client.get(_url(table)).content.decode())
    sent = {
        name: (attrs.get("value") or "")
        for name, attrs in form.controls.items()
        if name.startswith("p:override:") and (attrs.get("type") != "checkbox" or "checked" in attrs)
    }
    sent.update({name: form.selected.get(name, "") for name in form.options if name.startswith("u:")})
    return {**sent, **{f"p:override:{key.replace('_', '-')}": value for key, value in typed.items()}}


def test_the_form_has_the_table_factories_properties_with_their_settings_as_defaults(
    client_as, viewer, orders
):
    html = client_as(viewer).get(_url(orders)).content.decode()
    form = controls(html)

    assert form.controls["p:override:manual-actions"]["type"] == "text"  # names, comma-separated
    files = form.controls["p:override:min-files"]
    assert (files["type"], files["placeholder"], files["min"], files.get("value")) == ("number", "0", "0", "")
    # a key several factories read shows the first one's setting, and names them all
    assert "<b>interval</b>: " in html and "test-touch" in html.split("<b>interval</b>: ", 1)[1].split("<")[0]
    assert form.controls["p:override:on-new-snapshot"]["type"] == "checkbox"
    assert "<b>min-files</b>: test-touch" in html
    assert "disabled" in html.split('class="sf-group"', 1)[1].split(">", 1)[0]  # a viewer reads only
    assert "Save settings" not in html


def test_saved_overrides_are_what_the_form_meant_and_the_factories_see_them(client_as, admin_user, orders):
    client = client_as(admin_user)
    response = client.post(
        _url(orders),
        _as_a_browser_sends(client, orders, manual_actions="touch, vacuum", min_files="5"),
        HTTP_HX_REQUEST="true",
    )

    assert response.status_code == 200 and "Saved." in response.content.decode()
    orders.refresh_from_db()
    assert orders.properties == {"owner": "sales", "manual-actions": ["touch", "vacuum"], "min-files": 5}
    touch = next(c.factory for c in configured_factories() if c.name == "test-touch")
    assert TableRuntime(orders, touch.properties).config == {
        "min-files": 5,
        "interval": 3600,
        "parallelism": 2,
        "on-new-snapshot": False,
    }
    assert manual_actions(orders) == {"touch", "vacuum"}
    assert controls(response.content.decode()).controls["p:override:min-files"]["value"] == "5"

    emptied = client.post(_url(orders), _as_a_browser_sends(client, orders, manual_actions="", min_files=""))
    assert emptied.status_code == 200
    assert Table.objects.get(pk=orders.pk).properties == {"owner": "sales"}  # empty: the factory's again


def test_a_refused_value_is_shown_beside_its_field_and_nothing_is_saved(client_as, admin_user, orders):
    client = client_as(admin_user)

    for value, expected in (("-1", "-1 is less than the minimum of 0"), ("1.5", "1.5 is not a whole number")):
        response = client.post(
            _url(orders), _as_a_browser_sends(client, orders, min_files=value, parallelism="3")
        )
        html = response.content.decode()
        assert response.status_code == 400, value
        assert (
            html.split('id="table-override-min-files-error"', 1)[1].split(">", 1)[1].split("</p>")[0]
            == expected
        )
        assert controls(html).controls["p:override:parallelism"]["value"] == "3"  # kept as typed
        assert Table.objects.get(pk=orders.pk).properties == {"owner": "sales"}


def test_only_admins_change_overrides(client_as, viewer, operator, orders):
    for user in (viewer, operator):
        response = client_as(user).post(_url(orders), {"p:override:min-files": "5"})
        assert response.status_code == 403
    assert Table.objects.get(pk=orders.pk).properties == {"owner": "sales"}
