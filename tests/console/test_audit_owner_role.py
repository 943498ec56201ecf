"""The audit trail against its own database role (issue 29, item 14): TRUNCATE is refused by a
trigger, and once scripts/audit_owner.sql (what scripts/setup.sh runs for
LAKEWARDEN_AUDIT_OWNER_ROLE) gives the table and the public schema to another role, the
application's role can no longer disable the triggers, drop them, replace their functions, drop
the table or its schema, or truncate; it still writes rows, clears a deleted user's id and makes
tables of its own. Against the real Postgres: the script runs through psql as a
superuser, the refusals come back on the application's own connection."""

from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction

from console.audit.models import AuditEvent

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "audit_owner.sql"


def _refused(sql: str) -> str:
    """The error Postgres answers the application's role for ``sql`` (a savepoint keeps the test's
    transaction usable)."""
    with pytest.raises(DatabaseError) as refused, transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(sql)
    return str(refused.value)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "sql",
    [
        "TRUNCATE console_auditevent",
        "TRUNCATE auth_user CASCADE",
        "TRUNCATE console_auditevent RESTART IDENTITY",
    ],
)
def test_truncating_the_audit_trail_is_refused(sql):
    AuditEvent.objects.create(action="test.kept")
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # else TRUNCATE stops at the pending FK check

    assert "audit events are append-only: TRUNCATE refused" in _refused(sql)
    assert AuditEvent.objects.filter(action="test.kept").exists()


def _superuser_dsn() -> str:
    user = os.environ.get("PGADMINUSER", "postgres")
    settings = connection.settings_dict
    return (
        f"postgresql://{user}@{settings['HOST'] or '127.0.0.1'}:{settings['PORT'] or 5432}/{settings['NAME']}"
    )


def _as_superuser(*args: str, sql: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["psql", _superuser_dsn(), "-v", "ON_ERROR_STOP=1", "-qtA", *args],
        input=sql,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def audit_owner():
    """A role made for this test that owns the audit trail through scripts/audit_owner.sql; at the
    end the application's role owns everything again and the role is dropped."""
    if _as_superuser("-c", "select 1").returncode != 0:
        pytest.skip("no superuser connection to the test database (PGADMINUSER)")
    owner = f"lw_audit_owner_{uuid.uuid4().hex[:8]}"
    app_role = connection.settings_dict["USER"]
    made = _as_superuser("-v", f"owner={owner}", "-v", f"app_role={app_role}", "-f", str(SCRIPT))
    assert made.returncode == 0, made.stderr
    yield owner
    connection.close()  # no lock of the app's connection in the way of the hand-back
    back = _as_superuser(
        sql=f'REASSIGN OWNED BY "{owner}" TO "{app_role}"; DROP OWNED BY "{owner}"; DROP ROLE "{owner}";'
    )
    assert back.returncode == 0, back.stderr


@pytest.mark.django_db(transaction=True)
def test_with_an_owner_role_the_application_role_cannot_disable_or_bypass_the_audit_triggers(audit_owner):
    for sql in (
        "ALTER TABLE console_auditevent DISABLE TRIGGER console_auditevent_append_only",
        "ALTER TABLE console_auditevent DISABLE TRIGGER ALL",
        "DROP TRIGGER console_auditevent_refuse_truncate ON console_auditevent",
        "ALTER TABLE console_auditevent OWNER TO CURRENT_USER",
        "CREATE OR REPLACE FUNCTION console_auditevent_append_only() RETURNS trigger"
        " AS $$ BEGIN RETURN NEW; END $$ LANGUAGE plpgsql",
        "DROP TABLE console_auditevent",
        "DROP SCHEMA public CASCADE",
        "ALTER SCHEMA public RENAME TO elsewhere",
    ):
        assert "must be owner" in _refused(sql), sql
    for sql in (
        "TRUNCATE console_auditevent",
        "DELETE FROM console_auditevent",
        "UPDATE console_auditevent SET action = 'x'",
    ):
        assert "permission denied for table console_auditevent" in _refused(sql), sql
    AuditEvent.objects.create(action="test.row")
    # user_id may be updated (to NULL, for a deleted user): the trigger still refuses anything else
    assert "append-only: UPDATE refused" in _refused("UPDATE console_auditevent SET user_id = -1")


@pytest.mark.django_db(transaction=True)
def test_with_an_owner_role_the_application_still_records_and_clears_deleted_users(audit_owner):
    user = get_user_model().objects.create_user("leaving", password="x")
    AuditEvent.objects.create(action="test.recorded", user=user, username=user.username)

    user.delete()  # Django sets the event's user_id to NULL: the one update the trigger allows

    event = AuditEvent.objects.get(action="test.recorded")
    assert (event.user_id, event.username) == (None, "leaving")
    with connection.cursor() as cursor:
        cursor.execute("select tableowner from pg_tables where tablename = 'console_auditevent'")
        assert cursor.fetchone()[0] == audit_owner
        cursor.execute("CREATE TABLE lakewarden_owner_test (id int)")  # a migration's new table
        cursor.execute("DROP TABLE lakewarden_owner_test")


def test_the_script_refuses_an_application_role_that_is_a_member_of_the_owner(db):
    if _as_superuser("-c", "select 1").returncode != 0:
        pytest.skip("no superuser connection to the test database (PGADMINUSER)")
    owner = f"lw_audit_owner_{uuid.uuid4().hex[:8]}"
    app_role = connection.settings_dict["USER"]
    try:
        assert (
            _as_superuser(sql=f'CREATE ROLE "{owner}" NOLOGIN; GRANT "{owner}" TO "{app_role}";').returncode
            == 0
        )
        refused = _as_superuser("-v", f"owner={owner}", "-v", f"app_role={app_role}", "-f", str(SCRIPT))
    finally:
        _as_superuser(sql=f'DROP ROLE IF EXISTS "{owner}";')
    assert refused.returncode != 0
    assert f"is a member of {owner}: it could still alter the audit trail" in refused.stderr
