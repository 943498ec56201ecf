"""Start-up checks that turn a missing Postgres or Redis into one clear line instead of a trace."""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from django.conf import settings

HOW_TO_START = {
    "PostgreSQL": "start it with: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start "
    "(or `make services`)",
    "Redis": "start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 (or `make services`)",
    "RabbitMQ": "start it with: rabbitmq-server -detached",
}


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def missing_services() -> list[str]:
    """One line per service that does not answer, naming it, its address and how to start it."""
    problems = []
    database = settings.DATABASES["default"]
    host, port = database.get("HOST") or "127.0.0.1", int(database.get("PORT") or 5432)
    if not _reachable(host, port):
        problems.append(f"PostgreSQL is not reachable at {host}:{port}; {HOW_TO_START['PostgreSQL']}")
    broker = urlparse(settings.CELERY_BROKER_URL)
    name = "RabbitMQ" if broker.scheme == "amqp" else "Redis"
    broker_port = broker.port or (5672 if name == "RabbitMQ" else 6379)
    broker_host = broker.hostname or "127.0.0.1"
    if not _reachable(broker_host, broker_port):
        problems.append(f"{name} is not reachable at {broker_host}:{broker_port}; {HOW_TO_START[name]}")
    return problems
