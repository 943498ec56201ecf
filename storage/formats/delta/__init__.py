"""Delta Lake tables through the table spec API (``storage.formats.delta:DeltaAdapter``)."""

from __future__ import annotations

from storage.formats.delta._dv import unique_id
from storage.formats.delta._evolve import has_variant
from storage.formats.delta.adapter import DeltaAdapter
from storage.formats.delta.index import DeltaFileIndex
from storage.formats.delta.table import DeltaSpecTable, DeltaTimeline, check_protocol

__all__ = [
    "DeltaAdapter",
    "DeltaFileIndex",
    "DeltaSpecTable",
    "DeltaTimeline",
    "check_protocol",
    "has_variant",
    "unique_id",
]
