"""Secrets in the admin are write-only: a catalog's credentials are shown masked and survive an edit
that sends the mask back; API tokens are listed by their first characters only (issue 10, item 6)."""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token

from storage.models import Catalog, CatalogKind
from storage.secrets import MASK

pytestmark = pytest.mark.django_db

SECRETS = {
    "header.Authorization": "Bearer hunter2-bearer",
    "adls.account-key": "adls-account-key-value",
    "gcs.service.account.key": "gcs-key-value",
    "hive.kerberos-keytab": "keytab-bytes",
    "credential": "client:client-secret-value",
}


@pytest.fixture
def catalog():
    return Catalog.objects.create(
        name="rest",
        kind=CatalogKind.ICEBERG_REST,
        properties={"uri": "https://catalog.example/api", "warehouse": "s3://lake/", **SECRETS},
    )


def test_the_admin_catalog_form_shows_no_secret(client_as, admin_user, catalog):
    page = client_as(admin_user).get(f"/admin/storage/catalog/{catalog.pk}/change/")

    assert page.status_code == 200
    body = page.content.decode()
    for secret in SECRETS.values():
        assert secret not in body
    assert MASK in body
    assert "https://catalog.example/api" in body  # what is not secret stays visible


def test_an_edit_sending_the_masks_back_keeps_the_secrets(client_as, admin_user, catalog):
    import json

    shown = {
        "uri": "https://catalog.example/api",
        "warehouse": "s3://lake/v2",
        **dict.fromkeys(SECRETS, MASK),
    }
    answer = client_as(admin_user).post(
        f"/admin/storage/catalog/{catalog.pk}/change/",
        {"name": "rest", "kind": CatalogKind.ICEBERG_REST, "properties": json.dumps(shown)},
    )

    assert answer.status_code == 302, answer.content.decode()[:2000]
    catalog.refresh_from_db()
    assert catalog.properties == {
        "uri": "https://catalog.example/api",
        "warehouse": "s3://lake/v2",
        **SECRETS,
    }


def test_a_new_secret_typed_in_the_admin_replaces_the_old(client_as, admin_user, catalog):
    import json

    shown = {**catalog.properties, **dict.fromkeys(SECRETS, MASK), "credential": "client:rotated"}
    client_as(admin_user).post(
        f"/admin/storage/catalog/{catalog.pk}/change/",
        {"name": "rest", "kind": CatalogKind.ICEBERG_REST, "properties": json.dumps(shown)},
    )

    catalog.refresh_from_db()
    assert catalog.properties["credential"] == "client:rotated"
    assert catalog.properties["adls.account-key"] == SECRETS["adls.account-key"]


def test_the_token_admin_lists_no_whole_token(client_as, admin_user, viewer):
    token = Token.objects.create(user=viewer)

    page = client_as(admin_user).get("/admin/authtoken/tokenproxy/")

    assert page.status_code == 200
    assert token.key not in page.content.decode()
    assert f"{token.key[:4]}{MASK}" in page.content.decode()


@pytest.mark.parametrize("path", ["/api/v1/catalogs/", "/catalogs/"])
def test_viewers_see_no_catalog_secret_in_the_api_or_pages(client_as, viewer, catalog, path):
    url = path if path.startswith("/api") else f"/catalogs/{catalog.pk}/"
    body = client_as(viewer).get(url).content.decode()

    for secret in SECRETS.values():
        assert secret not in body
