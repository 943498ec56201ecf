"""Iceberg SQL catalogs share one engine per database (issue 29, item 10): every catalog a web
worker created or synced kept an idle Postgres connection for the process's life (10 catalogs:
11 -> 22 connections); under the API fuzz that took all 100 of the server's. Counted on the real
Postgres, in pg_stat_activity for the test database."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection

from storage import catalogs
from storage.models import Catalog, CatalogKind
from storage.services import catalog_create, catalog_sync

pytestmark = pytest.mark.django_db

CATALOGS = 200
#: What the shared engine may hold beyond the connections there were before (one per engine,
#: a spare for a pre-ping or a concurrent checkout).
MAX_GROWTH = 2


def _connections(database: str | None = None) -> int:
    with connection.cursor() as cursor:
        cursor.execute("select pg_stat_clear_snapshot()")  # else the test's transaction sees its first look
        cursor.execute(
            "select count(*) from pg_stat_activity where datname = coalesce(%s, current_database())",
            [database],
        )
        return cursor.fetchone()[0]


def test_two_hundred_sql_catalogs_created_and_synced_hold_a_bounded_number_of_connections(warehouse):
    catalogs.close_iceberg_catalogs()
    before = _connections()

    made = [
        catalog_create(
            name=f"lake-{number}-{uuid.uuid4().hex[:6]}",
            kind=CatalogKind.ICEBERG_SQL,
            properties={"warehouse": warehouse.as_uri()},
        )
        for number in range(CATALOGS)
    ]
    for catalog in made[:20]:
        catalog_sync(catalog=catalog)
    after = _connections()

    assert Catalog.objects.filter(kind=CatalogKind.ICEBERG_SQL).count() == CATALOGS
    assert after - before <= MAX_GROWTH, f"{before} -> {after} connections for {CATALOGS} catalogs"


def test_catalogs_on_one_database_share_one_engine_and_the_cache_is_bounded(warehouse, settings):
    made = [
        catalogs.iceberg_catalog(
            Catalog(
                name=f"lake-{number}",
                kind=CatalogKind.ICEBERG_SQL,
                properties={"warehouse": warehouse.as_uri()},
            )
        )
        for number in range(catalogs.MAX_CACHED_CATALOGS + 10)
    ]

    assert len({id(catalog.engine) for catalog in made}) == 1
    assert len(catalogs._catalogs) == catalogs.MAX_CACHED_CATALOGS
    made[-1].close()  # a caller closing its catalog leaves the shared engine working
    assert made[0].list_namespaces() is not None


def test_engines_beyond_the_bound_are_disposed_least_recently_used_first(warehouse, throwaway_database):
    uris = [
        throwaway_database("engines").replace("postgresql://", "postgresql+psycopg2://", 1)
        for _ in range(catalogs.MAX_SQL_ENGINES + 1)
    ]
    for number, uri in enumerate(uris):
        catalogs.iceberg_catalog(
            Catalog(
                name=f"lake-{number}",
                kind=CatalogKind.ICEBERG_SQL,
                properties={"uri": uri, "warehouse": warehouse.as_uri()},
            )
        )

    assert [key[0] for key in catalogs._engines] == uris[1:]
    assert _connections(uris[0].rsplit("/", 1)[1]) == 0  # the evicted engine's connection closed
    assert _connections(uris[1].rsplit("/", 1)[1]) == 1
    assert not any(dict(key[1]).get("uri") == uris[0] for key in catalogs._catalogs)
