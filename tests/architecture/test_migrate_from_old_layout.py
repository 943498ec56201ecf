"""A database built before Catalog, Table and Query moved apps (console 0004, processes 0003,
storage 0001: the layout of main before "One clear house") migrates to the new layout with every
row where it was: the moves are state-only, no table is renamed, no row rewritten."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

OLD_LAYOUT = [
    ("console", "0004_table_last_maintenance_at"),
    ("processes", "0003_process_processes_p_table_i_6fe7a6_idx"),
    ("storage", "0001_initial"),
]


def _manage(dsn: str, *args: str) -> str:
    env = {**os.environ, "DATABASE_URL": dsn}
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def _seed_old_rows(dsn: str) -> None:
    psycopg = pytest.importorskip("psycopg")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into console_catalog (name, kind, properties, created_at) "
            "values ('lake', 'path_root', '{\"root\": \"/lake\"}', now())"
        )
        catalog_id = conn.execute("select id from console_catalog").fetchone()[0]
        conn.execute(
            "insert into console_table (catalog_id, name, identifier, format, location, properties, "
            "current_instant, file_count, total_bytes, record_count, instant_count, small_file_count, "
            "metrics, refresh_error, registered_at) values "
            "(%s, 'orders', 'demo.orders', 'iceberg', '/lake/orders', '{\"target-file-size\": 1}', '42', "
            "7, 7000, 700, 3, 2, '{\"small_file_count\": 2}', '', now())",
            (catalog_id,),
        )
        table_id = conn.execute("select id from console_table").fetchone()[0]
        conn.execute(
            "insert into processes_process (table_id, action, factory, status, trigger, params, summary, "
            "failure, attempt, max_retries, progress_done, progress_total, progress_message, "
            "cancel_requested, celery_task_id, worker, created_at) values "
            "(%s, 'rewrite', 'iceberg-rewrite', 'SUCCESS', 'manual', '{}', '{\"files\": 3}', '', 1, 3, 3, 3, "
            "'', false, '', '', now())",
            (table_id,),
        )
        conn.execute(
            "insert into processes_tablestate (table_id, key, value, updated_at) "
            "values (%s, 'last-rewrite', '\"2026-11-01\"', now())",
            (table_id,),
        )
        conn.execute(
            "insert into storage_storagebackend (name, type, config, is_default, source, created_at, "
            "last_test_message) values ('cache', 'filesystem', '{\"root\": \"/lake/cache\"}', true, "
            "'console', now(), '')"
        )
        backend_id = conn.execute("select id from storage_storagebackend").fetchone()[0]
        conn.execute(
            "insert into storage_query (sql, cache, backend_id, status, served_from_cache, fingerprint, "
            "row_limit, columns, rows, truncated, error, cancel_requested, celery_task_id, created_at) "
            "values ('select 1 from orders', true, %s, 'SUCCESS', false, 'abc', 1000, '[\"x\"]', "
            "'[[1]]', false, '', false, '', now())",
            (backend_id,),
        )


READ_BACK = """
import json
from django.contrib.contenttypes.models import ContentType
from processes.models import Process, Query, TableState
from storage.models import Catalog, Table
table = Table.objects.select_related("catalog").get()
print(json.dumps({
    "catalog": [Catalog.objects.get().name, Catalog.objects.get().properties],
    "table": [table.name, table.identifier, table.location, table.catalog.name, table.file_count,
              table.total_bytes, table.small_file_count, table.properties, table.metrics],
    "process": list(Process.objects.values_list("table__name", "action", "status", "summary").get()),
    "state": list(TableState.objects.values_list("table__name", "key", "value").get()),
    "query": list(Query.objects.values_list("sql", "backend__name", "rows").get()),
    "content_types": sorted(
        f"{c.app_label}.{c.model}" for c in ContentType.objects.filter(model__in=["table", "catalog", "query"])
    ),
}))
"""


def test_a_database_of_the_old_layout_migrates_with_its_rows_intact(throwaway_database):
    dsn = throwaway_database("layout")
    for app, migration in OLD_LAYOUT:
        _manage(dsn, "migrate", app, migration, "--noinput")
    _seed_old_rows(dsn)

    _manage(dsn, "migrate", "--noinput")
    found = json.loads(_manage(dsn, "shell", "-c", READ_BACK).strip().splitlines()[-1])

    assert found["catalog"] == ["lake", {"root": "/lake"}]
    assert found["table"] == [
        "orders",
        "demo.orders",
        "/lake/orders",
        "lake",
        7,
        7000,
        2,
        {"target-file-size": 1},
        {"small_file_count": 2},
    ]
    assert found["process"] == ["orders", "rewrite", "SUCCESS", {"files": 3}]
    assert found["state"] == ["orders", "last-rewrite", "2026-11-01"]
    assert found["query"] == ["select 1 from orders", "cache", [[1]]]
    # The content types moved with the models (permissions and admin history follow them).
    assert found["content_types"] == ["processes.query", "storage.catalog", "storage.table"]
    assert "No migrations to apply" in _manage(dsn, "migrate", "--noinput")
