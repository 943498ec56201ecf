"""How the Spark modules read a setting: Django's settings, else the environment."""

from __future__ import annotations

import os
from typing import Any


def setting(name: str, default: Any = None) -> Any:
    """``name`` from Django's settings (as typed there: a bool, a Path...), else the environment
    variable (a string); ``default`` when unset or empty."""
    try:
        from django.conf import settings

        value = getattr(settings, name)
    except Exception:  # outside Django (a notebook, a Spark executor) or an older settings module
        value = os.environ.get(name)
    return value if value not in (None, "") else default
