"""Set-up makes the database the console will use (issue 29, item 20): with DATABASE_URL naming
another database, scripts/setup.sh created the one of the undocumented LAKEWARDEN_DB_NAME and then
`migrate` died with a traceback. Now console/database_url.py (the settings' own reading, run by
set-up with the system's python3) names the role and database, scripts/lib_database.sh makes them,
and contradicting variables stop set-up with one line. The database step runs for real here, on
a throwaway role and database of the test's Postgres."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from console.database_url import database_url

REPO = Path(__file__).resolve().parents[2]


def _run(command: list[str], env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    base = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHON": "python3"}
    return subprocess.run(
        command, cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=timeout
    )


def _settings(env: dict[str, str]) -> dict[str, str]:
    answer = _run(["python3", "console/database_url.py"], env)
    assert answer.returncode == 0, answer.stderr
    return dict(line.split("=", 1) for line in shlex.split(answer.stdout))


def _refusal(env: dict[str, str]) -> str:
    answer = _run(["python3", "console/database_url.py"], env)
    assert answer.returncode == 2 and answer.stdout == "", answer
    assert answer.stderr.count("\n") == 1, answer.stderr  # one line
    return answer.stderr


def test_database_url_names_the_database_the_role_and_the_server():
    found = _settings({"DATABASE_URL": "postgresql://app:s%40cret@db.example.com:6543/other?sslmode=require"})

    assert found == {
        "DB_NAME": "other",
        "DB_USER": "app",
        "DB_PASSWORD": "s@cret",
        "DB_HOST": "db.example.com",
        "DB_PORT": "6543",
        "DB_LOCAL": "0",
        "DB_URL": "postgresql://app:s%40cret@db.example.com:6543/other?sslmode=require",
        "DB_SERVER_URL": "postgresql://app:s%40cret@db.example.com:6543/postgres?sslmode=require",
    }


def test_without_database_url_the_parts_or_their_defaults_make_it_as_the_settings_do():
    assert _settings({})["DB_URL"] == "postgresql://lakewarden:lakewarden@127.0.0.1:5432/lakewarden"
    found = _settings({"LAKEWARDEN_DB_NAME": "lw2", "LAKEWARDEN_DB_PASSWORD": "p w'd@x"})

    assert (found["DB_NAME"], found["DB_USER"], found["DB_PASSWORD"], found["DB_LOCAL"]) == (
        "lw2",
        "lakewarden",
        "p w'd@x",
        "1",
    )
    assert found["DB_URL"] == "postgresql://lakewarden:p%20w%27d%40x@127.0.0.1:5432/lw2"
    assert database_url({"LAKEWARDEN_DB_NAME": "lw2", "LAKEWARDEN_DB_PASSWORD": "p w'd@x"}) == found["DB_URL"]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (
            {"DATABASE_URL": "postgresql://app:pw@127.0.0.1/other", "LAKEWARDEN_DB_NAME": "lakewarden"},
            "LAKEWARDEN_DB_NAME says otherwise than DATABASE_URL, which names the database 'other'",
        ),
        (
            {"DATABASE_URL": "postgresql://app:pw@127.0.0.1/other", "LAKEWARDEN_DB_PASSWORD": "another"},
            "LAKEWARDEN_DB_PASSWORD says otherwise than DATABASE_URL, which names another password",
        ),
        ({"DATABASE_URL": "mysql://app:pw@127.0.0.1/other"}, "DATABASE_URL must be postgresql://"),
        ({"DATABASE_URL": "postgresql://app:pw@127.0.0.1/"}, "DATABASE_URL names no database"),
        ({"DATABASE_URL": "postgresql://127.0.0.1/other"}, "DATABASE_URL names no user"),
    ],
)
def test_a_url_set_up_cannot_use_stops_it_with_one_line_and_no_password(env, expected):
    refusal = _refusal(env)

    assert expected in refusal
    assert ":pw@" not in refusal and "another" not in refusal.replace("another password", "")


# -- the database step, for real ---------------------------------------------------------------


def _superuser(sql: str) -> str:
    answer = subprocess.run(
        ["psql", "postgresql://postgres@127.0.0.1:5432/postgres", "-qtA", "-v", "ON_ERROR_STOP=1", "-c", sql],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.strip()


@pytest.fixture
def throwaway():
    """A database name and a role that do not exist yet; both dropped at the end."""
    if subprocess.run(["psql", "postgresql://postgres@127.0.0.1:5432/postgres", "-c", "select 1"]).returncode:
        pytest.skip("no superuser connection to the local Postgres")
    suffix = uuid.uuid4().hex[:8]
    names = {
        "database": f"lw_setup_{suffix}",
        "role": f"lw_setup_role_{suffix}",
        "owner": f"lw_setup_audit_{suffix}",
    }
    yield names
    _superuser(f'DROP DATABASE IF EXISTS "{names["database"]}" WITH (FORCE)')
    for role in (names["owner"], names["role"]):
        _superuser(f'DROP ROLE IF EXISTS "{role}"')


def _step(script: str, env: dict[str, str], timeout: int = 120) -> subprocess.CompletedProcess:
    return _run(
        ["bash", "-c", f"set -euo pipefail; . scripts/lib_database.sh; database_settings; {script}"],
        env,
        timeout,
    )


def test_set_up_creates_the_role_and_the_database_database_url_names_then_migrates_them(throwaway):
    url = f"postgresql://{throwaway['role']}:pw-{throwaway['role']}@127.0.0.1:5432/{throwaway['database']}"
    env = {"DATABASE_URL": url}

    made = _step("database_ensure", env)
    again = _step("database_ensure", env)
    migrated = _run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], env, timeout=600)
    owned = _step(f"audit_owner {throwaway['owner']}", env)

    assert made.returncode == 0, made.stderr
    assert f"creating the database role {throwaway['role']}" in made.stdout
    assert f"creating the database {throwaway['database']}" in made.stdout
    assert again.returncode == 0 and "creating" not in again.stdout, again
    owner = _superuser(
        f"select pg_get_userbyid(datdba) from pg_database where datname = '{throwaway['database']}'"
    )
    assert owner == throwaway["role"]
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    assert owned.returncode == 0, owned.stderr
    table_owner = subprocess.run(
        ["psql", f"postgresql://postgres@127.0.0.1:5432/{throwaway['database']}", "-qtAc",
         "select tableowner from pg_tables where tablename = 'console_auditevent'"],
        capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    assert table_owner == throwaway["owner"]


def test_a_database_on_another_server_that_is_not_there_stops_set_up_with_what_to_run(throwaway):
    # 127.0.0.2 reaches the same Postgres but is not "this machine" to set-up: it creates no role there.
    env = {"DATABASE_URL": f"postgresql://{throwaway['role']}:pw@127.0.0.2:5432/{throwaway['database']}"}

    stopped = _step("database_ensure", env)

    assert stopped.returncode == 1
    assert stopped.stderr.strip().splitlines()[-1] == (
        f"set-up: cannot create the database {throwaway['database']} on 127.0.0.2:5432 as {throwaway['role']}: "
        f"as an admin there, run CREATE ROLE \"{throwaway['role']}\" LOGIN PASSWORD '...'; "
        f'CREATE DATABASE "{throwaway["database"]}" OWNER "{throwaway["role"]}"; then run set-up again'
    )
    assert _superuser(f"select count(*) from pg_roles where rolname = '{throwaway['role']}'") == "0"
