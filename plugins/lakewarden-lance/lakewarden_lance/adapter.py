"""``LanceAdapter``: a folder (or URI) with a ``_versions`` folder of ``*.manifest`` files opens
as a ``LanceSpecTable``."""

from __future__ import annotations

from typing import Any

import pyarrow.fs as pafs

from lakewarden_lance.table import LanceSpecTable
from storage.io import StoreOptions, filesystem, join
from storage.spec.table import TableFormatAdapter


class LanceAdapter(TableFormatAdapter):
    """Registered as ``lance`` in ``lakewarden.table_formats``."""

    name = "lance"
    label = "Lance"  # how the console names the format (read when Lakewarden's adapter API has ``label``)
    looks_for = "a Lance _versions folder"

    @classmethod
    def detect(cls, location: str, storage: StoreOptions | None = None) -> bool:
        try:
            fs, path = filesystem(join(location, "_versions"), storage)
            infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
        except Exception:  # detection must answer, never raise: any failure means "not Lance"
            return False
        return any(info.base_name.endswith(".manifest") for info in infos)

    @classmethod
    def open(
        cls,
        location_or_identifier: str,
        catalog: Any = None,
        storage: StoreOptions | None = None,
        *,
        version: int | None = None,
    ) -> LanceSpecTable:
        """The dataset at its latest version, or at ``version`` (time travel)."""
        return LanceSpecTable(location_or_identifier, storage, version)
