"""The Hudi record index: the metadata table's ``record_index`` partition where the table has
one and it can be trusted, else the generic path (storage/spec/record_index.py).

With a record index (``hoodie.table.metadata.partitions`` lists ``record_index``), a lookup
hashes each key to its file group of ``.hoodie/metadata/record_index/`` and reads that group's
latest file slice (base HFile, then the HFile and delete blocks of its log files) with the
pure-Python reader in ``_hfile.py`` / ``_metadata_index.py``; no data file is read. The located
(partition, file id) is turned into the data table's file slice at the instant asked.

The index is only trusted when Hudi would trust it: the metadata table has completed the data
instant asked (it is not behind), the partition is not still being built, its files decode, the
file group it names is live at that instant, and the table's record key strings are the ones
this lookup forms from the typed keys (checked once against ``_hoodie_record_key`` of a few rows
of one base file). Otherwise the generic path answers (prune by the min/max record keys in base
file footers, confirm by reading the candidates' key columns) and ``method`` says why; a wrong
answer is never returned for want of an index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.formats.hudi._metadata_index import IndexedLocation, IndexUnusable, MetadataRecordIndex
from storage.spec.errors import CorruptTable, UnsupportedFeature
from storage.spec.models import FileSlice, Instant
from storage.spec.record_index import Key, RecordIndex, RecordLocation, declared_key_columns

if TYPE_CHECKING:
    from storage.formats.hudi.table import HudiSpecTable

RECORD_INDEX_PARTITION = ".hoodie/metadata/record_index"
FOOTERS = " (min/max record keys from base file footers)"
GENERIC_METHOD = RecordIndex.method + FOOTERS
METADATA_METHOD = "the metadata table's record index (record_index partition, {groups} file groups of HFiles)"
NOT_READ = "the metadata table's record index is not read ({reason}): "
RECORD_KEY_COLUMN = "_hoodie_record_key"
SAMPLE_ROWS = 32


class HudiRecordIndex(RecordIndex):
    def __init__(self, table: HudiSpecTable, key_columns: str | Sequence[str] | None = None) -> None:
        super().__init__(table, key_columns)
        self.hudi_table = table
        self.has_metadata_record_index = self._metadata_record_index_exists(table)
        #: Metadata table files (base HFiles, log files) opened by the last ``tag`` call.
        self.metadata_files_read = 0
        self._metadata: MetadataRecordIndex | None = None
        self._key_strings: KeyStrings | None = None
        self.method = GENERIC_METHOD
        if self.has_metadata_record_index:
            try:
                self._metadata = self._open_metadata()
                self.method = METADATA_METHOD.format(groups=len(self._metadata.file_groups))
            except (IndexUnusable, CorruptTable, UnsupportedFeature) as error:
                self.method = NOT_READ.format(reason=error) + GENERIC_METHOD

    @staticmethod
    def _metadata_record_index_exists(table: HudiSpecTable) -> bool:
        declared = str(table.properties.get("hoodie.table.metadata.partitions", ""))
        if "record_index" not in {p.strip() for p in declared.split(",")}:
            return False
        try:
            info = table.filesystem.get_file_info(f"{table.root}/{RECORD_INDEX_PARTITION}")
        except OSError:
            return False
        return info.type == pafs.FileType.Directory

    def _open_metadata(self) -> MetadataRecordIndex:
        if self.key_columns != declared_key_columns(self.table):
            raise IndexUnusable(
                f"it is keyed by the record key ({', '.join(declared_key_columns(self.table))}),"
                f" not by {', '.join(self.key_columns)}"
            )
        table = self.hudi_table
        return MetadataRecordIndex(table.filesystem, table.root, dict(table.properties))

    # --- tagging -------------------------------------------------------------------------------

    def locate(self, keys: list[Key], instant: Instant) -> dict[Key, RecordLocation]:
        """From the metadata table's record index when it can answer, else the generic path."""
        self.metadata_files_read = 0
        if self._metadata is None:
            return super().locate(keys, instant)
        try:
            found = self._locate_by_index(self._metadata, keys, instant)
        except (IndexUnusable, CorruptTable, UnsupportedFeature) as error:
            self.method = NOT_READ.format(reason=error) + GENERIC_METHOD
            return super().locate(keys, instant)
        self.method = METADATA_METHOD.format(groups=len(self._metadata.file_groups))
        return found

    def _locate_by_index(
        self, metadata: MetadataRecordIndex, keys: list[Key], instant: Instant
    ) -> dict[Key, RecordLocation]:
        strings = self._strings(instant)
        by_string = {strings.format(key): key for key in keys}
        latest = self.table.timeline().latest()
        metadata.files_read = 0
        try:
            located = metadata.lookup(
                by_string, str(instant.id), latest is not None and latest.id == instant.id
            )
        finally:
            self.metadata_files_read = metadata.files_read
        slices = self._slices_of(located.values(), instant)
        found = {}
        for text, location in located.items():
            file_slice = slices[(location.partition, location.file_id)]
            key = by_string[text]
            found[key] = RecordLocation(
                key=self._shown(key),
                found=True,
                file_path=file_slice.path,
                file_group_id=file_slice.file_group_id,
                partition=file_slice.partition.path,
                instant_id=instant.id,
            )
        return found

    def _strings(self, instant: Instant) -> KeyStrings:
        if self._key_strings is None:
            self._key_strings = KeyStrings.detect(self.hudi_table, self._columns, instant)
        return self._key_strings

    def _slices_of(self, locations: Any, instant: Instant) -> dict[tuple[str, str], FileSlice]:
        """The data table's slice of each located (partition, file id) at ``instant``."""
        from storage.formats.hudi.index import HudiFileIndex

        table = self.hudi_table
        wanted = {(loc.partition, loc.file_id) for loc in locations}
        if not wanted:
            return {}
        index = HudiFileIndex(table)
        partitions = []
        for path in sorted({p for p, _ in wanted}):
            partitions.append((path, index.partition_might_match(None, path)))
        excluded = table.logs_written_after(instant)
        slices = {}
        for hudi_slice in index.hudi_slices_in(str(instant.id), partitions, False):
            ident = (hudi_slice.partition_path, hudi_slice.file_id)
            if ident in wanted:
                descriptor = dict(partitions)[hudi_slice.partition_path][0]
                slices[ident] = table.to_file_slice(hudi_slice, descriptor, instant, excluded)
        missing = sorted(wanted - set(slices))
        if missing:
            partition, file_id = missing[0]
            raise IndexUnusable(
                f"it names file group {file_id} in partition {partition!r}, which has no file slice at"
                f" instant {instant.id}"
            )
        return slices


class KeyStrings:
    """Typed keys as the Hudi record key strings of this table (``_hoodie_record_key``).

    Hudi's key generators write a single key column's value as its text (``SimpleKeyGenerator``)
    or as ``column:value`` (``ComplexKeyGenerator``, which joins several with ``,``). Which one a
    table uses is checked on a few rows of one base file; a type whose text Hudi writes in
    another way than Python (dates, decimals, floats, binary) is not looked up.
    """

    def __init__(self, names: tuple[str, ...], named: bool) -> None:
        self.names, self.named = names, named

    def format(self, key: Key) -> str:
        parts = [_text(value) for value in key]
        if not self.named:
            return parts[0]
        return ",".join(f"{name}:{part}" for name, part in zip(self.names, parts, strict=True))

    @classmethod
    def detect(cls, table: HudiSpecTable, columns: Any, instant: Instant) -> KeyStrings:
        for column in columns:
            if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
                if not (pa.types.is_integer(column.type) or pa.types.is_boolean(column.type)):
                    raise IndexUnusable(f"record key column {column.name} is {column.type}")
        names = tuple(c.name for c in columns)
        rows = _sample_rows(table, names, instant)
        candidates = [cls(names, named=False)] if len(names) == 1 else []
        candidates.append(cls(names, named=True))
        for candidate in candidates:
            if all(candidate.format(key) == text for key, text in rows):
                return candidate
        raise IndexUnusable(
            f"the table's record keys (e.g. {rows[0][1]!r}) are not formed from {', '.join(names)}"
            " as simple or complex key generators form them"
        )


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _sample_rows(table: HudiSpecTable, names: tuple[str, ...], instant: Instant) -> list[tuple[Key, str]]:
    """(key, ``_hoodie_record_key``) of the first rows of the first base file at ``instant``."""
    for file_slice in table.file_index().list_files_at(instant):
        if file_slice.base_file is None or file_slice.base_file.file_format != "parquet":
            continue
        path = f"{table.root}/{table.relative(file_slice.base_file)}"
        try:
            parquet = pq.ParquetFile(table.filesystem.open_input_file(path))
            if not set(names) | {RECORD_KEY_COLUMN} <= set(parquet.schema_arrow.names):
                raise IndexUnusable(f"base file {path} has no {RECORD_KEY_COLUMN} or key columns")
            batch = next(
                parquet.iter_batches(batch_size=SAMPLE_ROWS, columns=[*names, RECORD_KEY_COLUMN]), None
            )
        except (OSError, pa.ArrowException) as error:
            raise CorruptTable(
                f"Hudi table {table.location}: cannot read base file {path}: {error}"
            ) from error
        if batch is None or batch.num_rows == 0:
            continue
        values = [batch.column(name).to_pylist() for name in names]
        texts = batch.column(RECORD_KEY_COLUMN).to_pylist()
        return [(tuple(v[i] for v in values), texts[i]) for i in range(batch.num_rows)]
    raise IndexUnusable("no base file with rows to check the record key format against")


__all__ = ["HudiRecordIndex", "IndexedLocation", "KeyStrings"]
