"""What the parquet-file result storages share: checking a projection, quoting a column name, pruning
files by their footer statistics (local or on an object store)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs


def quoted(name: str) -> Any:
    """A Spark column for ``name`` however odd its characters (backticks doubled)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def check_columns(columns: list[str] | None, schema: pa.Schema) -> list[str] | None:
    """``columns`` when every one is in ``schema``; ValueError naming the unknown ones."""
    if columns is None:
        return None
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise ValueError(f"unknown column(s) {', '.join(unknown)}; columns are: {', '.join(schema.names)}")
    return list(columns)


def prune_files(files: list[str], expr: Any, filesystem: pafs.FileSystem | None = None) -> list[str]:
    """Files with at least one row group whose statistics may match ``expr`` (footers only)."""
    from storage.spec.expressions import to_arrow

    arrow_filter = to_arrow(expr)
    kept = []
    for fragment in pads.dataset(files, format="parquet", filesystem=filesystem).get_fragments():
        try:
            if fragment.subset(filter=arrow_filter).num_row_groups:
                kept.append(fragment.path)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
            kept.append(fragment.path)  # statistics pyarrow cannot use: the file might match
    return kept
