"""Spark's parquet reader over Iceberg data files: whether it reads them as Iceberg does, and which
identity partition values a reader fills in for the files that lack their column.

Spark reads parquet columns by name, Iceberg by field id: the same values when every schema in the
table's history spells each field id the same way, with a type Spark reads as the current one, and
never gives a name to two ids (``reads_by_name``).

An identity partition's source column is normally in the data file (Iceberg writers keep it), but a
file added from a Hive layout or written by an engine that drops partition columns lacks it, and
Iceberg then reads the file's partition value (``read``), where Spark's reader would read nulls.
``IdentitySources.filled`` says, for one data file, which identity source columns it lacks and the
values they read as: the partition value when the file's own spec partitions by the column, else
null. A file holds the column when its manifest entry has column statistics for the field id
(writers derive them from the file they wrote; not trusted when the table has a name mapping, whose
aliases let a file without ids hold the column under another name), else its footer says, matched
by field id (by name in files without ids) as ``read`` matches. A file that stores the column under
another name, or lacks one inside a struct, cannot be read exactly by name: ``UnsupportedFeature``
names the file and the column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa

from storage.formats.iceberg._defaults import has_defaults
from storage.formats.iceberg.read import file_field_path, resolve_column
from storage.spec.errors import CorruptTable, UnsupportedFeature
from storage.spec.models import DataFile
from storage.spec.parquet import open_parquet

#: The table property of a name mapping (how files without field ids map names to ids).
NAME_MAPPING = "schema.name-mapping.default"


def reads_by_name(metadata: Any, arrow_schema: Callable[[Any], pa.Schema]) -> bool:
    """Whether Spark's parquet reader, given the current schema, reads every data file's stored
    columns as Iceberg reads them by field id (see the module docstring); ``arrow_schema`` gives
    the Arrow schema of an Iceberg schema (with its defaults)."""
    from pyiceberg.schema import index_by_name

    for schema in metadata.schemas:
        arrow = arrow_schema(schema)
        if has_defaults(arrow) or any(pa.types.is_null(f.type) for f in arrow):
            return False  # Spark's parquet reader reads a missing column as nulls
    current = metadata.schema()
    current_ids = index_by_name(current)
    for schema in metadata.schemas:
        for name, field_id in index_by_name(schema).items():
            if name in current_ids and current_ids[name] != field_id:
                return False  # the name was dropped and re-added: old files hold other data under it
            try:
                now = current.find_field(field_id)
            except ValueError:
                continue  # dropped column: Spark ignores it, as Iceberg does
            if current.find_column_name(field_id) != name:
                return False
            if not _spark_reads_as(schema.find_field(field_id).field_type, now.field_type):
                return False
    return True


@dataclasses.dataclass(frozen=True)
class IdentitySources:
    """The columns identity partition fields of any of the table's specs take their values from:
    by field id, the Arrow fields from the top-level column down to it (in the latest schema that
    has it); ``trust_stats`` when column statistics prove a file holds a column."""

    paths: dict[int, tuple[pa.Field, ...]]
    trust_stats: bool = True

    @classmethod
    def of(cls, metadata: Any, arrow_schema: Callable[[Any], pa.Schema]) -> IdentitySources:
        from pyiceberg.transforms import IdentityTransform

        wanted = {
            f.source_id
            for spec in metadata.partition_specs
            for f in spec.fields
            if isinstance(f.transform, IdentityTransform)
        }
        schemas = [metadata.schema(), *reversed(metadata.schemas)]
        paths: dict[int, tuple[pa.Field, ...]] = {}
        for source_id in sorted(wanted):
            for schema in schemas:
                name = schema.find_column_name(source_id)
                path = resolve_column(list(arrow_schema(schema)), name) if name is not None else None
                if path:
                    paths[source_id] = tuple(path)
                    break
        return cls(paths, NAME_MAPPING not in metadata.properties)

    @property
    def columns(self) -> tuple[str, ...]:
        """The top-level ones, by name: the columns a reader may fill in for a file."""
        return tuple(path[0].name for path in self.paths.values() if len(path) == 1)

    def filled(self, io: Any, data_file: DataFile, columns: Sequence[str]) -> dict[str, Any]:
        """The values of ``columns`` (top-level identity sources) that ``data_file`` lacks, as
        Iceberg reads them: its partition value (``date``, ``datetime``, ``Decimal``...; raw
        nanoseconds for ``timestamp_ns``) when the file's spec partitions by the column, else
        None. Nested identity sources of the file's spec must be in the file."""
        identity: dict[int, str] = data_file.extra.get("identity_columns") or {}
        nanos: dict[str, int] = data_file.extra.get("identity_nanos") or {}
        # top-level: the columns asked for; nested: those the file's own spec partitions by
        checked = {
            source_id: path
            for source_id, path in self.paths.items()
            if (len(path) == 1 and path[0].name in columns) or (len(path) > 1 and source_id in identity)
        }
        found: dict[str, Any] = {}
        for source_id in self._lacking(io, data_file, checked):
            path = self.paths[source_id]
            if len(path) > 1:
                raise UnsupportedFeature(
                    f"data file {data_file.path} lacks column {_dotted(path)}, an identity partition"
                    " source inside a struct, which Spark's parquet reader would read as nulls"
                )
            partition_name = identity.get(source_id)
            if partition_name is None:
                found[path[0].name] = None  # not partitioned by it when written: null
            else:
                found[path[0].name] = nanos.get(partition_name, data_file.partition.get(partition_name))
        return found

    def _lacking(self, io: Any, data_file: DataFile, checked: dict[int, tuple[pa.Field, ...]]) -> list[int]:
        """The field ids of ``checked`` that the file does not hold (its footer read only when
        statistics do not say)."""
        stats = data_file.null_counts if self.trust_stats else None
        unknown = {i: path for i, path in checked.items() if stats is None or _dotted(path) not in stats}
        if not unknown:
            return []
        file_schema = _footer_schema(io, data_file.path)
        lacking = []
        for source_id, path in unknown.items():
            found = file_field_path(file_schema, list(path))
            if found is None:
                lacking.append(source_id)
                continue
            stored = _names(file_schema, found[1])
            if stored != [f.name for f in path]:
                raise UnsupportedFeature(
                    f"data file {data_file.path} stores column {_dotted(path)} as {'.'.join(stored)};"
                    " Spark's parquet reader reads columns by name"
                )
        return lacking


def _footer_schema(io: Any, path: str) -> pa.Schema:
    try:
        with io.new_input(path).open(seekable=True) as handle:
            return open_parquet(handle).schema_arrow
    except FileNotFoundError:
        raise CorruptTable(f"data file {path} is missing") from None
    except (OSError, pa.ArrowException) as exc:
        raise CorruptTable(f"data file {path} cannot be read: {exc}") from exc


def _names(file_schema: pa.Schema, indexes: list[int]) -> list[str]:
    """The names of the file's fields at ``indexes``, level by level."""
    names: list[str] = []
    fields: list[pa.Field] = list(file_schema)
    for index in indexes:
        field = fields[index]
        names.append(field.name)
        fields = list(field.type) if pa.types.is_struct(field.type) else []
    return names


def _dotted(path: Sequence[pa.Field]) -> str:
    return ".".join(f.name for f in path)


def _spark_reads_as(old: Any, new: Any) -> bool:
    """Whether Spark's parquet reader reads a file column of Iceberg type ``old`` as ``new``: the
    same type, or one of Iceberg's promotions that Spark 4 widens while reading (int to long, float
    to double, a decimal's precision)."""
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType, LongType

    if old == new:
        return True
    if isinstance(old, IntegerType) and isinstance(new, LongType):
        return True
    if isinstance(old, FloatType) and isinstance(new, DoubleType):
        return True
    if isinstance(old, DecimalType) and isinstance(new, DecimalType):
        return old.scale == new.scale and old.precision <= new.precision
    return False
