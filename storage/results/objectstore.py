"""Cached results as parquet objects under an object-store root: ``s3://results/cache/<name>/``.

The ``filesystem`` storage hands its object-store roots here. Spark needs no ``s3a`` support: its
tasks write and read the parquet files themselves through pyarrow's file system, with the storage's
``s3.*`` credentials (signed requests, connect and request timeouts). There are no renames on an
object store, so a write puts files under fresh names, then the manifest naming them (the commit),
then deletes what the folder held before; a failed write deletes the files it put.
"""

from __future__ import annotations

import functools
import json
import posixpath
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.io import PathNotAllowed, StoreError, StoreOptions, describe_error, filesystem, normalise
from storage.results.parquet import check_columns, prune_files, quoted
from storage.results.plugin import WriteStats

MANIFEST = "_lakewarden_files.json"
_WRITTEN = pa.schema([("file", pa.string()), ("rows", pa.int64()), ("bytes", pa.int64())])
_WRITTEN_DDL = "file string, rows long, bytes long"


class ObjectStoreFolders:
    """One folder (key prefix) per result under ``root``, reached with ``options``."""

    def __init__(self, root: str, options: StoreOptions) -> None:
        self.root = normalise(root)
        self.options = options

    # -- locations ---------------------------------------------------------------------------

    def location(self, name: str) -> str:
        return f"{self.root}/{name}"

    def checked(self, location: str) -> str:
        """``location`` when it is a result folder right under the root (properties come back from
        the database: never act outside the root)."""
        try:
            normalised = normalise(location)
        except PathNotAllowed as error:
            raise ValueError(f"{location} is not a result folder under {self.root}: {error}") from None
        if posixpath.dirname(normalised) != self.root:
            raise ValueError(f"{location} is not a result folder under {self.root}")
        return normalised

    def _fs(self, location: str) -> tuple[pafs.FileSystem, str]:
        return filesystem(location, self.options)

    def verify(self) -> None:
        """The root's bucket exists and answers these credentials; StoreError naming the root."""
        fs, path = self._fs(self.root)
        bucket = path.split("/", 1)[0]
        try:
            if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
                raise StoreError(f"{self.root}: bucket {bucket!r} does not exist")
            fs.get_file_info(pafs.FileSelector(path, allow_not_found=True, recursive=False))
        except StoreError:
            raise
        except OSError as error:
            raise StoreError(describe_error(self.root, error)) from None

    # -- hooks -------------------------------------------------------------------------------

    def create(self, location: str) -> None:
        fs, path = self._fs(self.checked(location))
        self._call(location, fs.create_dir, path, recursive=True)

    def write(self, dataframe: Any, location: str) -> WriteStats:
        from pyspark.sql.pandas.types import to_arrow_schema

        location = self.checked(location)
        fs, folder = self._fs(location)
        token = uuid.uuid4().hex[:12]
        schema = to_arrow_schema(dataframe.schema, timezone="UTC")
        task = functools.partial(
            _write_partition,
            location=location,
            options=self.options.to_json(),
            token=token,
            schema=schema.serialize().to_pybytes(),
        )
        try:
            written = [
                (r["file"], r["rows"], r["bytes"]) for r in dataframe.mapInArrow(task, _WRITTEN_DDL).collect()
            ]
            if not written:  # an empty result is one empty file, so its schema is kept
                written = [_write_file(fs, folder, token, schema, iter(()))]
            rows = sum(w[1] for w in written)
            manifest = {"files": sorted(w[0] for w in written), "rows": rows}
            with fs.open_output_stream(f"{folder}/{MANIFEST}") as out:
                out.write(json.dumps(manifest).encode("utf-8"))
        except OSError as error:
            self._delete_marked(fs, folder, token)
            raise StoreError(describe_error(location, error)) from None
        except BaseException:
            self._delete_marked(fs, folder, token)
            raise
        # committed: what the previous result (or a retried task) left goes
        keep = {MANIFEST, *manifest["files"]}
        for info in self._listing(fs, folder):
            if info.type == pafs.FileType.File and posixpath.basename(info.path) not in keep:
                fs.delete_file(info.path)
        return WriteStats(rows=rows, size_bytes=sum(w[2] for w in written))

    def read(self, spark: Any, location: str, columns: list[str] | None, filters: Any) -> Any:
        from storage.spec.expressions import bind_filter, to_spark
        from storage.spec.spark.types import arrow_schema_to_spark

        location = self.checked(location)
        fs, folder = self._fs(location)
        files = self._listed(fs, folder)
        if not files or not self._all_there(fs, files):
            raise FileNotFoundError(f"no stored result at {location}: its files are gone")
        schema = self._call(location, pq.read_schema, files[0], filesystem=fs)
        columns = check_columns(columns, schema)
        expr = bind_filter(filters, schema)
        kept = prune_files(files, expr, fs) if expr is not None else files
        spark_schema = arrow_schema_to_spark(schema)
        if kept:
            task = functools.partial(
                _read_files,
                location=location,
                options=self.options.to_json(),
                schema=spark_schema.json(),
                expr=expr,
            )
            paths = spark.createDataFrame([(path,) for path in kept], "path string")
            frame = paths.repartition(len(kept)).mapInArrow(task, spark_schema)
        else:
            frame = spark.createDataFrame([], spark_schema)
        if expr is not None:
            frame = frame.where(to_spark(expr))
        if columns is not None:
            frame = frame.select(*[quoted(c) for c in columns])
        return frame

    def exists(self, location: str) -> bool:
        fs, folder = self._fs(self.checked(location))
        files = self._listed(fs, folder)
        return files is not None and bool(files) and self._all_there(fs, files)

    def clean(self, location: str) -> None:
        location = self.checked(location)
        fs, folder = self._fs(location)
        try:
            fs.delete_dir(folder)
        except FileNotFoundError:
            return
        except OSError as error:
            if fs.get_file_info(folder).type != pafs.FileType.NotFound:
                raise StoreError(describe_error(location, error)) from None

    def batches(self, location: str) -> Iterator[pa.RecordBatch]:
        """Every stored row, file by file, as Arrow record batches (no Spark)."""
        location = self.checked(location)
        fs, folder = self._fs(location)
        files = self._listed(fs, folder)
        if not files or not self._all_there(fs, files):
            raise FileNotFoundError(f"no stored result at {location}: its files are gone")
        for path in files:
            with fs.open_input_file(path) as source:
                yield from pq.ParquetFile(source).iter_batches()

    def data_files(self, location: str, filters: Any = None) -> list[str]:
        from storage.spec.expressions import bind_filter

        location = self.checked(location)
        fs, folder = self._fs(location)
        files = self._listed(fs, folder) or []
        if files and filters is not None:
            expr = bind_filter(filters, pq.read_schema(files[0], filesystem=fs))
            files = prune_files(files, expr, fs) if expr is not None else files
        return [f"{location}/{posixpath.basename(path)}" for path in files]

    # -- helpers -----------------------------------------------------------------------------

    def _call(self, location: str, action: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return action(*args, **kwargs)
        except FileNotFoundError:
            raise
        except OSError as error:
            raise StoreError(describe_error(location, error)) from None

    @staticmethod
    def _listing(fs: pafs.FileSystem, folder: str) -> list[pafs.FileInfo]:
        return fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True, recursive=True))

    @staticmethod
    def _listed(fs: pafs.FileSystem, folder: str) -> list[str] | None:
        """The files the manifest names (paths on ``fs``); None without a readable manifest."""
        try:
            with fs.open_input_stream(f"{folder}/{MANIFEST}") as stream:
                names = json.loads(stream.read().decode("utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return [f"{folder}/{name}" for name in names]

    @staticmethod
    def _all_there(fs: pafs.FileSystem, files: list[str]) -> bool:
        return all(info.type == pafs.FileType.File for info in fs.get_file_info(files))

    @staticmethod
    def _delete_marked(fs: pafs.FileSystem, folder: str, token: str) -> None:
        """Delete the files a write marked with ``token`` (best effort: orphans are not results)."""
        try:
            for info in ObjectStoreFolders._listing(fs, folder):
                if posixpath.basename(info.path).startswith(f"part-{token}-"):
                    fs.delete_file(info.path)
        except OSError:
            pass


# -- Spark tasks (run on executors: module-level functions, arguments picklable) ---------------


def _write_file(
    fs: pafs.FileSystem, folder: str, token: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch]
) -> tuple[str, int, int]:
    name = f"part-{token}-{uuid.uuid4().hex[:12]}.parquet"
    rows = 0
    with fs.open_output_stream(f"{folder}/{name}") as sink:
        with pq.ParquetWriter(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch.cast(schema))
                rows += batch.num_rows
        size = sink.tell()
    return name, rows, size


def _write_partition(
    batches: Iterator[pa.RecordBatch], *, location: str, options: str, token: str, schema: bytes
) -> Iterator[pa.RecordBatch]:
    """One parquet file of a partition's rows (none for an empty partition) and its stats."""
    arrow_schema = pa.ipc.read_schema(pa.py_buffer(schema))
    first = next((batch for batch in batches if batch.num_rows), None)
    if first is None:
        return
    fs, folder = filesystem(location, StoreOptions.from_json(options))
    rest = (batch for batch in batches if batch.num_rows)
    name, rows, size = _write_file(fs, folder, token, arrow_schema, _chain(first, rest))
    yield pa.RecordBatch.from_pylist([{"file": name, "rows": rows, "bytes": size}], schema=_WRITTEN)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest


def _read_files(
    batches: Iterator[pa.RecordBatch], *, location: str, options: str, schema: str, expr: Any
) -> Iterator[pa.RecordBatch]:
    """The rows of the parquet files named in ``batches`` (a ``path`` column), filtered by
    ``expr`` with row-group pruning, in the Spark schema's Arrow form."""
    from pyspark.sql import types as T
    from pyspark.sql.pandas.types import to_arrow_schema

    from storage.spec.expressions import to_arrow
    from storage.spec.spark.types import conform_batch

    output = to_arrow_schema(T.StructType.fromJson(json.loads(schema)), timezone="UTC")
    arrow_filter = to_arrow(expr) if expr is not None else None
    fs, _ = filesystem(location, StoreOptions.from_json(options))
    for paths in batches:
        for path in paths.column("path").to_pylist():
            dataset = pads.dataset(path, format="parquet", filesystem=fs)
            for batch in dataset.to_batches(filter=arrow_filter):
                if batch.num_rows:
                    yield conform_batch(batch, output)


def store_options(config: Mapping[str, Any]) -> StoreOptions:
    """The ``s3.*`` keys of a storage configuration over the environment's defaults."""
    return StoreOptions.from_properties({k: v for k, v in config.items() if str(k).startswith("s3.")})
