"""Confining user-entered locations to LAKEWARDEN_ALLOWED_ROOTS: local paths after resolving
symlinks and ``..``; object-store URIs on their normalised key (``storage.io.normalise`` refuses
``..``, ``//`` and percent-encoded tricks) against the URI prefixes among the roots."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from storage.io import PathNotAllowed, is_local, is_within, local_path, normalise
from storage.io.guard import OutsideTable, PathGuard

__all__ = [
    "OutsideTable",
    "PathGuard",
    "PathNotAllowed",
    "allowed_roots",
    "confine",
    "local_path",
    "table_guard",
]


def allowed_roots() -> list[str]:
    """The allowed roots as text: resolved folders and normalised URI prefixes."""
    roots = []
    for root in settings.LAKEWARDEN_ALLOWED_ROOTS:
        text = str(root)
        roots.append(str(Path(text).resolve()) if is_local(text) else normalise(text))
    return roots


def confine(location: str) -> Path | str:
    """The resolved local path (a ``Path``), or the normalised object-store URI (a ``str``), when
    it lies inside an allowed root; ``PathNotAllowed`` otherwise."""
    if not location or not location.strip():
        raise PathNotAllowed("no path given")
    if not is_local(location):
        return _confine_uri(location)
    path = local_path(location)
    if not path.is_absolute():
        raise PathNotAllowed(f"{location} is not an absolute path")
    resolved = path.resolve()
    roots = [Path(root) for root in allowed_roots() if is_local(root)]
    if not any(resolved == root or resolved.is_relative_to(root) for root in roots):
        raise PathNotAllowed(f"{location} is outside the allowed roots ({', '.join(allowed_roots())})")
    return resolved


def _confine_uri(location: str) -> str:
    canonical = normalise(location)  # PathNotAllowed for unknown schemes and tricky keys
    roots = [root for root in allowed_roots() if not is_local(root)]
    if not any(is_within(canonical, root) for root in roots):
        raise PathNotAllowed(f"{location} is outside the allowed roots ({', '.join(allowed_roots())})")
    return canonical


def table_guard(table) -> PathGuard:
    """The ``PathGuard`` of a registered table (``storage.io.guard``): its own location, the
    allowed roots, and every other registered table's location."""
    from storage.models import Table

    # Locations are stored normalised (resolved paths, canonical URIs): the tables inside this
    # one are those whose location starts with it (an indexed look-up, not a scan of every table).
    below = Table.objects.filter(location__startswith=table.location.rstrip("/") + "/")
    same = Table.objects.filter(location=table.location).exclude(pk=table.pk)
    others = [*below.values_list("location", flat=True), *same.values_list("location", flat=True)]
    return PathGuard.build(table.location, roots=allowed_roots(), others=others)
