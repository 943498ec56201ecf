"""A plugin's properties in the admin as a form generated from its properties_schema (issue 34:
"a JSON box above a 2,000 px schema dump"), the JSON behind "Advanced"; and the "done when" of
the generated forms: a property added to a factory's schema appears as a field."""

from __future__ import annotations

import pytest
from django.urls import reverse

from processes.models import PluginConfig, Process
from storage import services
from tests.console.forms_html import controls
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db

DEFAULTS = {"min-files": 0, "interval": 3600, "parallelism": 2, "on-new-snapshot": False}


@pytest.fixture
def touch_config(test_plugin):
    from processes.registry import configured_factories

    configured_factories()
    return PluginConfig.objects.get(name="test-touch")


def _change_url(config) -> str:
    return reverse("admin:processes_pluginconfig_change", args=[config.pk])


def _post(client, config, fields: dict[str, str]):
    form = {"name": config.name, "enabled": "on", "priority": "7", "properties-form": "fields", **fields}
    return client.post(_change_url(config), form)


def test_the_admin_shows_a_field_per_property_with_its_stored_value(client_as, admin_user, touch_config):
    touch_config.properties = {**DEFAULTS, "min-files": 4, "on-new-snapshot": True}
    touch_config.save()

    html = client_as(admin_user).get(_change_url(touch_config)).content.decode()
    form = controls(html)

    files = form.controls["p:props:min-files"]
    assert (files["type"], files["value"], files["min"], files["step"]) == ("number", "4", "0", "1")
    assert form.controls["p:props:interval"]["value"] == "3600"
    assert form.controls["p:props:parallelism"]["min"] == "1"
    assert form.controls["p:props:on-new-snapshot"]["type"] == "checkbox"
    assert "checked" in form.controls["p:props:on-new-snapshot"]
    assert form.controls["properties"]["tag"] == "textarea"  # the JSON, behind "Advanced"
    assert "checked" not in form.controls["properties-advanced"]
    assert "Default: 3600." in html and "Default: no." in html


def test_the_saved_properties_are_exactly_what_the_fields_meant(client_as, admin_user, touch_config):
    response = _post(
        client_as(admin_user),
        touch_config,
        {
            "p:props:min-files": "12",
            "p:props:interval": "",  # empty: the default
            "p:props:parallelism": "3",
            "p:props:on-new-snapshot": "true",
            "properties": '{"min-files": 99}',  # the JSON counts only under "Advanced"
        },
    )

    assert response.status_code == 302, response.content.decode()[:3000]
    touch_config.refresh_from_db()
    assert touch_config.properties == {
        "min-files": 12,
        "interval": 3600,
        "parallelism": 3,
        "on-new-snapshot": True,
    }
    assert touch_config.priority == 7


def test_a_bad_value_is_refused_beside_its_field_and_nothing_is_saved(client_as, admin_user, touch_config):
    client = client_as(admin_user)
    before = PluginConfig.objects.values().get(pk=touch_config.pk)

    for value, expected in (("-1", "-1 is less than the minimum of 0"), ("many", "'many' is not a number")):
        response = _post(client, touch_config, {"p:props:min-files": value, "p:props:parallelism": "5"})
        html = response.content.decode()
        assert response.status_code == 200 and "errornote" in html  # the admin shows the form again
        error = html.split('id="plugin-props-min-files-error"', 1)[1].split(">", 1)[1].split("</p>", 1)[0]
        assert error.replace("&#x27;", "'") == expected
        form = controls(html)
        assert (
            form.controls["p:props:min-files"]["value"],
            form.controls["p:props:parallelism"]["value"],
        ) == (
            value,
            "5",
        )
        assert PluginConfig.objects.values().get(pk=touch_config.pk) == before


def test_advanced_json_is_saved_as_written(client_as, admin_user, touch_config):
    response = _post(
        client_as(admin_user),
        touch_config,
        {"properties-advanced": "1", "properties": '{"parallelism": 4}', "p:props:parallelism": "9"},
    )

    assert response.status_code == 302
    touch_config.refresh_from_db()
    assert touch_config.properties == {**DEFAULTS, "parallelism": 4}


def test_a_property_added_to_a_factorys_schema_appears_in_the_forms(
    client_as, admin_user, operator, touch_config, warehouse, monkeypatch
):
    """The "done when" of issue 34: the forms follow the schemas, with no template or form code
    naming a property."""
    from processes.registry import factory_classes

    TouchFactory = factory_classes()["test-touch"]  # the class the plugin's entry point loaded
    properties = TouchFactory.properties_schema
    monkeypatch.setattr(
        TouchFactory,
        "properties_schema",
        {
            **properties,
            "properties": {
                **properties["properties"],
                "marker-size": {"type": "integer", "minimum": 1, "x-unit": "bytes", "description": "how big"},
            },
        },
    )
    params = TouchFactory.params_schema
    monkeypatch.setattr(
        TouchFactory,
        "params_schema",
        {
            **params,
            "properties": {
                **params["properties"],
                "mode": {"enum": ["quick", "slow"], "description": "pace"},
            },
        },
    )

    admin_form = controls(client_as(admin_user).get(_change_url(touch_config)).content.decode())
    table = services.table_register(location=str(write_delta_table(warehouse / "orders", commits=1)))
    run_page = client_as(operator).get(f"/tables/{table.pk}/processes/").content.decode()

    size = admin_form.controls["p:props:marker-size"]
    assert (size["type"], size["min"], size["max"] if "max" in size else None) == ("number", "0.000001", None)
    assert controls(run_page).options["p:touch:mode"] == ["", "quick", "slow"]
    response = client_as(operator).post(
        f"/tables/{table.pk}/processes/run/",
        {"action": "touch", "form": "fields", "p:touch:mode": "slow"},
        HTTP_HX_REQUEST="true",
    )
    assert response.status_code == 204, response.content.decode()[:2000]
    assert Process.objects.get(table=table).params == {"mode": "slow"}
