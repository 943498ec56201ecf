"""Confining user-entered paths to LAKEWARDEN_ALLOWED_ROOTS, after resolving symlinks and ``..``."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from storage.io import PathNotAllowed, local_path

__all__ = ["PathNotAllowed", "confine", "local_path"]


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
