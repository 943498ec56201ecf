"""Every model change has its migration (as the pre-commit hook checks before a commit)."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_no_model_change_is_missing_its_migration():
    out = io.StringIO()
    try:
        call_command("makemigrations", "--check", "--dry-run", stdout=out, stderr=out)
    except SystemExit as missing:  # --check exits 1 when a migration would be made
        pytest.fail(
            f"models changed without a migration:\n{out.getvalue()}" if missing.code else out.getvalue()
        )
