"""Filesystems of the plain layers: local paths and ``file:`` URIs (object stores to come)."""

from __future__ import annotations

from storage.io.paths import PathNotAllowed, is_local, local_path

__all__ = ["PathNotAllowed", "is_local", "local_path"]
