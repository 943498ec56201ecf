"""Compaction shared by the Iceberg and Delta rewrite processes: settings and planning.

Planning (format-neutral, on ``FileSlice`` listings): per partition, files smaller than
``max(target / 8, min-file-size)`` (plus files carrying at least ``delete-file-threshold`` delete
files) are bin-packed, first fit by decreasing size, into groups of at most the target size. A
partition is only rewritten when it has ``min-input-files`` candidates, or candidates worth a whole
target file; a group of one file without deletes is dropped (rewriting it changes nothing).
Files the caller marks ``always`` (an Iceberg file of another partition spec than the output's)
are candidates whatever their size, and their partitions are rewritten whatever their count.

Strategies (``strategy``): ``binpack`` (above), ``sort`` and ``zorder`` (``plan_clustering``):
a clustering rewrite takes *every* file of each partition it touches, not only small ones, and
writes a partition as one group whose rows are ordered across its output files (file 1 holds the
smallest keys), by ``sort-order`` or by the z-order of ``zorder-columns``. So that an already
clustered partition is not rewritten forever, each clustering commit records its ``Ordering``'s
signature (Iceberg snapshot summary / Delta commitInfo ``lakewarden.rewrite-strategy``) and a
partition whose live files were all written by commits of the same signature is skipped: it is
rewritten again once anything lands in it (an append, a binpack, another order).

Writing the groups is ``group_writer``'s; committing them is each format's rewrite module.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from processes.maintenance.errors import InputError
from processes.maintenance.rewrite_schema import (  # noqa: F401 (re-exported)
    BINPACK,
    DEFAULT_TARGET_FILE_SIZE,
    MIB,
    REWRITE_DEFAULTS,
    REWRITE_PARAMS_SCHEMA,
    REWRITE_PROPERTIES_SCHEMA,
    SORT,
    SORT_ORDER,
    STRATEGIES,
    STRATEGY,
    STRATEGY_PROPERTY,
    ZORDER,
    ZORDER_COLUMNS,
)
from storage.spec.models import FileSlice, PartitionDescriptor

if TYPE_CHECKING:
    from pyiceberg.table.metadata import TableMetadata

logger = logging.getLogger(__name__)


#: The data files a rewrite takes as input (read through the spec readers, deletes applied);
#: Iceberg tables written by Hive, Impala, Trino or Spark may hold ORC files beside parquet ones.
REWRITTEN_FORMATS = ("parquet", "orc")


@dataclass(frozen=True)
class SortField:
    column: str
    descending: bool = False
    nulls_first: bool = True

    @classmethod
    def parse(cls, item: str | Mapping[str, Any]) -> SortField:
        """A ``sort-order`` item: a column name, or {column, direction, nulls} (Iceberg's defaults:
        nulls first ascending, last descending)."""
        if isinstance(item, str):
            return cls(item)
        descending = item.get("direction", "asc") == "desc"
        nulls = item.get("nulls") or ("last" if descending else "first")
        return cls(str(item["column"]), descending, nulls == "first")

    def __str__(self) -> str:
        nulls = "nulls-first" if self.nulls_first else "nulls-last"
        return f"{self.column} {'desc' if self.descending else 'asc'} {nulls}"


@dataclass(frozen=True)
class Ordering:
    """How a clustering rewrite orders a group's rows (picklable: it travels to the Spark task):
    ``sort`` by ``fields``, or ``zorder`` by the interleaved keys of ``columns``."""

    kind: str
    fields: tuple[SortField, ...] = ()
    columns: tuple[str, ...] = ()

    @property
    def signature(self) -> str:
        """What the commit records (``STRATEGY_PROPERTY``); names are the table's logical ones."""
        if self.kind == SORT:
            return "sort:" + ",".join(str(f) for f in self.fields)
        return "zorder:" + ",".join(self.columns)

    def renamed(self, names: Mapping[str, str]) -> Ordering:
        """The same ordering over other column names (Delta column mapping: physical names)."""
        return Ordering(
            self.kind,
            tuple(SortField(names.get(f.column, f.column), f.descending, f.nulls_first) for f in self.fields),
            tuple(names.get(c, c) for c in self.columns),
        )


def orderable(data_type: Any) -> bool:
    """Whether a clustering rewrite can order a column of this arrow type."""
    import pyarrow as pa

    t = pa.types
    return any(
        check(data_type)
        for check in (
            t.is_integer,
            t.is_floating,
            t.is_decimal,
            t.is_string,
            t.is_large_string,
            t.is_binary,
            t.is_large_binary,
            t.is_fixed_size_binary,
            t.is_date,
            t.is_time,
            t.is_timestamp,
            t.is_boolean,
        )
    )


def resolve_ordering(
    settings: CompactionSettings,
    schema: Any,
    *,
    partition_columns: Iterable[str] = (),
    default_sort: Iterable[SortField] = (),
) -> Ordering | None:
    """The ``Ordering`` of a clustering rewrite over ``schema`` (arrow, logical names), None for
    binpack; ``InputError`` with the reason for an ordering the table cannot have: unknown or
    unorderable columns, a z-order over a partition column, a given sort-order of partition
    columns only (one value per partition: it orders nothing), a sort without any order."""
    if settings.strategy == BINPACK:
        return None
    if settings.strategy == SORT:
        fields = settings.sort_order or tuple(default_sort)
        if not fields:
            raise InputError(
                "strategy sort needs a sort-order: the table has no sort order; nothing was rewritten"
            )
        _check_columns(schema, [f.column for f in fields], SORT_ORDER)
        if settings.sort_order and {f.column for f in fields} <= set(partition_columns):
            raise InputError(
                f"sort-order: {', '.join(f.column for f in fields)} only names partition columns (one value"
                " per partition: sorting by them orders nothing); nothing was rewritten"
            )
        return Ordering(SORT, fields=fields)
    columns = settings.zorder_columns
    if not columns:
        raise InputError("strategy zorder needs zorder-columns; nothing was rewritten")
    partitioned = sorted(set(columns) & set(partition_columns))
    if partitioned:
        raise InputError(
            f"zorder-columns {', '.join(partitioned)}: a partition column has one value per partition,"
            " z-ordering by it clusters nothing; nothing was rewritten"
        )
    _check_columns(schema, list(columns), ZORDER_COLUMNS)
    return Ordering(ZORDER, columns=tuple(columns))


def _check_columns(schema: Any, columns: list[str], param: str) -> None:
    names = set(schema.names)
    unknown = [c for c in columns if c not in names]
    if unknown:
        raise InputError(
            f"{param}: unknown column(s) {', '.join(unknown)} (columns: {', '.join(schema.names)});"
            " nothing was rewritten"
        )
    if len(set(columns)) != len(columns):
        raise InputError(f"{param}: a column is named twice; nothing was rewritten")
    for column in columns:
        data_type = schema.field(column).type
        if not orderable(data_type):
            raise InputError(
                f"{param}: column {column} of type {data_type} cannot be ordered; nothing was rewritten"
            )


@dataclass(frozen=True)
class CompactionSettings:
    target_file_size: int = DEFAULT_TARGET_FILE_SIZE
    min_file_size: int = 0
    min_input_files: int = 5
    delete_file_threshold: int = 0
    max_concurrent_groups: int = 0
    compression_codec: str = ""
    engine: str = "arrow"
    strategy: str = BINPACK
    sort_order: tuple[SortField, ...] = ()
    zorder_columns: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CompactionSettings:
        merged = {**REWRITE_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
        return cls(
            target_file_size=int(merged["target-file-size"]),
            min_file_size=int(merged["min-file-size"]),
            min_input_files=max(2, int(merged["min-input-files"])),
            delete_file_threshold=int(merged["delete-file-threshold"]),
            max_concurrent_groups=int(merged["max-concurrent-groups"]),
            compression_codec=str(merged["compression-codec"] or ""),
            engine=str(merged["engine"] or "arrow"),
            strategy=str(merged.get(STRATEGY) or BINPACK),
            sort_order=tuple(SortField.parse(item) for item in merged.get(SORT_ORDER) or ()),
            zorder_columns=tuple(str(c) for c in merged.get(ZORDER_COLUMNS) or ()),
        )

    @property
    def small_file_size(self) -> int:
        return max(self.target_file_size // 8, self.min_file_size)


# --- planning ------------------------------------------------------------------------------------


@dataclass
class RewriteGroup:
    index: int
    partition: PartitionDescriptor
    slices: list[FileSlice]

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self.slices)

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.slices)

    @property
    def has_deletes(self) -> bool:
        return any(s.delete_files for s in self.slices)

    @property
    def paths(self) -> list[str]:
        return [s.base.path for s in self.slices]


@dataclass
class CompactionPlan:
    instant: int | str | None
    groups: list[RewriteGroup] = field(default_factory=list)
    ordering: Ordering | None = None  # a clustering rewrite's (commits record its signature)

    @property
    def commit_properties(self) -> dict[str, str]:
        """What a clustering rewrite's commit records, so the next one skips what it wrote."""
        return {STRATEGY_PROPERTY: self.ordering.signature} if self.ordering is not None else {}

    @property
    def empty(self) -> bool:
        return not self.groups

    @property
    def files_in(self) -> int:
        return sum(len(g.slices) for g in self.groups)

    @property
    def bytes_in(self) -> int:
        return sum(g.size_bytes for g in self.groups)

    @property
    def partitions(self) -> int:
        return len({g.partition.path for g in self.groups})


def bin_pack(slices: Iterable[FileSlice], capacity: int) -> list[list[FileSlice]]:
    """First fit by decreasing size: few bins, each at most ``capacity`` (an item larger than the
    capacity gets a bin of its own)."""
    bins: list[tuple[int, list[FileSlice]]] = []
    for item in sorted(slices, key=lambda s: (-s.size_bytes, s.path)):
        size = item.size_bytes
        for position, (used, members) in enumerate(bins):
            if used + size <= capacity:
                members.append(item)
                bins[position] = (used + size, members)
                break
        else:
            bins.append((size, [item]))
    return [members for _, members in bins]


def plan_compaction(
    slices: Iterable[FileSlice],
    settings: CompactionSettings,
    *,
    instant: int | str | None,
    eligible: Callable[[FileSlice], bool] = lambda s: True,
    partition_key: Callable[[FileSlice], Any] = lambda s: s.partition.path,
    always: Callable[[FileSlice], bool] = lambda s: False,
    clustered: Callable[[FileSlice], bool] = lambda s: False,
    ordering: Ordering | None = None,
) -> CompactionPlan:
    """The groups worth rewriting (see the module docstring for the rules); with an ``ordering``
    (sort, zorder) ``plan_clustering``'s, ``clustered`` telling the files a clustering rewrite of
    the same ordering wrote."""
    if ordering is not None:
        plan = plan_clustering(
            slices, instant=instant, eligible=eligible, partition_key=partition_key, clustered=clustered
        )
        plan.ordering = ordering
        return plan
    candidates: dict[Any, list[FileSlice]] = defaultdict(list)
    partitions: dict[Any, PartitionDescriptor] = {}
    threshold = settings.delete_file_threshold
    for file_slice in slices:
        base = file_slice.base_file
        if base is None or base.file_format not in REWRITTEN_FORMATS or not eligible(file_slice):
            continue
        small = base.size_bytes < settings.small_file_size
        many_deletes = threshold > 0 and len(file_slice.delete_files) >= threshold
        if small or many_deletes or always(file_slice):
            key = partition_key(file_slice)
            candidates[key].append(file_slice)
            partitions.setdefault(key, file_slice.partition)
    plan = CompactionPlan(instant=instant)
    for key in sorted(candidates, key=str):
        members = candidates[key]
        total = sum(s.size_bytes for s in members)
        forced = any(always(s) for s in members)
        if (
            len(members) < settings.min_input_files
            and not forced
            and not (len(members) >= 2 and total >= settings.target_file_size)
        ):
            if not (threshold > 0 and any(len(s.delete_files) >= threshold for s in members)):
                continue
        for packed in bin_pack(members, settings.target_file_size):
            if len(packed) < 2 and not packed[0].delete_files and not forced:
                continue
            plan.groups.append(RewriteGroup(len(plan.groups), partitions[key], packed))
    return plan


def plan_clustering(
    slices: Iterable[FileSlice],
    *,
    instant: int | str | None,
    eligible: Callable[[FileSlice], bool] = lambda s: True,
    partition_key: Callable[[FileSlice], Any] = lambda s: s.partition.path,
    clustered: Callable[[FileSlice], bool] = lambda s: False,
) -> CompactionPlan:
    """A sort or z-order plan: one group per partition holding every eligible parquet or ORC
    file of it, whatever their sizes, except partitions whose files were all written by a clustering
    rewrite of the same ordering (``clustered``). The group is ordered as a whole (in one task's
    memory) and split into files of the target size."""
    members: dict[Any, list[FileSlice]] = defaultdict(list)
    for file_slice in slices:
        base = file_slice.base_file
        if base is None or base.file_format not in REWRITTEN_FORMATS or not eligible(file_slice):
            continue
        members[partition_key(file_slice)].append(file_slice)
    plan = CompactionPlan(instant=instant)
    for key in sorted(members, key=str):
        files = sorted(members[key], key=lambda s: s.path)
        if all(clustered(s) and not s.delete_files for s in files):
            continue
        plan.groups.append(RewriteGroup(len(plan.groups), files[0].partition, files))
    return plan


def iceberg_strategy(
    metadata: TableMetadata, spec_id: int | None, settings: CompactionSettings, schema: Any
) -> Ordering | None:
    """An Iceberg table's ``Ordering``: ``sort`` defaults to the table's sort order (identity
    transforms only), ``zorder`` refuses the identity partition columns of spec ``spec_id``
    (None: the default spec); ``InputError`` with the reason (``resolve_ordering``)."""
    spec_id = metadata.default_spec_id if spec_id is None else spec_id
    iceberg_schema = metadata.schema()
    default: list[SortField] = []
    sort_order = metadata.sort_order_by_id(metadata.default_sort_order_id)
    for f in sort_order.fields if sort_order and not settings.sort_order else ():
        name = iceberg_schema.find_column_name(f.source_id)
        if name is None:
            raise InputError(
                f"the table's sort order orders by column id {f.source_id}, which its schema no longer"
                " has: give a sort-order; nothing was rewritten"
            )
        if str(f.transform) != "identity":
            raise InputError(
                f"the table's sort order orders by {f.transform}({name}), which the sort strategy"
                " does not compute: give a sort-order; nothing was rewritten"
            )
        default.append(SortField(name, f.direction.value == "desc", f.null_order.value == "nulls-first"))
    identity = [
        name
        for f in metadata.specs()[spec_id].fields
        if str(f.transform) == "identity"
        and (name := iceberg_schema.find_column_name(f.source_id)) is not None
    ]
    return resolve_ordering(settings, schema, partition_columns=identity, default_sort=default)


def clustered_snapshots(metadata: TableMetadata, ordering: Ordering | None) -> Callable[[FileSlice], bool]:
    """Whether an Iceberg file was added by a snapshot of a clustering rewrite of ``ordering``."""
    if ordering is None:
        return lambda s: False
    ids = {
        s.snapshot_id
        for s in metadata.snapshots
        if s.summary is not None
        and s.summary.additional_properties.get(STRATEGY_PROPERTY) == ordering.signature
    }
    return lambda s: s.base_file is not None and s.base_file.extra.get("snapshot_id") in ids


def delta_ordering(spec: Any, settings: CompactionSettings) -> Ordering | None:
    """The ordering of a ``sort``/``zorder`` rewrite over the table's logical columns (None for
    binpack; ``InputError`` with the reason: ``compaction.resolve_ordering``). Delta tables have no
    sort order of their own: ``sort`` needs a ``sort-order``."""
    schema = spec.state(spec.version).schema
    sorted_partitions = [f.column for f in settings.sort_order if f.column in schema.partition_columns]
    if settings.strategy == SORT and sorted_partitions:
        raise InputError(
            f"sort-order: {', '.join(sorted_partitions)} is a partition column (one value per partition,"
            " not in the data files); nothing was rewritten"
        )
    return resolve_ordering(settings, schema.arrow, partition_columns=schema.partition_columns)


def clustered_files(spec: Any, ordering: Ordering) -> set[str]:
    """The files (as the file index names them) added by commits whose commitInfo records
    ``ordering`` (a clustering rewrite of the same ordering). Reads the commits in the log."""
    log = spec.log
    versions = [
        v
        for v in sorted(log.commits)
        if v <= spec.version and ((log.commit_info(v) or {}).get(STRATEGY_PROPERTY) == ordering.signature)
    ]
    index = spec.file_index()
    return {
        change.file_slice.base_file.path
        for v in versions
        for change in index.list_files_between(v - 1 if v > 0 else None, v)
        if change.kind == "added" and change.file_slice.base_file is not None
    }


def rewrite_summary(plan: CompactionPlan, written: list[Any], **extra: Any) -> dict[str, Any]:
    return {
        "files_in": plan.files_in,
        "bytes_in": plan.bytes_in,
        "files_out": sum(len(w.files) for w in written),
        "bytes_out": sum(w.size_bytes for w in written),
        "groups": len(plan.groups),
        "partitions": plan.partitions,
        "engines": {e: sum(1 for w in written if w.engine == e) for e in sorted({w.engine for w in written})},
        **({"strategy": plan.ordering.signature} if plan.ordering is not None else {}),
        **extra,
    }
