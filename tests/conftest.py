"""Shared fixtures: external tables from ../shared/fixtures, the Spark session, users per role."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


def postgres_server_url() -> str:
    """The Postgres server of DATABASE_URL (default: the lakewarden role make test creates), without
    a database name: tests append the throwaway database they create."""
    url = os.environ.get("DATABASE_URL") or "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden"
    return url.rsplit("/", 1)[0]


def shared_fixtures_root() -> Path | None:
    configured = os.environ.get("LAKEWARDEN_FIXTURES")
    root = Path(configured) if configured else REPO_ROOT.parent / "shared" / "fixtures"
    return root if root.is_dir() else None


@pytest.fixture(scope="session")
def throwaway_database():
    """``throwaway_database(label)`` creates an empty database owned by the lakewarden role and
    returns its DSN; every database made this way is dropped at the end of the run."""
    import uuid

    psycopg = pytest.importorskip("psycopg")
    server = postgres_server_url()
    made: list[str] = []

    def create(label: str) -> str:
        name = f"lakewarden_test_{label}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        try:
            with psycopg.connect(f"{server}/postgres", autocommit=True, connect_timeout=3) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
        except psycopg.OperationalError as exc:
            pytest.skip(f"Postgres is not reachable at {server}: {exc}")
        made.append(name)
        return f"{server}/{name}"

    yield create
    if made:
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            for name in made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: The engines of the catalogs ``sql_catalog`` made, all of them (disposed at the end of the
#: run) and those made since the last test ended (their idle connections closed when it ends,
#: ``_iceberg_catalog_pools_closed``; a module-scoped catalog's engine reconnects when next used
#: and keeps that one connection to the end of the run).
_SQL_CATALOG_ENGINES: list = []
_NEW_SQL_CATALOG_ENGINES: list = []


@pytest.fixture(scope="session")
def sql_catalog(throwaway_database):
    """``sql_catalog(name, warehouse, **properties)`` is a pyiceberg ``SqlCatalog`` on the run's one
    throwaway Postgres database of test catalogs (tests never put a catalog on SQLite); the other
    properties (``s3.*``, say) are pyiceberg's. Each call gets a catalog name of its own,
    ``<name>_<8 hex digits>`` (read it from ``.name``): pyiceberg keys its rows by catalog name, so
    no test sees another's namespaces or tables. Session-scoped, so module- and session-scoped
    fixtures may use it too."""
    import uuid

    from pyiceberg.catalog.sql import SqlCatalog

    uri = throwaway_database("catalogs").replace("postgresql://", "postgresql+psycopg2://", 1)

    def make(name: str, warehouse: str, **properties: str) -> SqlCatalog:
        catalog = SqlCatalog(f"{name}_{uuid.uuid4().hex[:8]}", uri=uri, warehouse=warehouse, **properties)
        _SQL_CATALOG_ENGINES.append(catalog.engine)
        _NEW_SQL_CATALOG_ENGINES.append(catalog.engine)
        return catalog

    yield make
    for engine in _SQL_CATALOG_ENGINES:
        engine.dispose()
    _SQL_CATALOG_ENGINES.clear()


@pytest.fixture(scope="session")
def external_tables() -> Path:
    """The folder of tables written by other engines; skips when it is absent (CI always has it)."""
    root = shared_fixtures_root()
    if root is None:
        pytest.skip(
            "external table fixtures not found: set LAKEWARDEN_FIXTURES or put them at ../shared/fixtures"
        )
    return root


@pytest.fixture(scope="session")
def hudi_fixture(external_tables, tmp_path_factory):
    """``hudi_fixture(name)`` unpacks ``hudi/<name>.zip`` once per run and returns the table path."""
    unpacked: dict[str, Path] = {}

    def unpack(name: str) -> Path:
        if name not in unpacked:
            target = tmp_path_factory.mktemp(f"hudi-{name}")
            with zipfile.ZipFile(external_tables / "hudi" / f"{name}.zip") as archive:
                # The archives carry macOS resource forks (__MACOSX/): not part of the table.
                members = [m for m in archive.namelist() if not m.startswith("__MACOSX")]
                archive.extractall(target, members=members)
            tables = [p.parent for p in target.glob("*/.hoodie")] or [target]
            unpacked[name] = tables[0]
        return unpacked[name]

    return unpack


@pytest.fixture(scope="session")
def iceberg_fixture(external_tables, tmp_path_factory):
    """``iceberg_fixture(name)`` copies ``iceberg/<name>`` with its paths relocated; returns the path."""
    relocated: dict[str, Path] = {}
    tool = external_tables.parent / "tools" / "relocate_iceberg.py"

    def relocate(name: str) -> Path:
        if name not in relocated:
            target = tmp_path_factory.mktemp(f"iceberg-{name}") / name
            subprocess.run(
                [sys.executable, str(tool), str(external_tables / "iceberg" / name), str(target)],
                check=True,
                capture_output=True,
            )
            relocated[name] = target
        return relocated[name]

    return relocate


@pytest.fixture(scope="session")
def delta_fixture(external_tables, tmp_path_factory):
    """``delta_fixture(name)`` returns a private copy of ``delta/<name>`` (readers never touch the original)."""
    copied: dict[str, Path] = {}

    def copy(name: str) -> Path:
        if name not in copied:
            target = tmp_path_factory.mktemp(f"delta-{name}") / name
            shutil.copytree(external_tables / "delta" / name, target)
            copied[name] = target
        return copied[name]

    return copy


# --- Django, roles, warehouse, Spark -------------------------------------------------------------


@pytest.fixture
def warehouse(tmp_path, settings) -> Path:
    """A fresh warehouse folder that is the only allowed root for the test."""
    root = tmp_path / "warehouse"
    root.mkdir()
    settings.LAKEWARDEN_WAREHOUSE = root
    # The test store's buckets stay allowed where the test uses the store (seaweedfs_roots).
    settings.LAKEWARDEN_ALLOWED_ROOTS = [
        root,
        *(r for r in settings.LAKEWARDEN_ALLOWED_ROOTS if r in SEAWEEDFS_ROOTS),
    ]
    return root


FAST_PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def fast_passwords(settings):
    """A fast password hasher for the test (the default takes about half a second a password on a
    loaded 2-core machine, and hundreds of tests make users). Only for passwords checked in this
    process: a served child process (gunicorn, workers) knows only the default hashers."""
    settings.PASSWORD_HASHERS = FAST_PASSWORD_HASHERS


def _user_with_role(django_user_model, role: str):
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(username=f"{role}-user", password="correct horse battery")
    # get_or_create: transactional tests flush the groups the migration made.
    user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def viewer(db, django_user_model, fast_passwords):
    return _user_with_role(django_user_model, "viewer")


@pytest.fixture
def operator(db, django_user_model, fast_passwords):
    return _user_with_role(django_user_model, "operator")


@pytest.fixture
def admin_user(db, django_user_model, fast_passwords):
    return _user_with_role(django_user_model, "admin")


@pytest.fixture
def client_as(client):
    """``client_as(user)`` logs the test client in as that user."""

    def login(user):
        client.force_login(user)
        return client

    return login


@pytest.fixture
def api_as():
    """``api_as(user)`` is a DRF API client authenticated as that user (None: anonymous)."""
    from rest_framework.test import APIClient

    def make(user=None):
        api = APIClient()
        if user is not None:
            api.force_authenticate(user)
        return api

    return make


@pytest.fixture(scope="session")
def spark():
    """The one Spark session of the test run (local[2]), stopped at the end."""
    from processes.spark.session import spark_session, stop_spark_session

    session = spark_session(app_name="lakewarden-tests", extra_config={"spark.driver.memory": "1g"})
    yield session
    stop_spark_session()


@pytest.fixture(autouse=True)
def _iceberg_catalog_pools_closed():
    """Each test's Iceberg SQL catalogs (one connection pool per catalog name and warehouse, kept
    for the process's life in storage.catalogs) are closed when the test ends: hundreds of tests
    with catalogs of their own would otherwise hold Postgres's every connection slot. So are the
    idle connections of the catalogs ``sql_catalog`` made during the test (a disposed engine
    still serves the module- and session-scoped ones: it opens a new connection when next used)."""
    yield
    from storage.catalogs import close_iceberg_catalogs

    close_iceberg_catalogs()
    for engine in _NEW_SQL_CATALOG_ENGINES:
        engine.dispose()
    _NEW_SQL_CATALOG_ENGINES.clear()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database, with the Iceberg SQL catalogs' pools closed before it is dropped."""
    yield
    from storage.catalogs import close_iceberg_catalogs
    from storage.services import storages_close

    close_iceberg_catalogs()
    storages_close()


@pytest.fixture(scope="session", autouse=True)
def _audit_trail_flushable():
    """Transactional tests end with Django's flush, one TRUNCATE of every table; the audit trail
    refuses TRUNCATE (console migration 0007), so the flush turns that trigger off around its
    TRUNCATE, in the same transaction (the test role owns the table)."""
    from django.db import transaction
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush
    trigger = "console_auditevent_refuse_truncate"

    def execute_sql_flush(self, sql_list):
        with transaction.atomic(using=self.connection.alias), self.connection.cursor() as cursor:
            cursor.execute("select 1 from pg_trigger where tgname = %s", [trigger])
            guarded = cursor.fetchone() is not None
            if guarded:
                cursor.execute(f"ALTER TABLE console_auditevent DISABLE TRIGGER {trigger}")
            flush(self, sql_list)
            if guarded:
                cursor.execute(f"ALTER TABLE console_auditevent ENABLE TRIGGER {trigger}")

    DatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    DatabaseOperations.execute_sql_flush = flush


PLUGIN_PACKAGES = REPO_ROOT / "tests" / "plugins"


@pytest.fixture
def test_plugin(db, monkeypatch):
    """Installs the third-party test plugin package (tests/plugins) the way an installed package
    is found: its dist-info on sys.path, discovered through its entry points."""
    from processes.registry import rediscover_factories

    monkeypatch.syspath_prepend(str(PLUGIN_PACKAGES))
    rediscover_factories()
    yield
    monkeypatch.undo()
    rediscover_factories()


TEST_BROKER_URL = os.environ.get("LAKEWARDEN_TEST_BROKER_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture(scope="session", autouse=True)
def _private_broker_for_the_test_run():
    """Tasks the tests enqueue go to a Redis database of their own, emptied at the end, so a
    Lakewarden running on this machine never receives them (nor the tests its tasks)."""
    try:
        from django.conf import settings

        from console.celery import app
    except Exception:  # running without Django (-p no:django)
        yield
        return
    settings.CELERY_BROKER_URL = settings.CELERY_RESULT_BACKEND = TEST_BROKER_URL
    app.conf.broker_url = app.conf.result_backend = TEST_BROKER_URL
    yield
    import redis

    redis.Redis.from_url(TEST_BROKER_URL).flushdb()


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory):
    """A real SeaweedFS (S3 + Iceberg REST catalog) on free ports for the whole run, stopped at the
    end. Buckets: ``lake`` (Delta/Hudi/plain objects) and the table bucket ``lakehouse`` (REST)."""
    from devtools.seaweedfs import SeaweedFS

    store = SeaweedFS(tmp_path_factory.mktemp("seaweedfs"), buckets=("lake", "results"))
    store.start()
    yield store
    store.stop()


@pytest.fixture
def s3_options(seaweedfs):
    """StoreOptions for the test SeaweedFS (what a catalog's s3.* properties give)."""
    from storage.io import StoreOptions

    return StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})


@pytest.fixture
def s3_prefix(seaweedfs, request):
    """A fresh ``s3://lake/<test>-<n>`` prefix for one test (left behind: the store is per run)."""
    import uuid

    name = request.node.name.split("[")[0].replace("_", "-")[:40]
    return f"s3://lake/{name}-{uuid.uuid4().hex[:8]}"


#: The test store's buckets, allowed roots in every test that uses the store.
SEAWEEDFS_ROOTS = ("s3://lake", "s3://lakehouse", "s3://results")


@pytest.fixture(autouse=True)
def seaweedfs_roots(request):
    """A test of the object store may maintain its buckets' tables: they join the allowed roots
    (as ``LAKEWARDEN_DEMO_STORAGE=s3 make demo`` adds its prefixes)."""
    if "seaweedfs" not in request.fixturenames:
        yield
        return
    settings = request.getfixturevalue("settings")
    settings.LAKEWARDEN_ALLOWED_ROOTS = [*settings.LAKEWARDEN_ALLOWED_ROOTS, *SEAWEEDFS_ROOTS]
    yield


def upload_folder(seaweedfs, folder: Path, prefix: str) -> str:
    """Copy a local table folder under an ``s3://`` prefix (signed puts, names kept) and return it."""
    filesystem = seaweedfs.filesystem()
    target = prefix.removeprefix("s3://").rstrip("/")
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            relative = path.relative_to(folder).as_posix()
            with filesystem.open_output_stream(f"{target}/{relative}") as out:
                out.write(path.read_bytes())
    return prefix
