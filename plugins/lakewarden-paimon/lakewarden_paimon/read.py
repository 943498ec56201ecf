"""Reading a Paimon table through pypaimon: merge-on-read for primary-key tables (the newest
version of each key, deletes applied), plain rows for append-only tables.

A snapshot is read whole through pypaimon's own scan; file slices are read by planning the
slices' snapshot and keeping, in each of pypaimon's splits, only the files asked for. Reading
every file of a bucket (as ``plan_splits`` gives them) merges exactly as a snapshot read does.

Every read is in one schema, the table's as ``reader_table`` gives it (the current one, or a
snapshot's own): a file written in another schema is read by field id, as Paimon reads it (a
column added since is null, a renamed one comes under its new name, a changed type is cast by
Paimon's rules, ``_casts``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from lakewarden_paimon import _casts
from storage.spec.errors import CorruptTable, UnsupportedFeature
from storage.spec.expressions import to_arrow
from storage.spec.table import output_columns


def reader_table(store: Any, snapshot: Any = None) -> Any:
    """pypaimon's table reading in the current schema, or in the schema ``snapshot`` (pypaimon's
    ``Snapshot``) was committed with, which pypaimon's time travel gives."""
    if snapshot is None:
        return store
    table = store.copy({"scan.snapshot-id": str(snapshot.id)})
    if table.table_schema.id != snapshot.schema_id:  # pypaimon falls back to today's silently
        raise CorruptTable(
            f"Paimon snapshot {snapshot.id} names schema {snapshot.schema_id}, which is unreadable"
        )
    return table


def check_readable(table: Any) -> None:
    """``UnsupportedFeature`` naming what pypaimon cannot merge (a merge engine, or options of
    one, such as partial-update with ``ignore-delete``); ``CorruptTable`` for options Paimon
    itself refuses. pypaimon raises ``NotImplementedError`` and ``ValueError`` for these."""
    from pypaimon.read import merge_engine_support as support

    try:
        support.check_supported(table)
    except NotImplementedError as exc:
        engine = table.options.merge_engine().value
        if engine == "partial-update":
            options = support.partial_update_unsupported_options(table)
        elif engine == "aggregation":
            options = support.aggregation_unsupported_options(table)
        else:
            options = set()
        raw = table.options.options.to_map()
        named = ", ".join(f"{key!r}={raw.get(key)!r}" for key in sorted(options))
        # the options pypaimon names, or the first sentence of its reason (a sequence field's type)
        detail = f" with {', '.join(sorted(options))} ({named})" if named else f" ({str(exc).split('. ')[0]})"
        feature = f"the {engine} merge engine{detail}"
        raise UnsupportedFeature(
            f"Paimon table {table.table_path} uses {feature}, which this reader (pypaimon) cannot"
            " merge: its rows cannot be read here (its snapshots, files and maintenance can)"
        ) from exc
    except ValueError as exc:
        raise CorruptTable(f"Paimon table {table.table_path} has options Paimon refuses: {exc}") from exc


def _snapshot_splits(table: Any, snapshot_id: int) -> tuple[Any, list[Any]]:
    _casts.install()
    check_readable(table)
    # without time travel: ``table`` keeps its schema, whichever snapshot's files are planned
    planned = table.copy_without_time_travel({"scan.snapshot-id": str(snapshot_id)})
    builder = planned.new_read_builder()
    return builder.new_read(), builder.new_scan().plan().splits()


def _batches(reader: Any, splits: Iterable[Any], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    for split in splits:
        result = reader.to_arrow([split])
        if result is None or result.num_rows == 0:
            continue
        yield from result.select(schema.names).cast(schema).to_batches()


def _finish(
    batches: Iterator[pa.RecordBatch], schema: pa.Schema, columns: list[str] | None, expr: Any
) -> Iterator[pa.RecordBatch]:
    names = output_columns(columns, schema)
    condition = None if expr is None else to_arrow(expr, schema)
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if condition is not None:
            table = table.filter(condition)
        if table.num_rows:
            yield from table.select(names).to_batches()


def read_snapshot(
    table: Any, snapshot_id: int, schema: pa.Schema, columns: list[str] | None, expr: Any
) -> Iterator[pa.RecordBatch]:
    """Rows of the table at ``snapshot_id``, read in ``table``'s schema (``reader_table``)."""
    reader, splits = _snapshot_splits(table, snapshot_id)
    return _finish(_batches(reader, splits, schema), schema, columns, expr)


def read_files(
    table: Any,
    files: Iterable[tuple[Any, str]],
    schema: pa.Schema,
    columns: list[str] | None,
    expr: Any,
) -> Iterator[pa.RecordBatch]:
    """Rows of the data files named by ``(snapshot id, file name)``, merged per bucket, read in
    ``table``'s schema (``reader_table``)."""
    by_snapshot: dict[int, set[str]] = defaultdict(set)
    for snapshot_id, name in files:
        by_snapshot[int(snapshot_id)].add(name)
    return _finish(_file_batches(table, by_snapshot, schema), schema, columns, expr)


def _file_batches(
    table: Any, by_snapshot: dict[int, set[str]], schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    for snapshot_id, names in sorted(by_snapshot.items()):
        reader, splits = _snapshot_splits(table, snapshot_id)
        kept = (split.filter_file(lambda meta, names=names: meta.file_name in names) for split in splits)
        yield from _batches(reader, (split for split in kept if split is not None), schema)
