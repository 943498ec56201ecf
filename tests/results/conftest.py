"""Throwaway Postgres databases for the result storages (the Iceberg SQL catalog, the postgres backend)."""

from __future__ import annotations

import os
import uuid

import pytest

SERVER = "postgresql://lakewarden:lakewarden@127.0.0.1:5432"


@pytest.fixture(scope="session")
def throwaway_database():
    """``throwaway_database(label)`` creates an empty database owned by the lakewarden role and
    returns its DSN; every database made this way is dropped at the end of the run."""
    psycopg = pytest.importorskip("psycopg")
    made: list[str] = []

    def create(label: str) -> str:
        name = f"lakewarden_test_results_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        try:
            with psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.OperationalError as exc:
            pytest.skip(f"Postgres is not reachable at {SERVER}: {exc}")
        made.append(name)
        return f"{SERVER}/{name}"

    yield create
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for name in made:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
