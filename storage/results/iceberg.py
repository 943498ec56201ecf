"""Cached results as Iceberg tables in a scratch namespace of a pyiceberg catalog.

Reads go through the spec API (``storage.spec.spark_source.read_table``), so a filter prunes files
by partition and column statistics before Spark opens anything.

Writing: the table is created when the DataFrame's schema is known (at ``write``), Spark writes
parquet into the table's ``data/`` folder, and pyiceberg registers those files with ``add_files``.
Spark's files carry no Iceberg field ids; ``add_files`` records the table's name mapping
(``schema.name-mapping.default``), the spec's rule for such files, so every reader resolves the
columns to the ids the table assigned. Nothing is copied, so a 1 GB result costs one Spark write
plus reading the footers, not a second pass over the data.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

import pyarrow as pa
from pyarrow import fs as pafs

from storage.results.plugin import IntermediateResultStorage, WriteStats
from storage.results.registry import StorageUnavailable
from storage.secrets import mask_text, mask_url

DEFAULT_NAMESPACE = "lakewarden_cache"
DEFAULT_CATALOG_NAME = "lakewarden_cache"
# Keys of this backend's own; every other key is a pyiceberg catalog property.
OWN_KEYS = frozenset({"namespace", "name"})


def check_table_name(table_name: str) -> str:
    if not isinstance(table_name, str) or not table_name.strip():
        raise ValueError("a cached result needs a non-empty table name")
    if any(c in table_name for c in "./\\\x00") or table_name.startswith("."):
        raise ValueError(f"table name {table_name!r} must not contain '.', path separators or start with '.'")
    return table_name


def _where(uri: str) -> str:
    """host:port/database of a catalog URI, never its credentials."""
    try:
        parts = urlsplit(uri.replace("+psycopg2", "").replace("+psycopg", ""))
        host = parts.hostname or "localhost"
        port = f":{parts.port}" if parts.port else ""
        return f"{host}{port}{parts.path or ''}"
    except ValueError:
        return mask_url(uri)


def _scrub(message: str, config: Mapping[str, Any], secret_keys: frozenset[str]) -> str:
    """``message`` without any secret value or URL password that may have leaked into it."""
    return mask_text(message, secrets=[config.get(key) for key in secret_keys])


def spark_path(location: str) -> str:
    """A location as Spark's Hadoop filesystems spell it (``s3://`` is ``s3a://`` there)."""
    if location.startswith("s3://"):
        return "s3a://" + location[len("s3://") :]
    if "://" not in location and not location.startswith("file:"):
        return "file://" + location
    return location


class IcebergStorage(IntermediateResultStorage):
    type_name: ClassVar[str] = "iceberg"
    description: ClassVar[str] = (
        "Iceberg tables in a scratch namespace of a pyiceberg catalog (reads prune by statistics)"
    )
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "type": {"type": "string", "description": "pyiceberg catalog type (sql, rest, hive, glue)"},
            "uri": {"type": "string", "minLength": 1, "description": "catalog URI (SQLAlchemy URL for sql)"},
            "warehouse": {"type": "string", "description": "where new tables go, e.g. file:///lake/cache"},
            "namespace": {"type": "string", "pattern": r"^[A-Za-z_][A-Za-z0-9_]*$"},
            "name": {"type": "string", "minLength": 1, "description": "catalog name"},
            "credential": {"type": "string"},
            "token": {"type": "string"},
        },
        # Dotted pyiceberg properties: s3.endpoint, s3.access-key-id, pool_size-like keys excluded.
        "patternProperties": {r"^[a-z0-9_-]+(\.[A-Za-z0-9_-]+)+$": {"type": ["string", "number", "boolean"]}},
        "required": ["uri"],
        "additionalProperties": False,
    }
    secret_keys: ClassVar[frozenset[str]] = frozenset(
        {
            "uri",
            "credential",
            "token",
            "s3.secret-access-key",
            "s3.session-token",
            "adls.account-key",
            "adls.sas-token",
            "gcs.oauth2.token",
        }
    )

    def __init__(self) -> None:
        super().__init__()
        self._catalog: Any = None

    def configure(self, config: Mapping[str, Any]) -> None:
        super().configure(config)
        self.namespace = str(self.config.get("namespace") or DEFAULT_NAMESPACE)
        self.close()

    def catalog(self) -> Any:
        """The pyiceberg catalog, connected on first use; StorageUnavailable when it cannot be."""
        if self._catalog is None:
            from pyiceberg.catalog import load_catalog

            properties = {k: str(v) for k, v in self.config.items() if k not in OWN_KEYS}
            properties.setdefault("type", "sql")
            try:
                self._catalog = load_catalog(
                    str(self.config.get("name") or DEFAULT_CATALOG_NAME), **properties
                )
            except Exception as exc:
                reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
                message = _scrub(reason[0] if reason else type(exc).__name__, self.config, self.secret_keys)
                raise StorageUnavailable(
                    f"cannot connect to the iceberg catalog at {_where(str(self.config['uri']))}: {message}"
                ) from None
        return self._catalog

    def close(self) -> None:
        """Release the catalog's connections (SQL catalogs keep a pool)."""
        engine = getattr(self._catalog, "engine", None)
        if engine is not None:
            engine.dispose()
        self._catalog = None

    def verify(self) -> None:
        """Connect and list namespaces (``StorageUnavailable``, an ``OSError``, when refused)."""
        try:
            self.catalog().list_namespaces()
        except StorageUnavailable:
            raise
        except Exception as exc:  # pyiceberg's and the database driver's own errors
            reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
            message = _scrub(reason[0] if reason else type(exc).__name__, self.config, self.secret_keys)
            raise StorageUnavailable(
                f"cannot reach the iceberg catalog at {_where(str(self.config['uri']))}: {message}"
            ) from None
        finally:
            self.close()

    # -- hooks -------------------------------------------------------------------------------------

    def create(self, table_name: str, properties: Mapping[str, Any]) -> dict[str, Any]:
        check_table_name(table_name)
        self.catalog().create_namespace_if_not_exists(self.namespace)
        # The table itself is created by ``write``: its schema is the DataFrame's.
        return {**properties, "identifier": f"{self.namespace}.{table_name}"}

    def write(self, dataframe: Any, properties: Mapping[str, Any]) -> WriteStats:
        from pyspark.sql.pandas.types import to_arrow_schema

        identifier = self._identifier(properties)
        catalog = self.catalog()
        self._drop(identifier)  # writing again replaces the result
        catalog.create_namespace_if_not_exists(self.namespace)  # dropped since create, perhaps
        arrow_schema = to_arrow_schema(dataframe.schema, timezone="UTC")
        # Every column optional: Spark's nullability is a hint, and a required Iceberg column
        # refuses a file column Spark happened to write as optional.
        arrow_schema = pa.schema([f.with_nullable(True) for f in arrow_schema])
        table = catalog.create_table(identifier, schema=arrow_schema)
        try:
            staging = f"{table.location().rstrip('/')}/data/{uuid.uuid4().hex}"
            dataframe.write.mode("errorifexists").parquet(spark_path(staging))
            files = self._parquet_files(table, staging)
            if files:
                table.add_files(files)
            table = catalog.load_table(identifier)
        except BaseException:
            self._drop(identifier)  # nothing half-written stays behind
            raise
        snapshot = table.current_snapshot()
        summary = snapshot.summary if snapshot is not None else None
        rows = int(summary["total-records"]) if summary is not None else 0
        size = int(summary["total-files-size"]) if summary is not None else 0
        return WriteStats(rows=rows, size_bytes=size)

    def read(
        self,
        spark: Any,
        properties: Mapping[str, Any],
        columns: list[str] | None = None,
        filters: Any = None,
    ) -> Any:
        from storage.spec.spark_source import read_table

        table = self._load(self._identifier(properties))
        return read_table(spark, table.metadata_location, format="iceberg", filters=filters, columns=columns)

    def exists(self, properties: Mapping[str, Any]) -> bool:
        identifier = self._identifier(properties)
        if not self.catalog().table_exists(identifier):
            return False
        try:
            paths = [f.path for f in self.spec_table(properties).file_index().list_files_at()]
        except Exception:
            return False  # metadata or manifests gone: the result must be recomputed
        table = self._load(identifier)
        filesystem, _ = self._filesystem(table, table.metadata_location)
        infos = filesystem.get_file_info([self._fs_path(table, p) for p in paths])
        return all(info.type == pafs.FileType.File for info in infos)

    def clean(self, table_names: list[str], properties: Mapping[str, Mapping[str, Any]]) -> None:
        for name in table_names:
            self._drop(self._identifier(properties[name]))

    # -- helpers -----------------------------------------------------------------------------------

    def spec_table(self, properties: Mapping[str, Any]) -> Any:
        """The stored result as a spec API table (listing, pruning, splits)."""
        from storage.spec.registry import load_table

        return load_table(self._load(self._identifier(properties)).metadata_location, format="iceberg")

    def _identifier(self, properties: Mapping[str, Any]) -> str:
        identifier = str(properties["identifier"])
        namespace, _, name = identifier.rpartition(".")
        # the properties come back from the database: only ever touch our own namespace
        if namespace != self.namespace:
            raise ValueError(f"{identifier} is not in the cache namespace {self.namespace}")
        check_table_name(name)
        return identifier

    def _load(self, identifier: str) -> Any:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return self.catalog().load_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            raise FileNotFoundError(f"no stored result: the catalog has no table {identifier}") from None

    def _drop(self, identifier: str) -> None:
        """Drop the table and delete its folder (data, metadata, staging leftovers)."""
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        catalog = self.catalog()
        namespace, _, name = identifier.rpartition(".")
        try:
            table = catalog.load_table(identifier)
            location = table.location()
        except (NoSuchTableError, NoSuchNamespaceError):
            table, location = None, None
        except Exception:  # metadata file gone: still drop the entry and the default folder
            table, location = None, self._default_location(namespace, name)
        try:
            catalog.drop_table(identifier)
        except (NoSuchTableError, NoSuchNamespaceError):
            pass
        if location is None:
            location = self._default_location(namespace, name)
        if not location or location.rstrip("/").rsplit("/", 1)[-1] != name:
            return  # a location we did not choose: never delete a folder not named after the table
        filesystem, path = self._filesystem(table, location)
        try:
            filesystem.delete_dir(path)
        except FileNotFoundError:
            pass

    def _default_location(self, namespace: str, name: str) -> str | None:
        resolve = getattr(self.catalog(), "_resolve_table_location", None)
        try:
            return resolve(None, namespace, name) if resolve else None
        except Exception:
            return None

    def _filesystem(self, table: Any, location: str) -> tuple[pafs.FileSystem, str]:
        """A pyarrow filesystem for ``location`` carrying the catalog's storage credentials."""
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import PyArrowFileIO

        io = table.io if table is not None else load_file_io(self.catalog().properties, location)
        if isinstance(io, PyArrowFileIO):
            scheme, netloc, path = io.parse_location(location, io.properties)
            return io.fs_by_scheme(scheme, netloc), path
        filesystem, path = pafs.FileSystem.from_uri(location)
        return filesystem, path

    def _fs_path(self, table: Any, location: str) -> str:
        return self._filesystem(table, location)[1]

    def _parquet_files(self, table: Any, folder: str) -> list[str]:
        filesystem, path = self._filesystem(table, folder)
        infos = filesystem.get_file_info(pafs.FileSelector(path, recursive=False))
        prefix = folder.rstrip("/")
        return sorted(
            f"{prefix}/{info.base_name}"
            for info in infos
            if info.type == pafs.FileType.File
            and info.base_name.endswith(".parquet")
            and not info.base_name.startswith(("_", "."))
        )
