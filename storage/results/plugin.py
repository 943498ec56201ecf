"""Intermediate result storage: where cached query results live (plain Python, no Django).

A storage type is an ``IntermediateResultStorage`` subclass registered under the
``lakewarden.result_storages`` entry-point group::

    [project.entry-points."lakewarden.result_storages"]
    my-store = "my_package.store:MyStorage"

Lakewarden instantiates it without arguments, validates the configuration against
``config_schema`` (a JSON Schema; keys listed in ``secret_keys`` are never shown back), then calls
``configure(config)``. For each cached result the cache manager calls:

1. ``create(table_name, properties)``: the creation hook. Prepare the physical location for the
   logical ``table_name`` and return the properties that locate it in this backend (a folder, a
   table identifier...). Those properties are stored with the cached result and passed to every
   later call.
2. ``write(dataframe, properties)``: store a Spark DataFrame; returns ``WriteStats``.
3. ``read(spark, properties, columns=None, filters=None)``: a Spark DataFrame of the stored rows,
   with ``columns`` projected and ``filters`` (an ``storage.spec.expressions`` expression) pushed
   down where the backend can; rows not matching must not be returned either way.
4. ``exists(properties)``: whether the stored data is still there (the cache recomputes once when
   it is not).
5. ``clean(table_names, properties)``: the cleanup hook. Delete the stored data of those names and
   reclaim the space; ``properties`` maps each name to its properties. Cleaning something already
   gone is not an error.

Optionally, ``verify()`` checks that the configured place can be reached (registration and edits
call it, so a wrong password or a missing bucket is refused then); it raises an ``OSError`` whose
message names the place and never a secret, within a bounded time. The default does nothing.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import yaml

if TYPE_CHECKING:
    import pyarrow as pa

RESERVED_PREFIX = "intermediate-result-storage"
TYPE_KEY = f"{RESERVED_PREFIX}.type"
CONFIG_PREFIX = f"{RESERVED_PREFIX}.config."


@dataclass(frozen=True)
class WriteStats:
    rows: int
    size_bytes: int


class IntermediateResultStorage(abc.ABC):
    type_name: ClassVar[str]
    description: ClassVar[str] = ""
    config_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    secret_keys: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        self.config: dict[str, Any] = {}

    def configure(self, config: Mapping[str, Any]) -> None:
        self.config = dict(config)

    def verify(self) -> None:
        """Raise an ``OSError`` naming the location when the configured place cannot be reached."""
        return None  # optional hook: nothing to check by default

    @abc.abstractmethod
    def create(self, table_name: str, properties: Mapping[str, Any]) -> dict[str, Any]: ...

    @abc.abstractmethod
    def write(self, dataframe, properties: Mapping[str, Any]) -> WriteStats: ...

    @abc.abstractmethod
    def read(self, spark, properties: Mapping[str, Any], columns: list[str] | None = None, filters=None): ...

    @abc.abstractmethod
    def exists(self, properties: Mapping[str, Any]) -> bool: ...

    @abc.abstractmethod
    def clean(self, table_names: list[str], properties: Mapping[str, Mapping[str, Any]]) -> None: ...

    def batches(self, properties: Mapping[str, Any]) -> Iterator[pa.RecordBatch]:
        """Optional: every stored row as Arrow record batches, read without Spark (the console
        streams a whole cached result out as CSV or Parquet through it). ``FileNotFoundError``
        when the data is gone; the default says this storage cannot."""
        raise NotImplementedError(f"a {self.type_name} storage is read through Spark only")


@dataclass
class StorageDescriptor:
    """A storage registration: a type and its configuration, from code, YAML or the console.

    In code::

        StorageDescriptor().with_type("filesystem").with_config("root", "/lake/cache")

    From YAML (``intermediate-result-storage: {type: ..., config: {...}}``) with ``from_yaml``.
    Both flatten to the reserved keys ``intermediate-result-storage.type`` and
    ``intermediate-result-storage.config.<key>`` (``to_properties``), the one form the registry reads.
    """

    type: str | None = None
    config: dict[str, Any] = field(default_factory=dict)

    def with_type(self, type_name: str) -> StorageDescriptor:
        self.type = type_name
        return self

    def with_config(self, key: str, value: Any) -> StorageDescriptor:
        self.config[key] = value
        return self

    def to_properties(self) -> dict[str, Any]:
        properties: dict[str, Any] = {TYPE_KEY: self.type}
        properties.update({CONFIG_PREFIX + key: value for key, value in self.config.items()})
        return properties

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> StorageDescriptor:
        unknown = [k for k in properties if k != TYPE_KEY and not k.startswith(CONFIG_PREFIX)]
        if unknown:
            raise ValueError(
                f"unknown keys {', '.join(sorted(unknown))}: use {TYPE_KEY} and {CONFIG_PREFIX}<key>"
            )
        if not properties.get(TYPE_KEY):
            raise ValueError(f"{TYPE_KEY} is missing")
        config = {k[len(CONFIG_PREFIX) :]: v for k, v in properties.items() if k.startswith(CONFIG_PREFIX)}
        return cls(type=str(properties[TYPE_KEY]), config=config)

    @classmethod
    def from_yaml(cls, text: str) -> StorageDescriptor:
        document = yaml.safe_load(text) or {}
        section = document.get(RESERVED_PREFIX) if isinstance(document, dict) else None
        if not isinstance(section, dict):
            raise ValueError(f"the YAML has no '{RESERVED_PREFIX}:' mapping")
        unknown = set(section) - {"type", "config"}
        if unknown:
            raise ValueError(f"{RESERVED_PREFIX} has unknown keys: {', '.join(sorted(unknown))}")
        config = section.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"{RESERVED_PREFIX}.config must be a mapping")
        flat: dict[str, Any] = {TYPE_KEY: section.get("type")}
        flat.update({CONFIG_PREFIX + str(k): v for k, v in config.items()})
        return cls.from_properties(flat)
