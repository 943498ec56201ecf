"""Run the test OpenID provider: ``python -m tests.security.sso_support.oidc_provider.serve``.

Creates and migrates its Postgres database, creates the users, groups and the registered client below, then
serves on a free port of 127.0.0.1 and prints ``READY <port>`` once it accepts connections.
Environment: OIDC_PROVIDER_DATABASE_URL (a database of its own, created here if missing), OIDC_PROVIDER_CLIENT_SECRET,
OIDC_PROVIDER_REDIRECT_URI (Lakewarden's callback), OIDC_PROVIDER_PASSWORD (every user's).
"""

from __future__ import annotations

import os
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

CLIENT_ID = "lakewarden"
# username -> the provider groups it belongs to
USERS = {
    "vick": ["lakewarden-viewers", "staff"],
    "olivia": ["lakewarden-viewers", "lakewarden-operators"],
    "adam": ["lakewarden-admins"],
    "nina": ["marketing"],
}


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's name
        sys.stderr.write("provider: " + (format % args) + "\n")


def _rsa_key_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _seed() -> None:
    from django.contrib.auth.models import Group, User
    from oauth2_provider.models import Application

    password = os.environ["OIDC_PROVIDER_PASSWORD"]
    for username, groups in USERS.items():
        user = User.objects.create_user(
            username, email=f"{username}@example.org", password=password, first_name=username.title()
        )
        user.groups.set([Group.objects.get_or_create(name=name)[0] for name in groups])
    Application.objects.create(
        name="Lakewarden",
        client_id=CLIENT_ID,
        client_secret=os.environ["OIDC_PROVIDER_CLIENT_SECRET"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=os.environ["OIDC_PROVIDER_REDIRECT_URI"],
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )


def _maintenance_connection(url: str):
    """An autocommit connection to the server's ``postgres`` database and the provider's db name."""
    import dj_database_url
    import psycopg

    config = dj_database_url.parse(url)
    connection = psycopg.connect(
        dbname="postgres",
        host=config["HOST"] or None,
        port=config["PORT"] or None,
        user=config["USER"] or None,
        password=config["PASSWORD"] or None,
        autocommit=True,
    )
    return connection, config["NAME"]


def create_database(url: str) -> None:
    from psycopg import sql

    connection, name = _maintenance_connection(url)
    with connection:
        exists = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def drop_database(url: str) -> None:
    from psycopg import sql

    connection, name = _maintenance_connection(url)
    with connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.security.sso_support.oidc_provider.settings")
    os.environ.setdefault("OIDC_PROVIDER_RSA_KEY", _rsa_key_pem())
    import django
    from django.core.management import call_command
    from django.core.wsgi import get_wsgi_application

    create_database(os.environ["OIDC_PROVIDER_DATABASE_URL"])
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    _seed()
    server = make_server(
        "127.0.0.1", 0, get_wsgi_application(), server_class=_ThreadingServer, handler_class=_QuietHandler
    )
    print(f"READY {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
