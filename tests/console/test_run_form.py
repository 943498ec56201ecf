"""The "Run now" form generated from the factories' params schemas (issue 34, "Forms are raw
JSON"): one field per parameter with its default, limits and unit (sizes in MiB, durations in a
unit picked beside them), the filled fields sent as the params (converted back, checked by the
schema as the JSON is), errors beside their field, the raw JSON behind "Advanced", and rewrite as
the action a table's form starts on."""

from __future__ import annotations

import uuid

import pytest

from console import run_params
from processes.maintenance.delta.vacuum import DeltaVacuumFactory
from processes.models import Process
from storage import services
from tests.console.forms_html import controls as _controls
from tests.console.tables import write_delta_table, write_iceberg_table

pytestmark = pytest.mark.django_db

MIB = 1024 * 1024


@pytest.fixture
def delta_table(warehouse):
    return services.table_register(location=str(write_delta_table(warehouse / "orders", commits=3)))


@pytest.fixture
def iceberg_table(warehouse):
    catalog = services.catalog_create(
        name="lake", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    identifier = f"ns_{uuid.uuid4().hex[:6]}.events"
    write_iceberg_table(services.iceberg_catalog(catalog), identifier, commits=2)
    return services.table_register(catalog=catalog, identifier=identifier)


def _run(client, table, fields: dict[str, str], **extra):
    return client.post(
        f"/tables/{table.pk}/processes/run/",
        {"action": "rewrite", "form": "fields", "params": "{}", **fields},
        HTTP_HX_REQUEST="true",
        **extra,
    )


def test_the_form_has_a_field_per_rewrite_parameter_with_its_default_and_limits(
    client_as, operator, delta_table
):
    page = client_as(operator).get(f"/tables/{delta_table.pk}/processes/").content.decode()
    form = _controls(page)

    size = form.controls["p:rewrite:target-file-size"]
    assert (size["type"], size["placeholder"], size["min"], size["max"], size["step"]) == (
        "number",
        "128",  # 128 MiB, shown in MiB
        "0.0625",  # 65536 bytes
        "16384",  # 16 GiB
        "any",
    )
    assert "Default: 128 MiB." in page and "target-file-size (MiB)" in page
    inputs = form.controls["p:rewrite:min-input-files"]
    assert (inputs["type"], inputs["placeholder"], inputs["min"], inputs["max"], inputs["step"]) == (
        "number",
        "5",
        "2",
        "1000000",
        "1",
    )
    small = form.controls["p:rewrite:min-file-size"]
    assert (small["placeholder"], small["min"], small["max"]) == ("0", "0", "16384")
    assert form.controls["p:rewrite:strategy"]["tag"] == "select"
    assert form.options["p:rewrite:strategy"] == ["", "binpack", "sort", "zorder"]
    assert form.options["p:rewrite:engine"] == ["", "arrow", "spark-sql"]
    assert form.controls["p:rewrite:zorder-columns"]["type"] == "text"  # names, comma-separated
    assert form.controls["p:vacuum:dry-run"]["type"] == "checkbox"
    assert "checked" not in form.controls["p:vacuum:dry-run"]
    assert form.controls["advanced"]["type"] == "checkbox" and "checked" not in form.controls["advanced"]
    assert form.controls["params"]["tag"] == "textarea"  # the raw JSON, behind "Advanced"


def test_a_submitted_form_runs_the_process_with_exactly_the_values_entered(client_as, operator, delta_table):
    response = _run(
        client_as(operator),
        delta_table,
        {
            "p:rewrite:target-file-size": "256",
            "p:rewrite:min-input-files": "3",
            "p:rewrite:strategy": "binpack",
            "p:rewrite:min-file-size": "",  # empty: the default, not sent
            "p:rewrite:engine": "",
            # another action's fields are not this run's
            "p:vacuum:retention-hours": "2",
            "u:vacuum:retention-hours": "days",
        },
    )

    assert response.status_code == 204, response.content.decode()
    process = Process.objects.get(table=delta_table)
    assert process.action == "rewrite"
    assert process.params == {"target-file-size": 256 * MIB, "min-input-files": 3, "strategy": "binpack"}


def test_a_duration_is_entered_in_a_unit_of_time_and_a_checkbox_sends_true(client_as, operator, delta_table):
    response = client_as(operator).post(
        f"/tables/{delta_table.pk}/processes/run/",
        {
            "action": "vacuum",
            "form": "fields",
            "p:vacuum:retention-hours": "14",
            "u:vacuum:retention-hours": "days",
            "p:vacuum:dry-run": "true",
            "p:vacuum:full": "true",  # as rendered: checked, the property's default; not sent
        },
        HTTP_HX_REQUEST="true",
    )

    assert response.status_code == 204, response.content.decode()
    assert Process.objects.get(table=delta_table).params == {"retention-hours": 336, "dry-run": True}


def test_a_value_over_the_maximum_is_refused_beside_its_field_and_nothing_runs(
    client_as, operator, delta_table
):
    response = _run(
        client_as(operator),
        delta_table,
        {"p:rewrite:target-file-size": "20000", "p:rewrite:min-input-files": "3"},
    )

    html = response.content.decode()
    assert response.status_code == 400
    assert response["HX-Retarget"] == "#run-form"
    error = html.split('id="run-rewrite-target-file-size-error"', 1)[1].split("</p>", 1)[0]
    assert "is greater than the maximum of 17179869184" in error and "16384 MiB" in error
    assert 'id="run-rewrite-min-input-files-error"' not in html
    form = _controls(html)
    assert form.controls["p:rewrite:target-file-size"]["value"] == "20000"  # kept as typed
    assert form.controls["p:rewrite:target-file-size"]["aria-invalid"] == "true"
    assert form.controls["p:rewrite:min-input-files"]["value"] == "3"
    assert form.selected["action"] == "rewrite"
    assert not Process.objects.exists()


def test_text_that_is_no_number_is_refused_beside_its_field(client_as, operator, delta_table):
    response = _run(client_as(operator), delta_table, {"p:rewrite:min-input-files": "2.5"})

    assert response.status_code == 400
    error = response.content.decode().split('id="run-rewrite-min-input-files-error"', 1)[1]
    assert error.split("</p>", 1)[0].endswith("2.5 is not a whole number")
    assert not Process.objects.exists()


def test_the_advanced_json_still_runs_and_the_fields_are_ignored_then(client_as, operator, delta_table):
    response = _run(
        client_as(operator),
        delta_table,
        {
            "advanced": "1",
            "params": '{"min-input-files": 2, "engine": "arrow"}',
            "p:rewrite:min-input-files": "9",
        },
    )

    assert response.status_code == 204, response.content.decode()
    assert Process.objects.get(table=delta_table).params == {"min-input-files": 2, "engine": "arrow"}


def test_bad_advanced_json_comes_back_in_the_form(client_as, operator, delta_table):
    response = _run(client_as(operator), delta_table, {"advanced": "1", "params": '{"min-input-files": 1}'})

    html = response.content.decode()
    assert response.status_code == 400
    assert "min-input-files: 1 is less than the minimum of 2" in html
    assert "checked" in _controls(html).controls["advanced"]
    assert not Process.objects.exists()


def test_the_form_starts_on_rewrite_for_iceberg_and_delta_tables(
    client_as, operator, iceberg_table, delta_table
):
    client = client_as(operator)

    for table in (iceberg_table, delta_table):
        form = _controls(client.get(f"/tables/{table.pk}/processes/").content.decode())
        assert form.selected["action"] == "rewrite", table.format
        assert form.options["action"][0] != "rewrite" or table.format == "delta"  # not merely the first


def test_the_default_action_is_the_first_where_the_format_has_no_rewrite():
    forms = [
        run_params.ActionForm(action=a, factory="f", description="", schema={}, defaults={}, fields=[])
        for a in ("expire-snapshots", "clean-orphan-files")
    ]
    assert run_params.default_action(forms) == "expire-snapshots"
    assert run_params.default_action([]) == ""


def test_durations_show_in_a_readable_unit_and_convert_back_to_the_schemas():
    schema = DeltaVacuumFactory.params_schema
    fields = {f.key: f for f in run_params.build_fields("vacuum", schema, {"retention-hours": 168})}

    hours = fields["retention-hours"]
    assert (hours.kind, hours.placeholder, hours.time_unit, hours.default) == (
        "duration",
        "7",
        "days",
        "7 days",
    )
    assert hours.limits == "at most 36500 days"
    post = {"p:vacuum:retention-hours": "90", "u:vacuum:retention-hours": "minutes"}
    assert run_params.params_from_form("vacuum", schema, post, {}) == {"retention-hours": 1.5}
    with pytest.raises(run_params.FormError, match="unknown unit"):
        run_params.params_from_form("vacuum", schema, {**post, "u:vacuum:retention-hours": "weeks"}, {})
