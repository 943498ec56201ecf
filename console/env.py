"""Typed environment helpers that fail loudly: a bad value stops start-up with the variable named."""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name}={value!r} is not a boolean (use 1/0, true/false, yes/no, on/off)")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} must be at least {minimum}")
    return number


def env_path(name: str, default: str, *, base: Path) -> Path:
    """A filesystem path; relative values are taken from ``base`` (the repository root)."""
    value = env_str(name, default)
    path = Path(value).expanduser()
    return (base / path).resolve() if not path.is_absolute() else path.resolve()


def env_paths(name: str, default: list[Path], *, base: Path) -> list[Path]:
    """A list of folders separated by ``os.pathsep`` (``:``)."""
    value = env_str(name)
    if value is None:
        return default
    paths = []
    for part in value.split(os.pathsep):
        if part.strip():
            path = Path(part.strip()).expanduser()
            paths.append((base / path).resolve() if not path.is_absolute() else path.resolve())
    if not paths:
        raise ImproperlyConfigured(f"{name} is set but names no folder")
    return paths


def env_url(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    value = env_str(name, default)
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}={value!r} must start with one of {', '.join(s + '://' for s in schemes)}"
        )
    return value
