"""Trash instead of delete: files a maintenance process removes are kept for a retention under
``<table>/.lakewarden-trash/<process id>/`` and can be restored. ``folder`` is plain Python (the
files); ``models`` and ``services`` are the bookkeeping (Django)."""

from __future__ import annotations

from storage.trash.folder import (
    MANIFEST_NAME,
    PRIVATE_FOLDERS,
    STAGING_FOLDER,
    TRASH_FOLDER,
    MoveReport,
    TrashConflict,
    TrashEntry,
    TrashUnavailable,
    batch_location,
    is_private,
    manifest_digest,
    move_to_trash,
    plan_entries,
    prepare_batch,
    purge_batch,
    read_manifest,
    restore_batch,
    write_manifest,
)

__all__ = [
    "MANIFEST_NAME",
    "PRIVATE_FOLDERS",
    "STAGING_FOLDER",
    "TRASH_FOLDER",
    "MoveReport",
    "TrashConflict",
    "TrashEntry",
    "TrashUnavailable",
    "batch_location",
    "is_private",
    "manifest_digest",
    "move_to_trash",
    "plan_entries",
    "prepare_batch",
    "purge_batch",
    "read_manifest",
    "restore_batch",
    "write_manifest",
]
