"""Fixtures shared by the object-store tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_env_credentials(monkeypatch):
    """No object-store credentials in the environment (nor the EC2 metadata lookup): whatever
    reaches the store must come from a catalog's or root's own properties."""
    for name in ("ENDPOINT", "ACCESS_KEY_ID", "SECRET_ACCESS_KEY", "SESSION_TOKEN"):
        monkeypatch.delenv(f"LAKEWARDEN_S3_{name}", raising=False)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
