"""Row-group skipping by parquet column statistics, and deleted-position masks, for the readers.

Skipping: before a row group is read, the bound filter is evaluated (``might_match_stats``, the
evaluator that prunes files by their bounds) against the group's column statistics; a group no
row of which can match is not read. The exact filter still runs on the rows that are read, so a
skip may only ever drop rows the filter would drop: every doubt keeps the group.

* The reader says where each filter column comes from (``Source``): a file leaf column whose
  statistics apply (``leaf``), a value constant over the whole file (``constant``: a column the
  file lacks reads as its partition value, initial-default or null), or nothing (unknown: never
  skipped on).
* A leaf's statistics are used only when the file's type converts to the table's exactly and the
  statistics mean the same thing after conversion (``usable``): equal types, signed integers
  widened, float to double, decimals widened without rescaling loss, string and binary layouts,
  timestamps of the same zone-ness widened to a finer unit (never nanoseconds: their statistics
  come back as pandas objects and their casts may truncate), dates, times. ``float32`` table
  columns are not skipped on: the exact filter compares them as float32 in ``in`` lists and as
  double elsewhere, and the statistics cannot follow both.
* Each value taken from the statistics must be of the Python type the filter's literals have;
  statistics pyarrow cannot decode (a truncated UTF-8 bound) are unknown. The evaluator already
  treats string bounds as possibly truncated, NaN bounds as unknown and float bounds as blind to
  NaN.

Positions: deleted row positions are a sorted, unique numpy ``int64`` array; the keep mask of a
batch is built with ``searchsorted`` and a boolean array.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storage.spec.expressions import Expression, might_match_stats

#: row groups kept and skipped by every ``RowGroupFilter`` of the process (tests, measurements)
totals = {"kept": 0, "skipped": 0}
_UNITS = {"s": 0, "ms": 1, "us": 2}  # finer is larger; "ns" is never used
_SIGNED = (pa.int8(), pa.int16(), pa.int32(), pa.int64())


@dataclass(frozen=True)
class Source:
    """Where a filter column's values come from in one file: ``leaf`` (index of the parquet
    leaf column whose statistics apply) or ``constant`` (``value`` in every row, None for null)."""

    kind: str
    leaf: int = -1
    value: Any = None
    target: pa.DataType | None = None


def leaf_source(leaf: int, target: pa.DataType) -> Source:
    return Source("leaf", leaf=leaf, target=target)


def _leaf_count(data_type: pa.DataType) -> int:
    if isinstance(data_type, pa.BaseExtensionType):
        return _leaf_count(data_type.storage_type)
    if pa.types.is_struct(data_type):
        return sum(_leaf_count(child.type) for child in data_type)
    if pa.types.is_map(data_type):
        return _leaf_count(data_type.key_type) + _leaf_count(data_type.item_type)
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return _leaf_count(data_type.value_type)
    if pa.types.is_fixed_size_list(data_type):
        return _leaf_count(data_type.value_type)
    return 1


def leaf_index(file_schema: pa.Schema, path: Sequence[int], num_columns: int) -> int | None:
    """The parquet leaf column of the field at ``path`` (field indexes: top level, then struct
    children) of a file's Arrow schema, or None when it is not a primitive inside structs only
    or the leaves do not add up to ``num_columns`` (a schema this mapping does not understand)."""
    if sum(_leaf_count(f.type) for f in file_schema) != num_columns or not path:
        return None
    fields: Sequence[pa.Field] = list(file_schema)
    leaf = 0
    field = None
    for depth, index in enumerate(path):
        if index < 0 or index >= len(fields):
            return None
        leaf += sum(_leaf_count(f.type) for f in fields[:index])
        field = fields[index]
        if depth < len(path) - 1:
            if not pa.types.is_struct(field.type):
                return None
            fields = list(field.type)
    if field is None or _leaf_count(field.type) != 1 or pa.types.is_struct(field.type):
        return None
    if pa.types.is_list(field.type) or pa.types.is_large_list(field.type) or pa.types.is_map(field.type):
        return None
    return leaf


def _scalar_family(data_type: pa.DataType) -> str | None:
    if data_type in _SIGNED:
        return "int"
    if data_type == pa.float64():
        return "float"
    if pa.types.is_string(data_type) or pa.types.is_large_string(data_type):
        return "str"
    if pa.types.is_binary(data_type) or pa.types.is_large_binary(data_type):
        return "bytes"
    for test, family in (
        (pa.types.is_boolean, "bool"),
        (pa.types.is_decimal, "decimal"),
        (pa.types.is_date32, "date"),
    ):
        if test(data_type):
            return family
    if pa.types.is_time(data_type) and data_type.unit in _UNITS:
        return "time"  # nanosecond times: statistics come back cut to the microsecond
    if pa.types.is_timestamp(data_type) and data_type.unit in _UNITS:
        return "timestamp"
    return None


def usable(file_type: pa.DataType, target: pa.DataType) -> bool:
    """Whether statistics of a file column of ``file_type`` bound the values it reads as in a
    table column of ``target`` (module docstring)."""
    family = _scalar_family(target)
    if family is None:
        return False
    if file_type.equals(target):
        return True
    if family == "int":
        return file_type in _SIGNED and file_type.bit_width <= target.bit_width
    if family == "float":
        return file_type == pa.float32()
    if family == "decimal":
        return (
            pa.types.is_decimal(file_type)
            and file_type.scale <= target.scale
            and file_type.precision - file_type.scale <= target.precision - target.scale
        )
    if family in ("str", "bytes"):
        return _scalar_family(file_type) == family
    if family == "timestamp":
        return (
            pa.types.is_timestamp(file_type)
            and file_type.unit in _UNITS
            and (file_type.tz is None) == (target.tz is None)
            and _UNITS[file_type.unit] <= _UNITS[target.unit]
        )
    return False


def _fits(value: Any, family: str, target: pa.DataType) -> bool:
    """Whether a statistics value is of the Python type a literal of ``target`` has."""
    kind = type(value)
    if family == "timestamp":
        return kind is dt.datetime and (value.tzinfo is None) == (target.tz is None)
    expected = {
        "int": int,
        "float": float,
        "str": str,
        "bytes": bytes,
        "bool": bool,
        "decimal": decimal.Decimal,
        "date": dt.date,
        "time": dt.time,
    }[family]
    return kind is expected


def _leaf_stats(column: Any, target: pa.DataType) -> tuple[Any, Any, int | None]:
    """(min, max, null count) of one column chunk, None for whatever is unknown or unusable."""
    try:
        stats = column.statistics
    except Exception:  # noqa: BLE001 - undecodable statistics are unknown statistics
        return None, None, None
    if stats is None:
        return None, None, None
    nulls = stats.null_count if stats.has_null_count else None
    low = high = None
    family = _scalar_family(target)
    if stats.has_min_max and family is not None:
        try:
            low, high = stats.min, stats.max
        except Exception:  # noqa: BLE001 - e.g. a string bound cut inside a UTF-8 character
            low = high = None
        if not (_fits(low, family, target) and _fits(high, family, target)):
            low = high = None
    return low, high, nulls


class RowGroupFilter:
    """Which row groups of one parquet file might hold a row matching ``expr``; counts what it
    skipped (``skipped``, ``kept``) for tests and measurements."""

    def __init__(
        self, expr: Expression | None, metadata: pq.FileMetaData, sources: Mapping[str, Source]
    ) -> None:
        self._expr = expr
        self._metadata = metadata
        self._sources = dict(sources)
        self.skipped = 0
        self.kept = 0

    def might_match(self, group: int) -> bool:
        if self._expr is None:
            return True
        row_group = self._metadata.row_group(group)
        rows = row_group.num_rows
        lower: dict[str, Any] = {}
        upper: dict[str, Any] = {}
        nulls: dict[str, int | None] = {}
        for name, source in self._sources.items():
            if source.kind == "constant":
                if source.value is None:
                    nulls[name] = rows
                else:
                    lower[name] = upper[name] = source.value
                    nulls[name] = 0
                continue
            assert source.target is not None
            low, high, count = _leaf_stats(row_group.column(source.leaf), source.target)
            if low is not None and high is not None:
                lower[name], upper[name] = low, high
            if count is not None:
                nulls[name] = count
        return might_match_stats(self._expr, lower=lower, upper=upper, null_counts=nulls, record_count=rows)

    def select(self, groups: Sequence[int]) -> list[int]:
        """The groups of ``groups`` that might match, in order."""
        chosen = []
        for group in groups:
            if self.might_match(group):
                chosen.append(group)
                self.kept += 1
            else:
                self.skipped += 1
        totals["kept"] += len(chosen)
        totals["skipped"] += len(groups) - len(chosen)
        return chosen


def constant_source(array: pa.Array, target: pa.DataType) -> Source | None:
    """The source of a constant column the file lacks, whose value is ``array``'s first (a
    statistics value); None (unknown) when the type is not one statistics are used for."""
    family = _scalar_family(target)
    if family is None or len(array) == 0:
        return None
    value = array[0].as_py()
    if value is not None and not _fits(value, family, target):
        return None
    return Source("constant", value=value)


def sorted_positions(chunks: Iterable[Any]) -> np.ndarray | None:
    """Sorted unique int64 positions from numpy arrays, Arrow arrays or roaring bitmaps; None
    when there are none."""
    arrays = []
    for chunk in chunks:
        if hasattr(chunk, "to_array") and not isinstance(chunk, pa.Array | pa.ChunkedArray):
            array = np.frombuffer(chunk.to_array(), dtype=np.uint64).astype(np.int64)
        elif isinstance(chunk, pa.Array | pa.ChunkedArray):
            array = np.asarray(chunk.to_numpy(), dtype=np.int64)
        else:
            array = np.asarray(chunk, dtype=np.int64)
        if len(array):
            arrays.append(array)
    if not arrays:
        return None
    return _sorted_unique(np.concatenate(arrays) if len(arrays) > 1 else arrays[0])


def _sorted_unique(array: np.ndarray) -> np.ndarray:
    """``np.unique(array)``, without sorting what is already strictly increasing (delete files
    are written sorted by position, deletion vectors come out sorted)."""
    if len(array) < 2 or bool(np.all(array[1:] > array[:-1])):
        return array
    return np.unique(array)


def positions_by_path(table: pa.Table, path_column: str, pos_column: str) -> dict[str, np.ndarray]:
    """A position delete table as sorted unique positions by data file path (rows with a null
    path or position delete nothing)."""
    if table.num_rows == 0:
        return {}
    column = table.column(path_column)
    if pa.types.is_dictionary(column.type):
        column = column.unify_dictionaries()  # read with ``read_dictionary``: no strings copied
    paths = column.combine_chunks()
    positions = table.column(pos_column).combine_chunks()
    if paths.null_count or positions.null_count:
        valid = pc.and_(paths.is_valid(), positions.is_valid())
        paths, positions = paths.filter(valid), positions.filter(valid)
    if isinstance(paths, pa.DictionaryArray) and len(pc.unique(paths.dictionary)) == len(paths.dictionary):
        encoded = paths
    else:  # a dictionary repeating a value would split its positions in two
        encoded = (
            paths.dictionary_decode() if isinstance(paths, pa.DictionaryArray) else paths
        ).dictionary_encode()
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    values = np.asarray(positions.to_numpy(zero_copy_only=False), dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    codes, values = codes[order], values[order]
    names = encoded.dictionary.to_pylist()
    bounds = np.searchsorted(codes, np.arange(len(names) + 1))
    return {
        name: _sorted_unique(values[bounds[i] : bounds[i + 1]])
        for i, name in enumerate(names)
        if bounds[i] < bounds[i + 1]
    }


def keep_mask(deleted: np.ndarray | None, offset: int, count: int) -> pa.Array | None:
    """Keep-mask of the rows ``offset .. offset + count`` of a file given its sorted deleted
    positions, or None when none of them is deleted."""
    if deleted is None:
        return None
    low, high = np.searchsorted(deleted, (offset, offset + count))
    if low == high:
        return None
    keep = np.ones(count, dtype=np.bool_)
    keep[deleted[low:high] - offset] = False
    return pa.array(keep, pa.bool_())
