"""``HudiAdapter``: recognises a Hudi table by its ``.hoodie`` folder and opens it."""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow.fs as pafs

from storage.formats.hudi._layout import (
    HOODIE_FOLDER,
    file_type,
    hudi_storage_options,
    open_filesystem,
    read_properties,
)
from storage.formats.hudi.table import HudiSpecTable, hudi_errors
from storage.io.stores import StoreOptions
from storage.spec.errors import NotSupported, SpecError, TableNotFound, UnsupportedFeature
from storage.spec.table import TableFormatAdapter

SUPPORTED_BASE_FORMATS = ("PARQUET",)


class HudiAdapter(TableFormatAdapter):
    """Hudi tables by location (local path or URI hudi-rs and pyarrow can open); no catalogs."""

    name: ClassVar[str] = "hudi"
    looks_for: ClassVar[str] = "a .hoodie folder"

    @classmethod
    def detect(cls, location: str, storage: StoreOptions | None = None) -> bool:
        try:
            filesystem, root, _ = open_filesystem(location, storage)
        except SpecError:
            return False
        return file_type(filesystem, f"{root}/{HOODIE_FOLDER}") == pafs.FileType.Directory

    @classmethod
    def open(
        cls, location_or_identifier: str, catalog: Any = None, storage: StoreOptions | None = None
    ) -> HudiSpecTable:
        if catalog is not None:
            raise NotSupported("hudi", "opening tables through a catalog (give the table's location)")
        filesystem, root, location = open_filesystem(location_or_identifier, storage)
        kind = file_type(filesystem, root)
        if kind == pafs.FileType.NotFound:
            raise TableNotFound(f"no table at {location}: the path does not exist")
        if file_type(filesystem, f"{root}/{HOODIE_FOLDER}") != pafs.FileType.Directory:
            raise TableNotFound(f"no Hudi table at {location}: there is no .hoodie folder")
        properties = read_properties(filesystem, root, location)
        base_format = properties.get("hoodie.table.base.file.format", "PARQUET").upper()
        if base_format not in SUPPORTED_BASE_FORMATS:
            raise UnsupportedFeature(
                f"Hudi table {location}: base file format {base_format} is not supported (hudi-rs reads parquet)"
            )
        import hudi

        with hudi_errors(location, "opening the table"):
            hudi_table = hudi.HudiTable(location, hudi_storage_options(location, storage))
        table = HudiSpecTable(location, properties, hudi_table, storage=storage)
        table.definition  # noqa: B018 - a schema hudi-rs cannot read is a corrupt table: fail on open
        return table
