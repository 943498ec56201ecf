"""RecordIndex (Hudi RFC-64): which file holds each record key at an instant.

    index = table.record_index()             # the table's declared key columns
    index = table.record_index("order_id")   # or a column the caller names
    for location in index.tag([17, 42], instant=None):   # latest instant by default
        print(location.key, location.found, location.file_path, location.file_group_id)

The generic implementation works for every ``SpecTable`` through its ``FileIndex``:

1. the keys (at most ``MAX_KEYS`` per call) are coerced to the key columns' types and sorted;
2. the file index is listed at the instant with a ``key IN (...)`` filter, so partition and
   statistics pruning happen where the format does them; the listing is consumed as a stream
   (one slice at a time, never all files' statistics at once);
3. each slice's min/max bounds on the key columns select, by bisection in the sorted keys, the
   keys it may hold; a slice with no candidate key is never opened;
4. a candidate slice is read through ``SpecTable.read`` with only the key columns, deletes and
   logs applied, so a deleted key is "not found"; a key found is dropped from the search, and the
   listing stops once every key is found.

Key columns: those declared by the table (Hudi ``hoodie.table.recordkey.fields``, Iceberg schema
identifier fields) or named by the caller; Delta declares none, so the caller must name one.
Several key columns make a composite key: each key is then a tuple (or text ``a,b``).
"""

from __future__ import annotations

import bisect
import datetime as dt
import decimal
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from storage.spec.errors import FilterError, SpecError
from storage.spec.expressions import And, In
from storage.spec.expressions.binding import Columns, coerce_literal
from storage.spec.expressions.evaluate import compare
from storage.spec.models import FileSlice, Instant

if TYPE_CHECKING:
    from storage.spec.table import InstantRef, SpecTable

#: Keys one ``tag`` call accepts; a larger batch is refused (split it).
MAX_KEYS = 1000
Key = tuple[Any, ...]


class RecordIndexError(SpecError):
    """A lookup the index refuses: no key columns, too many keys, a key of the wrong type."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class RecordLocation:
    """Where one record key lives at ``instant_id``; ``found`` False (and no file) when absent."""

    key: Any  # the key as given, coerced to the column type (a tuple for composite keys)
    found: bool
    file_path: str | None = None
    file_group_id: str | None = None
    partition: str | None = None
    instant_id: int | str | None = None


def declared_key_columns(table: SpecTable) -> tuple[str, ...]:
    """The record key columns the table declares: Hudi record key fields, Iceberg identifier
    fields; () when none (Delta declares none)."""
    properties = table.definition.properties
    hudi_keys = properties.get("hoodie.table.recordkey.fields")
    if hudi_keys:
        return tuple(c.strip() for c in str(hudi_keys).split(",") if c.strip())
    pyiceberg_table = getattr(table, "pyiceberg_table", None)
    if pyiceberg_table is not None:
        schema = pyiceberg_table.metadata.schema()
        return tuple(schema.find_column_name(i) or str(i) for i in schema.identifier_field_ids)
    return ()


def _text_value(type_: pa.DataType, text: str) -> Any:
    """Key text (from a URL or a form) as a value ``coerce_literal`` takes for ``type_``."""
    text = text.strip()
    try:
        if pa.types.is_integer(type_):
            return int(text)
        if pa.types.is_floating(type_) or pa.types.is_decimal(type_):
            return decimal.Decimal(text)
    except (ValueError, decimal.DecimalException):
        return text  # coerce_literal names the column type and the text
    if pa.types.is_boolean(type_) and text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


class RecordIndex:
    """Tags record keys with the file slice holding them, by statistics pruning then key reads."""

    #: How this index finds keys, shown to people (the Hudi index may say otherwise).
    method = "column statistics pruning, then reading the key columns of candidate files"

    def __init__(self, table: SpecTable, key_columns: str | Sequence[str] | None = None) -> None:
        self.table = table
        if isinstance(key_columns, str):
            key_columns = [c.strip() for c in key_columns.split(",") if c.strip()]
        names = tuple(key_columns) if key_columns else declared_key_columns(table)
        if not names:
            raise RecordIndexError(
                f"the {table.format.value} table {table.definition.id.display_name} declares no record"
                " key: name the key column",
                field="column",
            )
        columns = Columns(table.schema)
        top_level = set(table.schema.names)
        resolved = []
        for name in names:
            try:
                column = columns.resolve(name)
            except FilterError as error:
                raise RecordIndexError(str(error), field="column") from error
            if column.name not in top_level:
                raise RecordIndexError(f"key column {name!r} must be a top-level column", field="column")
            resolved.append(column)
        self._columns = tuple(resolved)
        #: Slices read by the last ``tag`` call (the candidates that statistics did not rule out).
        self.files_read = 0

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self._columns)

    # --- input ---------------------------------------------------------------------------------

    def coerce_key(self, key: Any) -> Key:
        """``key`` as a tuple of the key columns' types; text is parsed (``a,b`` for composites)."""
        if isinstance(key, str) and len(self._columns) > 1:
            key = tuple(key.split(","))
        parts = tuple(key) if isinstance(key, tuple | list) else (key,)
        if len(parts) != len(self._columns):
            raise RecordIndexError(
                f"a key has {len(self._columns)} parts ({', '.join(self.key_columns)}), not {len(parts)}",
                field="key",
            )
        values = []
        for column, part in zip(self._columns, parts, strict=True):
            if part is None or (isinstance(part, str) and not part.strip()):
                raise RecordIndexError(f"a value of key column {column.name} is empty", field="key")
            if isinstance(part, str):
                part = _text_value(column.type, part)
            try:
                values.append(_normalise(coerce_literal(column, part)))
            except FilterError as error:
                raise RecordIndexError(f"key {part!r}: {error}", field="key") from error
        return tuple(values)

    def _shown(self, key: Key) -> Any:
        return key[0] if len(key) == 1 else key

    # --- tagging -------------------------------------------------------------------------------

    def tag(self, keys: Iterable[Any], instant: InstantRef = None) -> list[RecordLocation]:
        """One ``RecordLocation`` per distinct key, in the order given."""
        keys = list(keys)
        if len(keys) > MAX_KEYS:
            raise RecordIndexError(
                f"at most {MAX_KEYS} keys per lookup, not {len(keys)}: split the keys into batches",
                field="key",
            )
        wanted = list(dict.fromkeys(self.coerce_key(k) for k in keys))
        self.files_read = 0
        timeline = self.table.timeline()
        target = timeline.get(instant) if instant is not None else timeline.latest()
        if target is None or not wanted:
            return [RecordLocation(self._shown(k), False) for k in wanted]
        found = self.locate(wanted, target)
        return [found.get(k) or RecordLocation(self._shown(k), False, instant_id=target.id) for k in wanted]

    def locate(self, keys: list[Key], instant: Instant) -> dict[Key, RecordLocation]:
        """The locations of those ``keys`` found at ``instant`` (generic path)."""
        remaining = set(keys)
        found: dict[Key, RecordLocation] = {}
        for file_slice, candidates in self.candidate_slices(keys, instant):
            candidates = [k for k in candidates if k in remaining]
            if not candidates:
                continue
            for key in self.keys_in_slice(file_slice, candidates):
                remaining.discard(key)
                found[key] = RecordLocation(
                    key=self._shown(key),
                    found=True,
                    file_path=file_slice.path,
                    file_group_id=file_slice.file_group_id,
                    partition=file_slice.partition.path,
                    instant_id=instant.id,
                )
            if not remaining:
                break
        return found

    def key_filter(self, keys: list[Key]) -> Any:
        """``key IN (...)`` per key column: a superset of the keys, for the file index to prune by."""
        predicates = [
            In(column.name, tuple(sorted({k[i] for k in keys}, key=_sort_key)))
            for i, column in enumerate(self._columns)
        ]
        return predicates[0] if len(predicates) == 1 else And(*predicates)

    def candidate_slices(self, keys: list[Key], instant: Instant) -> Iterator[tuple[FileSlice, list[Key]]]:
        """Each live slice at ``instant`` with the keys its statistics do not rule out (streamed)."""
        ordered = sorted(keys, key=lambda k: _sort_key(k[0]))
        firsts = [_sort_key(k[0]) for k in ordered]
        listing = self.table.file_index().list_files_at(instant, self.key_filter(keys))
        for file_slice in listing:
            candidates = self.slice_candidates(file_slice, ordered, firsts)
            if candidates:
                yield file_slice, candidates

    def slice_candidates(self, file_slice: FileSlice, ordered: list[Key], firsts: list[Any]) -> list[Key]:
        """The keys (``ordered`` by first column) within ``file_slice``'s min/max bounds."""
        base = file_slice.base_file
        if base is None:
            return list(ordered)  # a log-only slice: no statistics
        if base.record_count == 0:
            return []
        lower, upper, nulls = base.lower_bounds or {}, base.upper_bounds or {}, base.null_counts or {}
        first = self._columns[0].name
        if nulls.get(first) is not None and nulls.get(first) == base.record_count > 0:
            return []  # the key column is null in every row
        low, high = lower.get(first), upper.get(first)
        start, stop = 0, len(ordered)
        try:
            if low is not None and compare(low, ordered[0][0]) is not None:
                start = bisect.bisect_left(firsts, _sort_key(low))
            if high is not None and compare(high, ordered[0][0]) is not None:
                stop = bisect.bisect_right(firsts, _sort_key(high))
        except TypeError:
            start, stop = 0, len(ordered)
        return [k for k in ordered[start:stop] if self._within(k, lower, upper)]

    def _within(self, key: Key, lower: Any, upper: Any) -> bool:
        for column, value in zip(self._columns, key, strict=True):
            low, high = lower.get(column.name), upper.get(column.name)
            if low is not None and (compare(value, low) or 0) < 0:
                return False
            if high is not None and (compare(value, high) or 0) > 0:
                return False
        return True

    def keys_in_slice(self, file_slice: FileSlice, candidates: list[Key]) -> set[Key]:
        """The ``candidates`` present in ``file_slice``, read with only the key columns."""
        self.files_read += 1
        wanted = set(candidates)
        present: set[Key] = set()
        names = list(self.key_columns)
        for batch in self.table.read(file_slice, columns=names):
            columns = [batch.column(batch.schema.get_field_index(n)) for n in names]
            rows = _maybe_matching_rows(columns[0], {k[0] for k in wanted})
            for row in zip(*(c.take(rows).to_pylist() for c in columns), strict=True):
                key = tuple(_normalise(v) for v in row)
                if key in wanted:
                    present.add(key)
            if present == wanted:
                break
        return present


def _maybe_matching_rows(column: pa.Array, values: set[Any]) -> pa.Array:
    """Row indices whose first key column may hold one of ``values`` (all rows when Arrow cannot
    compare them: Python then decides)."""
    try:
        mask = pc.is_in(column, value_set=pa.array(list(values), type=column.type))
        return pc.indices_nonzero(mask)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array(range(len(column)), type=pa.int64())


def _normalise(value: Any) -> Any:
    """A value read back, comparable with a coerced key (aware timestamps in UTC)."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC)
    return value


def _sort_key(value: Any) -> Any:
    """Values of one column sort as they are; aware timestamps are compared in UTC."""
    return _normalise(value)


__all__ = [
    "MAX_KEYS",
    "RecordIndex",
    "RecordIndexError",
    "RecordLocation",
    "declared_key_columns",
]
