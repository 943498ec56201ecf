"""Confining user-entered paths to LAKEWARDEN_ALLOWED_ROOTS, after resolving symlinks and ``..``."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from django.conf import settings


class PathNotAllowed(ValueError):
    pass


def local_path(location: str) -> Path:
    """A local path from a plain path or a ``file://`` URI; other schemes are refused."""
    text = location.strip()
    if "://" in text:
        parsed = urlparse(text)
        if parsed.scheme != "file":
            raise PathNotAllowed(f"only local paths and file:// URIs are supported, not {parsed.scheme}://")
        text = unquote(parsed.path)
    if "\x00" in text:
        raise PathNotAllowed("the path contains a NUL character")
    return Path(text).expanduser()


def confine(location: str) -> Path:
    """The resolved path when it lies inside an allowed root; ``PathNotAllowed`` otherwise."""
    if not location or not location.strip():
        raise PathNotAllowed("no path given")
    path = local_path(location)
    if not path.is_absolute():
        raise PathNotAllowed(f"{location} is not an absolute path")
    resolved = path.resolve()
    roots = [Path(root).resolve() for root in settings.LAKEWARDEN_ALLOWED_ROOTS]
    if not any(resolved == root or resolved.is_relative_to(root) for root in roots):
        allowed = ", ".join(str(r) for r in roots)
        raise PathNotAllowed(f"{location} is outside the allowed roots ({allowed})")
    return resolved
