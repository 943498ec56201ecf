"""Secrets never reach the logs: values of keys named like password/secret/token/credential/dsn,
passwords in DSNs and URLs, and auth headers are masked by the filter LOGGING installs."""

from __future__ import annotations

import io
import logging

import pytest

from console.security import SecretMaskingFilter
from storage.secrets import MASK
from storage.secrets import mask_text as mask_secrets_in_text

logger = logging.getLogger("console.tests.secrets")


@pytest.fixture
def logged(caplog):
    """``logged(message, *args, **kwargs)`` logs a warning and returns what the handlers saw."""

    def log(message, *args, **kwargs) -> str:
        caplog.clear()
        logger.warning(message, *args, **kwargs)
        return caplog.text

    return log


def test_the_filter_is_on_every_configured_handler():
    handlers = logging.getLogger().handlers
    configured = [h for h in handlers if type(h).__module__.startswith("logging")]

    assert configured, "LOGGING configures no handler on the root logger"
    for handler in configured:
        assert any(isinstance(f, SecretMaskingFilter) for f in handler.filters), handler


@pytest.mark.parametrize(
    ("message", "args", "secret"),
    [
        ("connecting with password=%s", ("hunter2-pass",), "hunter2-pass"),
        ("catalog properties: %s", ({"uri": "http://rest:8181", "token": "tok-abc-123"},), "tok-abc-123"),
        ("catalog properties: %s", ({"credential": "client:s3cr3t"},), "s3cr3t"),
        ("storage config %s", ({"aws_secret_access_key": "AKIAXXSECRET"},), "AKIAXXSECRET"),
        ('json body {"password": "pa ss word"}', (), "pa ss word"),
        ("opening %s", ("postgresql://lake:pg-pass-9@db:5432/lake",), "pg-pass-9"),
        ("broker at redis://:redis-pass-7@127.0.0.1:6379/0 is down", (), "redis-pass-7"),
        ("DSN=%s", ("host=db user=lake password=kv-pass-3 dbname=lake",), "kv-pass-3"),
        ("dsn: %s", ("https://key123@sentry.example.com/4",), "key123"),
        ("header Authorization: Token 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b", (), "9944b091"),
        ("header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload", (), "eyJhbGci"),
        ("SECRET_KEY='django-insecure-abc' loaded", (), "django-insecure-abc"),
        ("%(who)s used api_key=%(key)s", ({"who": "ada", "key": "k-777-k"},), "k-777-k"),
    ],
)
def test_secrets_in_messages_are_masked(logged, message, args, secret):
    text = logged(message, *args)

    assert secret not in text
    assert MASK in text


def test_the_rest_of_the_message_is_kept(logged):
    text = logged("table %s: %d files, tokens: none, password=%s", "orders", 12, "pw-1")

    assert "table orders: 12 files" in text
    assert "password=" + MASK in text
    assert "pw-1" not in text


@pytest.mark.parametrize(
    "message",
    [
        "compacted 120 files of demo.orders into 3",
        "sqlglot.errors.TokenError: Error tokenizing 'select'",
        "PasswordResetWarning: expires soon",
        "tokens processed: 5",
    ],
)
def test_ordinary_messages_pass_unchanged(logged, message):
    text = logged(message)

    assert message in text
    assert MASK not in text


def test_secrets_in_exception_text_are_masked(logged, caplog):
    try:
        raise ConnectionError("could not connect to postgresql://lake:exc-pass-5@db/lake")
    except ConnectionError:
        caplog.clear()
        logger.exception("catalog failed")

    assert "exc-pass-5" not in caplog.text
    assert "ConnectionError" in caplog.text


def test_extra_attributes_named_like_secrets_are_masked(caplog):
    logger.warning("storage registered", extra={"storage_password": "extra-pass-1", "storage": "scratch"})

    record = caplog.records[-1]
    assert record.storage_password == MASK
    assert record.storage == "scratch"


def test_the_configured_handler_writes_masked_lines():
    """What reaches the console stream itself, through the handler LOGGING made."""
    handler = next(
        h for h in logging.getLogger().handlers if any(isinstance(f, SecretMaskingFilter) for f in h.filters)
    )
    stream = io.StringIO()
    previous = handler.setStream(stream)
    try:
        logger.warning("retrying with credential=%s", "stream-secret-8")
    finally:
        handler.setStream(previous)

    assert "stream-secret-8" not in stream.getvalue()
    assert f"credential={MASK}" in stream.getvalue()


def test_mask_text_handles_quotes_and_separators():
    assert mask_secrets_in_text("{'password': 'a,b;c'}") == f"{{'password': '{MASK}'}}"
    assert mask_secrets_in_text("token=abc&page=2") == f"token={MASK}&page=2"
    assert mask_secrets_in_text("postgresql://u:p%40ss@h/db") == f"postgresql://u:{MASK}@h/db"
