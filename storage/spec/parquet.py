"""Opening parquet data files and converting their columns to a table's types, one way for every
reader.

INT96 timestamps (Impala, Hive, Spark before 3.0 and Databricks write them) hold a Julian day and
the nanoseconds of that day. pyarrow decodes them to nanoseconds since the epoch by default, a
64-bit count that spans only 1677-09-21 to 2262-04-11: Databricks' "end of time" 9999-12-31
wraps silently to 1816-03-29. Every table format here has microsecond timestamps, which span
years 1 to 9999, so data files are opened with INT96 decoded at microsecond unit
(``open_parquet``, ``INT96_UNIT``), as Spark reads them.

A file column whose type differs from the table's is converted by ``cast_column``: exactly, or
with the one loss a reader accepts, time values cut to the table's coarser unit (nanoseconds
that some engines write into a microsecond column, Spark truncates them the same way). A value
that does not fit (an integer, a decimal or a timestamp out of the target's range) is
``CorruptTable`` naming the column, never a wrapped value.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.spec.errors import CorruptTable

INT96_UNIT = "us"


def open_parquet(source: Any) -> pq.ParquetFile:
    """A parquet file (a path or an open file) whose INT96 timestamps read as microseconds."""
    return pq.ParquetFile(source, coerce_int96_timestamp_unit=INT96_UNIT)


def cast_column(array: pa.Array | pa.ChunkedArray, target: pa.DataType, *, what: str) -> Any:
    """``array`` as ``target``: exact, or time values truncated to a coarser unit; anything that
    overflows or loses more is ``CorruptTable`` naming ``what`` (the column and its file)."""
    if array.type.equals(target):
        return array
    try:
        return pc.cast(array, target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass  # maybe only finer time values: try again allowing nothing but their truncation
    try:
        return pc.cast(array, options=pc.CastOptions(target, allow_time_truncate=True))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise CorruptTable(
            f"{what} holds {array.type} values that do not convert to the table's type {target}: {exc}"
        ) from exc


__all__ = ["INT96_UNIT", "cast_column", "open_parquet"]
