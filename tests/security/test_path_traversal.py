"""Paths a user enters are confined to LAKEWARDEN_ALLOWED_ROOTS after resolving symlinks and ``..``,
whatever their spelling: the service, the API and the console form all refuse them and store nothing.

Each attack points at a real, readable Delta table just outside the allowed root, so a confinement
that let it through would register it (the test would see a row), not fail for another reason.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.urls import reverse

from storage import services
from storage.errors import InvalidInput
from storage.models import Catalog, Table
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def outside(tmp_path, warehouse) -> Path:
    """A real Delta table next to the warehouse (outside the only allowed root), and symlinks to it
    (and to /etc) planted inside the warehouse."""
    table = write_delta_table(tmp_path / "secret_table", commits=1)
    (warehouse / "link_to_secret").symlink_to(table, target_is_directory=True)
    (warehouse / "link_to_etc").symlink_to("/etc", target_is_directory=True)
    (warehouse / "nested").mkdir()
    (warehouse / "nested" / "up").symlink_to("../..", target_is_directory=True)
    return table


def attacks(warehouse: Path, outside: Path) -> dict[str, str]:
    """Spellings of "the table outside the warehouse" (or of somewhere else outside it)."""
    w, name = str(warehouse), outside.name
    return {
        "dot-dot": f"{w}/../{name}",
        "dot-dot-deep": f"{w}/nested/../../{name}",
        "dot-dot-to-root": f"{w}/../../../../../../../../etc",
        "relative": f"../{name}",
        "home": "~",
        "symlink-to-table": f"{w}/link_to_secret",
        "symlink-to-etc": f"{w}/link_to_etc",
        "symlink-in-the-middle": f"{w}/nested/up/{name}",
        "file-uri-dot-dot": f"file://{w}/../{name}",
        "file-uri-encoded-dots": f"file://{w}/%2e%2e/{name}",
        "file-uri-encoded-upper": f"file://{w}/%2E%2E/{name}",
        "file-uri-encoded-slashes": f"file://{w}%2F..%2F{name}",
        "file-uri-encoded-everything": "file://" + "".join(f"%{b:02x}" for b in f"{w}/../{name}".encode()),
        "file-uri-with-host": f"file://localhost{w}/../{name}",
        "file-uri-symlink": f"file://{w}/link_to_secret",
        "double-encoded": f"file://{w}/%252e%252e/{name}",
        "encoded-plain-path": f"{w}/%2e%2e/{name}",
        "encoded-slash-plain-path": f"{w}%2F..%2F{name}",
        "nul-byte": f"{w}/orders\x00/../../{name}",
        "nul-byte-encoded": f"file://{w}/x%00/../../{name}",
        "other-scheme": f"s3://bucket/{name}",
        "http": f"http://127.0.0.1/{name}",
        "empty": "   ",
    }


ATTACK_NAMES = list(attacks(Path("/w"), Path("/t")))


@pytest.mark.parametrize("attack", ATTACK_NAMES)
def test_the_service_refuses_paths_outside_the_allowed_roots(attack, warehouse, outside):
    location = attacks(warehouse, outside)[attack]

    with pytest.raises(InvalidInput) as refused:
        services.table_register(location=location)

    assert refused.value.field == "location"
    assert Table.objects.count() == 0


@pytest.mark.parametrize("attack", ATTACK_NAMES)
def test_the_api_refuses_paths_outside_the_allowed_roots(attack, warehouse, outside, api_as, admin_user):
    location = attacks(warehouse, outside)[attack]

    response = api_as(admin_user).post("/api/v1/tables/", {"location": location}, format="json")

    assert response.status_code == 400, response.content
    assert response.json()["field"] == "location"
    assert Table.objects.count() == 0


@pytest.mark.parametrize("attack", ATTACK_NAMES)
def test_the_console_form_refuses_paths_outside_the_allowed_roots(
    attack, warehouse, outside, client_as, admin_user
):
    location = attacks(warehouse, outside)[attack]

    response = client_as(admin_user).post(
        reverse("console:table-register"), {"location": location, "format": ""}
    )

    assert response.status_code == 400
    assert Table.objects.count() == 0


def test_the_refusal_says_the_path_is_outside_the_allowed_roots(warehouse, outside, api_as, admin_user):
    response = api_as(admin_user).post(
        "/api/v1/tables/", {"location": f"{warehouse}/link_to_secret"}, format="json"
    )

    assert "outside the allowed roots" in response.json()["error"]
    assert str(warehouse) in response.json()["error"]


def test_the_same_table_inside_the_root_is_accepted(warehouse, outside):
    """The control: the attacks fail because of where they point, not because the table is bad."""
    inside = write_delta_table(warehouse / "inside", commits=1)

    table = services.table_register(location=f"file://{inside.parent}/./nested/../{inside.name}")

    assert table.location == str(inside.resolve())


def test_a_symlink_that_stays_inside_the_root_is_accepted_at_its_real_location(warehouse, outside):
    inside = write_delta_table(warehouse / "real", commits=1)
    (warehouse / "alias").symlink_to(inside, target_is_directory=True)

    table = services.table_register(location=str(warehouse / "alias"))

    assert table.location == str(inside)


def test_a_symlink_swapped_after_registration_is_not_followed_out_by_a_second_registration(
    warehouse, outside
):
    """Registering stores the resolved path; re-pointing the link later cannot smuggle in the
    outside table under the link's name."""
    inside = write_delta_table(warehouse / "real", commits=1)
    link = warehouse / "swap"
    link.symlink_to(inside, target_is_directory=True)
    services.table_register(location=str(link))
    link.unlink()
    link.symlink_to(outside, target_is_directory=True)

    with pytest.raises(InvalidInput):
        services.table_register(location=str(link))

    assert list(Table.objects.values_list("location", flat=True)) == [str(inside)]


@pytest.mark.parametrize(
    "attack", ["dot-dot", "symlink-to-etc", "file-uri-encoded-dots", "nul-byte-encoded", "home"]
)
def test_a_path_root_catalog_is_confined_like_a_table(attack, warehouse, outside, api_as, admin_user):
    root = attacks(warehouse, outside)[attack]

    response = api_as(admin_user).post(
        "/api/v1/catalogs/",
        {"name": "escape", "kind": "path_root", "properties": {"root": root}},
        format="json",
    )

    assert response.status_code == 400, response.content
    assert response.json()["field"] == "root"
    assert Catalog.objects.count() == 0


def test_the_allowed_roots_are_themselves_resolved(tmp_path, settings):
    """A root configured through a symlink still confines to its real folder."""
    real = tmp_path / "real-root"
    real.mkdir()
    (tmp_path / "root-link").symlink_to(real, target_is_directory=True)
    settings.LAKEWARDEN_ALLOWED_ROOTS = [tmp_path / "root-link"]
    table = write_delta_table(real / "t", commits=1)
    escape = write_delta_table(tmp_path / "escape", commits=1)

    assert services.table_register(location=str(tmp_path / "root-link" / "t")).location == str(table)
    with pytest.raises(InvalidInput):
        services.table_register(location=str(tmp_path / "root-link" / ".." / escape.name))
    assert os.path.isdir(escape)
