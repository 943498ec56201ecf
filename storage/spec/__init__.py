"""Format-neutral table spec API: ``load_table`` and the models it returns."""

from __future__ import annotations

from storage.spec.errors import (
    CorruptTable,
    FilterError,
    InstantNotFound,
    InvalidRange,
    NotSupported,
    SpecError,
    TableNotFound,
    UnknownFormat,
    UnsupportedFeature,
)
from storage.spec.expressions import bind_filter, parse_filter
from storage.spec.models import ReadingMode, TableFormat
from storage.spec.registry import broken_format_adapters, detect_format, format_adapters, load_table
from storage.spec.table import FileIndex, SpecTable, TableFormatAdapter, Timeline

__all__ = [
    "CorruptTable",
    "FileIndex",
    "FilterError",
    "InstantNotFound",
    "InvalidRange",
    "NotSupported",
    "ReadingMode",
    "SpecError",
    "SpecTable",
    "TableFormat",
    "TableFormatAdapter",
    "TableNotFound",
    "Timeline",
    "UnknownFormat",
    "UnsupportedFeature",
    "bind_filter",
    "broken_format_adapters",
    "detect_format",
    "format_adapters",
    "load_table",
    "parse_filter",
]
