"""Typed environment helpers that fail loudly: a bad value stops start-up with the variable named.

Read by ``console/settings.py`` (and the helpers it calls); they read ``os.environ`` only, never
write it, and never import the settings.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from storage.outbound import parse_networks

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def env_required(name: str, why: str) -> str:
    """A string that must be set (``why``: when, e.g. "when LAKEWARDEN_OIDC_CLIENT_ID is set")."""
    value = env_str(name)
    if value is None:
        raise ImproperlyConfigured(f"{name} must be set {why}")
    return value


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


def env_networks(name: str) -> tuple:
    """Comma-separated IP networks (``10.1.0.0/16,192.0.2.7``); unset is none."""
    try:
        return parse_networks((env_str(name, "") or "").split(","))
    except ValueError as error:
        raise ImproperlyConfigured(f"{name}: {error}") from None


def env_path(name: str, default: str, *, base: Path) -> Path:
    """A filesystem path; relative values are taken from ``base`` (the repository root)."""
    value = env_str(name, default)
    path = Path(value).expanduser()
    return (base / path).resolve() if not path.is_absolute() else path.resolve()


# ``os.pathsep`` separates roots, but not the ``:`` of a URI's ``scheme://``.
_ROOT_SEPARATOR = re.compile(rf"{re.escape(os.pathsep)}(?!//)")


def env_roots(name: str, default: list[Path], *, base: Path) -> list[Path | str]:
    """Folders and object-store URI prefixes (``/lake:s3://lake/prod/``) separated by ``:``.

    Relative folders are taken from ``base`` and every folder is resolved; a URI prefix is kept in its normalised form
    (``s3a://lake/prod/`` -> ``s3://lake/prod``) and refused when its key plays tricks (``..``,
    ``//``, percent-encoded separators) or its scheme is not an object store."""
    value = env_str(name)
    if value is None:
        return list(default)
    roots: list[Path | str] = []
    for part in (p.strip() for p in _ROOT_SEPARATOR.split(value)):
        if not part:
            continue
        if "://" in part and not part.lower().startswith("file:"):
            roots.append(_uri_root(name, part))
            continue
        path = Path(part.removeprefix("file://")).expanduser()
        roots.append((base / path).resolve() if not path.is_absolute() else path.resolve())
    if not roots:
        raise ImproperlyConfigured(f"{name} is set but names no folder")
    return roots


def _uri_root(name: str, value: str) -> str:
    from storage.io.stores import PathNotAllowed, is_object_store, normalise

    try:
        if not is_object_store(value):
            raise PathNotAllowed(f"{value.split('://', 1)[0]}:// is not an object store")
        return normalise(value)
    except PathNotAllowed as error:
        raise ImproperlyConfigured(f"{name}: {value!r} is not a usable root ({error})") from None


def env_url(name: str, default: str, *, schemes: tuple[str, ...]) -> str:
    value = env_str(name, default)
    scheme = value.split("://", 1)[0] if "://" in value else ""
    if scheme not in schemes:
        raise ImproperlyConfigured(
            f"{name}={value!r} must start with one of {', '.join(s + '://' for s in schemes)}"
        )
    return value
