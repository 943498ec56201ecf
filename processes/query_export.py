"""A query's result as a download: CSV or Parquet, streamed batch by batch.

The whole result comes from its cached result when the storage still holds it and can be read
without Spark (``IntermediateResultStorage.batches``); else the rows the query kept for display
(its first ``row_limit``), and the export says so. A query without either cannot be exported:
``Conflict`` says why.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from processes.models import Query, QueryStatus
from storage.errors import Conflict
from storage.models import CachedResultState
from storage.selectors import jsonable
from storage.services import storage_open

logger = logging.getLogger(__name__)

FORMATS = ("csv", "parquet")
#: A cached result whose data may still be there (an INVALID one is this query's answer still).
_READABLE_STATES = (CachedResultState.READY, CachedResultState.INVALID)


@dataclass
class ResultExport:
    """What an export streams: the columns, where the rows come from and the rows themselves."""

    columns: list[str]
    whole: bool  # every row of the result (False: the first ``row_limit`` only)
    source: str  # "cached result <name>" or "the first N rows kept with the query"
    batches: Iterator[pa.RecordBatch]


def query_export_open(*, query: Query) -> ResultExport:
    """The rows of ``query``'s result to export; ``Conflict`` when it has none to give."""
    if query.status != QueryStatus.SUCCESS:
        raise Conflict(
            f"query #{query.pk} is {query.status}; only a successful query's result can be exported"
        )
    cached = _cached_batches(query)
    if cached is not None:
        name = query.cached_result.name if query.cached_result else ""
        return ResultExport(list(query.columns), True, f"cached result {name}", cached)
    if not query.columns:
        raise Conflict(
            f"query #{query.pk} kept no rows and its cached result is gone: run it again to export it"
        )
    kept = len(query.rows or [])
    return ResultExport(
        list(query.columns),
        not query.truncated,
        f"the first {kept:,} rows kept with the query" if query.truncated else "the rows kept with the query",
        iter([_rows_batch(list(query.columns), query.rows or [])]),
    )


def _cached_batches(query: Query) -> Iterator[pa.RecordBatch] | None:
    """The cached result's batches when its storage still holds them and streams them without
    Spark; None otherwise (the reason is logged)."""
    result = query.cached_result
    if result is None or result.state not in _READABLE_STATES:
        return None
    try:
        batches = iter(storage_open(result.backend).batches(result.properties))
        first = next(batches, None)
    except (NotImplementedError, OSError, ValueError) as error:
        logger.info(
            "query %s: exporting its kept rows, not cached result %s: %s", query.pk, result.name, error
        )
        return None
    return batches if first is None else itertools.chain([first], batches)


def _rows_batch(columns: list[str], rows: list[list[Any]]) -> pa.RecordBatch:
    """The kept rows (JSON values) as one batch, a column's type inferred from its values (text
    when they mix types)."""
    arrays = []
    for index in range(len(columns)):
        values = [row[index] for row in rows]
        try:
            arrays.append(pa.array(values))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
            arrays.append(pa.array([None if v is None else _cell(v) for v in values], pa.string()))
    return pa.RecordBatch.from_arrays(arrays, names=columns)


def _cell(value: Any) -> str:
    """A value as CSV text: empty for null, JSON for nested values, ``true``/``false``."""
    value = jsonable(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return str(value)


def csv_chunks(export: ResultExport) -> Iterator[bytes]:
    """RFC 4180 CSV (UTF-8, CRLF line ends), a header row then one chunk per batch."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(export.columns)
    yield buffer.getvalue().encode()
    for batch in export.batches:
        buffer.seek(0)
        buffer.truncate()
        columns = [column.to_pylist() for column in batch.columns]
        writer.writerows([_cell(value) for value in row] for row in zip(*columns, strict=True))
        yield buffer.getvalue().encode()


class _Sink(io.RawIOBase):
    """A write-only file that hands out what was written since the last ``take``."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        self.chunks.append(chunk)
        self.position += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.position

    def take(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data


def parquet_chunks(export: ResultExport) -> Iterator[bytes]:
    """A Parquet file, one row group per batch, each sent as soon as it is written."""
    sink = _Sink()
    batches = iter(export.batches)
    first = next(batches, None)
    schema = first.schema if first is not None else pa.schema([(c, pa.null()) for c in export.columns])
    writer = pq.ParquetWriter(sink, schema)
    for batch in itertools.chain([first] if first is not None else [], batches):
        if batch.schema.equals(schema):
            writer.write_batch(batch)
        else:  # another file of the result, written with other metadata
            writer.write_table(pa.Table.from_batches([batch]).cast(schema))
        yield sink.take()
    writer.close()
    yield sink.take()
