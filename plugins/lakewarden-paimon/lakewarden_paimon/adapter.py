"""``PaimonAdapter``: a folder (or object-store prefix) holding ``schema/schema-N`` files opens as
a ``PaimonSpecTable``."""

from __future__ import annotations

import os
from typing import Any

from lakewarden_paimon import _meta
from lakewarden_paimon._files import Files, pypaimon_options
from lakewarden_paimon.table import PaimonSpecTable
from storage.io import is_local, local_path, normalise
from storage.spec.errors import CorruptTable, TableNotFound
from storage.spec.table import TableFormatAdapter


def _spelling(location: str) -> str:
    """The location as pypaimon opens it: a local path, or the canonical ``s3://`` URI."""
    return os.path.abspath(local_path(location)) if is_local(location) else normalise(location)


class PaimonAdapter(TableFormatAdapter):
    """Registered as ``paimon``: a table folder with a ``schema`` folder of ``schema-N`` files."""

    name = "paimon"
    looks_for = "a Paimon schema folder (schema/schema-N)"

    @classmethod
    def detect(cls, location: str, storage: Any = None) -> bool:
        try:
            files = Files(_spelling(location), storage)
            return any(name.startswith("schema-") for name in files.names(files.child("schema")))
        except Exception:  # detection must answer, never raise: any failure means "not Paimon"
            return False

    @classmethod
    def open(cls, location_or_identifier: str, catalog: Any = None, storage: Any = None) -> PaimonSpecTable:
        location = _spelling(location_or_identifier)
        if not cls.detect(location, storage):
            raise TableNotFound(f"no Paimon table at {location_or_identifier}: found no schema/schema-N file")
        try:
            store = _meta.open_file_store_table(location, pypaimon_options(storage))
        except (OSError, ValueError, KeyError) as exc:
            raise CorruptTable(f"Paimon table {location_or_identifier} cannot be opened: {exc}") from exc
        return PaimonSpecTable(store, location, storage)
