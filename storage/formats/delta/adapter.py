"""``DeltaAdapter``: a folder (or URI) with a ``_delta_log`` opens as a ``DeltaSpecTable``."""

from __future__ import annotations

from typing import Any

from storage.formats.delta._log import DeltaLog, Store
from storage.formats.delta.table import DeltaSpecTable
from storage.io.stores import StoreOptions
from storage.spec.errors import CorruptTable, SpecError
from storage.spec.table import TableFormatAdapter


class DeltaAdapter(TableFormatAdapter):
    """Registered as ``delta``: a folder (or URI) holding a ``_delta_log``."""

    name = "delta"
    looks_for = "a _delta_log folder"

    @classmethod
    def detect(cls, location: str, storage: StoreOptions | None = None) -> bool:
        try:
            store = Store(location, storage)
            return store.exists(store.table_path("_delta_log"), directory=True)
        except Exception:  # detection must answer, never raise: any failure means "not Delta"
            return False

    @classmethod
    def metadata_pointer(cls, location: str, storage: StoreOptions | None = None) -> str | None:
        """The last version in ``_delta_log`` (one listing of the log's names)."""
        return str(DeltaLog(Store(location, storage)).latest)

    @classmethod
    def open(
        cls,
        location_or_identifier: str,
        catalog: Any = None,
        storage: StoreOptions | None = None,
        *,
        version: int | None = None,
    ) -> DeltaSpecTable:
        """Open the table as of its latest version, or as of ``version`` (time travel, e.g. to a
        version older than a protocol upgrade this reader does not support)."""
        try:
            log = DeltaLog(Store(location_or_identifier, storage))
        except SpecError:
            raise
        except (OSError, ValueError) as exc:
            raise CorruptTable(f"Delta table {location_or_identifier} cannot be listed: {exc}") from exc
        if version is not None:
            log.check_version(int(version))
        return DeltaSpecTable(log, version)
