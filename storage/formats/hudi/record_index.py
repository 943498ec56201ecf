"""The Hudi record index: the generic path (storage/spec/record_index.py), told apart from tables
whose metadata table has a ``record_index`` partition.

The metadata table keeps its record index in HFiles (``.hoodie/metadata/record_index/``). The
installed hudi-rs (0.5) reads HFiles internally and its ``HudiFileGroupReader`` can open a
metadata table, but its Python API has no record-index lookup (no key-to-file-group hashing, no
decoding of the ``HoodieRecordIndexInfo`` payload), and none of the test tables has a record
index (all written with ``hoodie.metadata.enable=false``; no Hudi writer is installed to make one),
so a decoder could not be tested and is not attempted. Every Hudi table is therefore looked up
through the generic path, which prunes by what Hudi writes into each base file (the record key
columns' min/max in the parquet footer) and confirms by reading the candidates' key columns;
``method`` says which case applies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pyarrow.fs as pafs

from storage.spec.record_index import RecordIndex

if TYPE_CHECKING:
    from storage.formats.hudi.table import HudiSpecTable

RECORD_INDEX_PARTITION = ".hoodie/metadata/record_index"
FOOTERS = " (min/max record keys from base file footers)"


class HudiRecordIndex(RecordIndex):
    def __init__(self, table: HudiSpecTable, key_columns: str | Sequence[str] | None = None) -> None:
        super().__init__(table, key_columns)
        self.has_metadata_record_index = self._metadata_record_index_exists(table)
        self.method = RecordIndex.method + FOOTERS
        if self.has_metadata_record_index:
            self.method = (
                "the metadata table's record index is not read (hudi-rs has no record-index lookup): "
                + self.method
            )

    @staticmethod
    def _metadata_record_index_exists(table: HudiSpecTable) -> bool:
        declared = str(table.properties.get("hoodie.table.metadata.partitions", ""))
        if "record_index" not in {p.strip() for p in declared.split(",")}:
            return False
        info = table.filesystem.get_file_info(f"{table.root}/{RECORD_INDEX_PARTITION}")
        return info.type == pafs.FileType.Directory
