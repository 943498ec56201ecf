"""Start-up checks name a missing service in one line, with how to start it."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from console.preflight import missing_services


def test_running_services_give_no_problem():
    assert missing_services() == []


def test_an_unreachable_postgres_is_named_with_how_to_start_it(settings):
    settings.DATABASES = {"default": {**settings.DATABASES["default"], "PORT": "1"}}

    (problem,) = missing_services()

    assert problem.startswith("PostgreSQL is not reachable at 127.0.0.1:1")
    assert "pg_ctlcluster" in problem


def test_an_unreachable_redis_is_named_by_the_check_command(settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"

    with pytest.raises(CommandError) as refused:
        call_command("lakewarden_check")

    assert str(refused.value).startswith("Redis is not reachable at 127.0.0.1:1")
    assert "\n" not in str(refused.value)
