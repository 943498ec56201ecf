"""Cached results as parquet folders under a root folder: ``<root>/<table name>/part-*.parquet``.

The default backend. The root is a local folder or an object-store prefix (``s3://results/cache``,
with ``s3.*`` credentials in the configuration; ``storage.results.objectstore`` does that work).
Locally, Spark writes the folder; reads prune files whose footer statistics cannot
match the filter (pyarrow answers from the row group statistics) before Spark, which prunes row
groups inside the files it does open.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from storage.io import PathNotAllowed, is_object_store
from storage.results.objectstore import ObjectStoreFolders, store_options
from storage.results.parquet import check_columns, prune_files, quoted
from storage.results.plugin import IntermediateResultStorage, WriteStats
from storage.results.registry import StorageConfigError

logger = logging.getLogger(__name__)

STAGING_MARK = ".writing-"
#: An object-store root's connection settings (StoreOptions' ``s3.*`` names), besides the timeouts.
S3_STRING_KEYS = (
    "s3.endpoint",
    "s3.access-key-id",
    "s3.secret-access-key",
    "s3.session-token",
    "s3.region",
)
# Written last into each result folder: the files that make the result (Spark ignores ``_*`` names).
MANIFEST = "_lakewarden_files.json"


def check_table_name(table_name: str) -> str:
    """``table_name`` when it names one folder or table: no path separators, no ``..``."""
    if not isinstance(table_name, str) or not table_name.strip():
        raise ValueError("a cached result needs a non-empty table name")
    if "/" in table_name or "\\" in table_name or "\x00" in table_name or ".." in table_name:
        raise ValueError(f"table name {table_name!r} must not contain path separators or '..'")
    if table_name.startswith("."):
        raise ValueError(f"table name {table_name!r} must not start with '.'")
    return table_name


def parquet_files(folder: str | os.PathLike[str]) -> list[str]:
    """The data files of a Spark-written folder, sorted (Spark ignores ``_*`` and ``.*`` names)."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(
        os.path.join(folder, name)
        for name in names
        if name.endswith(".parquet") and not name.startswith(("_", "."))
    )


def listed_files(folder: Path) -> list[str] | None:
    """The files the folder's manifest lists, None when it has no (readable) manifest."""
    try:
        names = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [str(folder / name) for name in names]


def footer_stats(files: list[str]) -> WriteStats:
    """Rows from the parquet footers (no data read), bytes from the files on disk."""
    rows = sum(pq.read_metadata(path).num_rows for path in files)
    return WriteStats(rows=rows, size_bytes=sum(os.path.getsize(path) for path in files))


class FilesystemStorage(IntermediateResultStorage):
    type_name: ClassVar[str] = "filesystem"
    description: ClassVar[str] = "Parquet files in a folder per result, under a root folder"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "root": {
                "type": "string",
                "minLength": 1,
                "description": "absolute folder, or object-store prefix (s3://results/cache/), holding "
                "one sub-folder per cached result",
            },
            **{key: {"type": "string"} for key in S3_STRING_KEYS},
            **{key: {"type": ["string", "number"]} for key in ("s3.connect-timeout", "s3.request-timeout")},
            "s3.path-style-access": {"type": ["string", "boolean"]},
        },
        "required": ["root"],
        "additionalProperties": False,
    }
    secret_keys: ClassVar[frozenset[str]] = frozenset({"s3.secret-access-key", "s3.session-token"})

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        root = str(self.config["root"])
        self.store: ObjectStoreFolders | None = None
        if is_object_store(root):
            try:
                self.store = ObjectStoreFolders(root, store_options(self.config))
            except (PathNotAllowed, ValueError) as error:
                raise StorageConfigError(f"root: {error}") from None
            return
        if any(str(key).startswith("s3.") for key in self.config):
            raise StorageConfigError("s3.* settings apply to an object-store root (s3://...) only")
        if not os.path.isabs(root):
            raise StorageConfigError(f"root: must be an absolute folder or an s3:// prefix, not {root!r}")
        self.root = Path(root)

    def verify(self) -> None:
        if self.store is not None:
            self.store.verify()

    # -- hooks -------------------------------------------------------------------------------------

    def create(self, table_name: str, properties: Mapping[str, Any]) -> dict[str, Any]:
        if self.store is not None:
            location = self.store.location(check_table_name(table_name))
            self.store.create(location)
            return {**properties, "path": location}
        path = self.root / check_table_name(table_name)
        path.mkdir(parents=True, exist_ok=True)
        return {**properties, "path": str(path)}

    def write(self, dataframe: Any, properties: Mapping[str, Any]) -> WriteStats:
        if self.store is not None:
            return self.store.write(dataframe, str(properties["path"]))
        path = self._path(properties)
        # Written beside the folder then renamed in: a failed write leaves the old result (or
        # nothing) in place, never half a folder that ``exists`` would take for a result.
        staging = path.with_name(f".{path.name}{STAGING_MARK}{uuid.uuid4().hex}")
        try:
            dataframe.write.mode("overwrite").parquet(staging.as_uri())
            files = parquet_files(staging)
            stats = footer_stats(files)
            manifest = {"files": [os.path.basename(f) for f in files], "rows": stats.rows}
            (staging / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
            shutil.rmtree(path, ignore_errors=True)
            os.replace(staging, path)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return stats

    def read(
        self,
        spark: Any,
        properties: Mapping[str, Any],
        columns: list[str] | None = None,
        filters: Any = None,
    ) -> Any:
        from pyspark.sql import functions as F

        from storage.spec.expressions import to_spark

        if self.store is not None:
            return self.store.read(spark, str(properties["path"]), columns, filters)
        path = self._path(properties)
        if not self.exists(properties):
            raise FileNotFoundError(f"no stored result at {path}: its files are gone")
        files = self._files(path)
        schema = pq.read_schema(files[0])
        columns = check_columns(columns, schema)
        expr = self._bind(filters, schema)
        kept = prune_files(files, expr) if expr is not None else files
        if kept:
            frame = spark.read.parquet(*[Path(f).as_uri() for f in kept])
        else:
            # no file can match: an empty frame with the stored schema, without scanning anything
            frame = spark.read.parquet(Path(files[0]).as_uri()).where(F.lit(False))
        if expr is not None:
            frame = frame.where(to_spark(expr))
        if columns is not None:
            frame = frame.select(*[quoted(c) for c in columns])
        return frame

    def exists(self, properties: Mapping[str, Any]) -> bool:
        """Every file the write produced is still there (an empty result has one empty file)."""
        if self.store is not None:
            return self.store.exists(str(properties["path"]))
        listed = listed_files(self._path(properties))
        if not listed:
            return False
        return all(os.path.isfile(f) for f in listed)

    def clean(self, table_names: list[str], properties: Mapping[str, Mapping[str, Any]]) -> None:
        """Deletes each result folder; one outside the root (left by a move of the storage) is kept."""
        for name in table_names:
            try:
                if self.store is not None:
                    self.store.clean(str(properties[name]["path"]))
                    continue
                path = self._path(properties[name])
            except ValueError as error:
                logger.warning("kept result %s: %s", name, error)
                continue
            shutil.rmtree(path, ignore_errors=True)
            # an interrupted write's staging folder, if any
            for leftover in path.parent.glob(f".{path.name}{STAGING_MARK}*"):
                shutil.rmtree(leftover, ignore_errors=True)

    def batches(self, properties: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
        if self.store is not None:
            return self.store.batches(str(properties["path"]))
        path = self._path(properties)
        if not self.exists(properties):
            raise FileNotFoundError(f"no stored result at {path}: its files are gone")
        return (batch for name in self._files(path) for batch in pq.ParquetFile(name).iter_batches())

    # -- helpers -----------------------------------------------------------------------------------

    def data_files(self, properties: Mapping[str, Any], filters: Any = None) -> list[str]:
        """The parquet files a read with ``filters`` opens (all of them without a filter)."""
        if self.store is not None:
            return self.store.data_files(str(properties["path"]), filters)
        files = self._files(self._path(properties))
        if not files or filters is None:
            return files
        expr = self._bind(filters, pq.read_schema(files[0]))
        return prune_files(files, expr) if expr is not None else files

    @staticmethod
    def _files(path: Path) -> list[str]:
        listed = listed_files(path)
        return listed if listed is not None else parquet_files(path)

    def _path(self, properties: Mapping[str, Any]) -> Path:
        path = Path(str(properties["path"]))
        # the properties come back from the database: never act outside our root
        if path.parent != self.root:
            raise ValueError(f"{path} is not a result folder under {self.root}")
        check_table_name(path.name)
        return path

    @staticmethod
    def _bind(filters: Any, schema: pa.Schema) -> Any:
        from storage.spec.expressions import bind_filter

        return bind_filter(filters, schema)
