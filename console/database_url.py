"""The database Lakewarden uses, from the environment: ``DATABASE_URL``, or when it is unset
``postgresql://$LAKEWARDEN_DB_USER:$LAKEWARDEN_DB_PASSWORD@127.0.0.1:5432/$LAKEWARDEN_DB_NAME``
(each ``lakewarden`` by default).

Standard library only: console/settings.py reads ``database_url()``, and scripts/setup.sh runs this
file with the system's python3 (before the virtualenv exists) to learn which role and database to
create, so set-up makes the very database the console then connects to::

    python3 console/database_url.py    # DB_NAME=... lines for the shell, or one line and exit 2

Set together, ``DATABASE_URL`` and a ``LAKEWARDEN_DB_*`` that says otherwise are refused (one line
naming both): the console would use the URL and set-up would be asked for something else.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 5432
#: The parts of the default URL, and the name each has when its variable is unset.
PART_DEFAULTS = {
    "LAKEWARDEN_DB_NAME": "lakewarden",
    "LAKEWARDEN_DB_USER": "lakewarden",
    "LAKEWARDEN_DB_PASSWORD": "lakewarden",
}
#: Hosts set-up may administer itself (it starts and configures the Postgres on this machine).
LOCAL_HOSTS = frozenset({"", "127.0.0.1", "localhost", "::1"})


@dataclass(frozen=True)
class DatabaseTarget:
    """What set-up needs to make sure the database exists (the password is never printed but here)."""

    url: str
    name: str
    user: str
    password: str
    host: str
    port: int

    @property
    def local(self) -> bool:
        return self.host in LOCAL_HOSTS

    @property
    def server_url(self) -> str:
        """The same server and credentials on the ``postgres`` database (to create this one)."""
        parts = urlsplit(self.url)
        return urlunsplit((parts.scheme, parts.netloc, "/postgres", parts.query, ""))


def _part(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name) or PART_DEFAULTS[name]


def database_url(environ: Mapping[str, str] = os.environ) -> str:
    """``DATABASE_URL``, else the URL the ``LAKEWARDEN_DB_*`` parts (or their defaults) make."""
    if environ.get("DATABASE_URL"):
        return environ["DATABASE_URL"]
    user = quote(_part(environ, "LAKEWARDEN_DB_USER"), safe="")
    password = quote(_part(environ, "LAKEWARDEN_DB_PASSWORD"), safe="")
    name = quote(_part(environ, "LAKEWARDEN_DB_NAME"), safe="")
    return f"postgresql://{user}:{password}@{DEFAULT_HOST}:{DEFAULT_PORT}/{name}"


def database_target(environ: Mapping[str, str] = os.environ) -> DatabaseTarget:
    """The database, role and server the URL names; ValueError (one line, no password) when the URL
    cannot be used or a ``LAKEWARDEN_DB_*`` contradicts ``DATABASE_URL``."""
    url = database_url(environ)
    parts = urlsplit(url)
    shown = _without_password(url)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError(f"DATABASE_URL must be postgresql://user:password@host:port/database, not {shown}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise ValueError(f"DATABASE_URL has a bad port: {shown}") from None
    target = DatabaseTarget(
        url=url,
        name=unquote(parts.path[1:] if parts.path.startswith("/") else parts.path),
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        host=parts.hostname or "",
        port=port,
    )
    if not target.name or "/" in target.name:
        raise ValueError(
            f"DATABASE_URL names no database (postgresql://user:password@host:port/database): {shown}"
        )
    if not target.user:
        raise ValueError(
            f"DATABASE_URL names no user (postgresql://user:password@host:port/database): {shown}"
        )
    if environ.get("DATABASE_URL"):
        for variable, value, what in (
            ("LAKEWARDEN_DB_NAME", target.name, "the database"),
            ("LAKEWARDEN_DB_USER", target.user, "the user"),
            ("LAKEWARDEN_DB_PASSWORD", target.password, "a password"),
        ):
            given = environ.get(variable)
            if given and given != value:
                named = f"{what} {value!r}" if variable != "LAKEWARDEN_DB_PASSWORD" else "another password"
                raise ValueError(
                    f"{variable} says otherwise than DATABASE_URL, which names {named}: the console uses "
                    f"DATABASE_URL; unset {variable} or make the two agree"
                )
    return target


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def shell_assignments(target: DatabaseTarget) -> str:
    """``NAME=value`` lines for set-up's shell (each value quoted for it)."""
    values = {
        "DB_NAME": target.name,
        "DB_USER": target.user,
        "DB_PASSWORD": target.password,
        "DB_HOST": target.host,
        "DB_PORT": str(target.port),
        "DB_LOCAL": "1" if target.local else "0",
        "DB_URL": target.url,
        "DB_SERVER_URL": target.server_url,
    }
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items())


if __name__ == "__main__":
    try:
        sys.stdout.write(shell_assignments(database_target()))
    except ValueError as error:
        print(f"set-up: {error}", file=sys.stderr)
        sys.exit(2)
