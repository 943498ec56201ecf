"""``HudiAdapter``: recognises a Hudi table by its ``.hoodie`` folder and opens it."""

from __future__ import annotations

from typing import Any, ClassVar

import pyarrow.fs as pafs

from storage.formats.hudi._layout import (
    HOODIE_FOLDER,
    PARTITION_FIELDS,
    file_type,
    has_partition_folders,
    hudi_storage_options,
    legacy_read_options,
    open_filesystem,
    partition_spec,
    read_properties,
)
from storage.formats.hudi.table import HudiSpecTable, hudi_errors
from storage.io.stores import StoreOptions
from storage.spec.errors import CorruptTable, NotSupported, SpecError, TableNotFound, UnsupportedFeature
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
    def metadata_pointer(cls, location: str, storage: StoreOptions | None = None) -> str | None:
        """The newest completed instant of the active timeline and the number of completed
        instants (one listing of the timeline)."""
        from storage.formats.hudi._metadata_index import read_timeline

        filesystem, root = open_filesystem(location, storage)[:2]
        completed = read_timeline(filesystem, f"{root.rstrip('/')}/{HOODIE_FOLDER}").completed
        if not completed:
            return ""
        newest = max(completed)
        return f"{newest}.{completed[newest]}:{len(completed)}"

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
        hudi_table, options = _open_hudi(location, storage, properties, filesystem, root)
        table = HudiSpecTable(location, properties, hudi_table, storage=storage, read_options=options)
        table.definition  # noqa: B018 - a schema hudi-rs cannot read is a corrupt table: fail on open
        return table


def _open_hudi(
    location: str,
    storage: StoreOptions | None,
    properties: dict[str, str],
    filesystem: pafs.FileSystem,
    root: str,
) -> tuple[Any, dict[str, str]]:
    """The hudi-rs table and the read options it was opened with (``legacy_read_options``)."""
    import hudi

    options = legacy_read_options(properties)
    storage_options = hudi_storage_options(location, storage)
    with hudi_errors(location, "opening the table"):
        hudi_table = hudi.HudiTable(location, {**storage_options, **options})
        if not options or partition_spec(properties).is_partitioned:
            return hudi_table, options
        if not has_partition_folders(filesystem, root):
            return hudi_table, options
        # hudi-rs lists partition folders only when a partition field of the schema is declared;
        # a 0.5-era table declares none: any column will do (hudi-rs is never given a partition
        # filter on it, and the layout keeps the partition columns unnamed).
        names = hudi_table.get_schema().names
        if not names:
            raise CorruptTable(f"Hudi table {location}: its schema has no columns")
        options[PARTITION_FIELDS] = names[0]
        return hudi.HudiTable(location, {**storage_options, **options}), options
