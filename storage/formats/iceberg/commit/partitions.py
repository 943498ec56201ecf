"""Partitions of the output spec: rows split by their partition, and the partition key carried
back from a Spark task as JSON."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyiceberg.typedef import Record


class OutputPartitioner:
    """Splits rows by their partition in the output spec (run in Spark tasks: picklable):
    [(key, rows)], the key being ``encode_partition`` of pyiceberg's partition record."""

    def __init__(self, spec: Any, schema: Any) -> None:
        self.spec, self.schema = spec, schema

    def __call__(self, rows: Any) -> list[tuple[str, Any]]:
        if not self.spec.fields:
            return [(encode_partition(()), rows)]
        from pyiceberg.io.pyarrow import _determine_partitions

        return [
            (encode_partition(part.partition_key.partition), part.arrow_table_partition)
            for part in _determine_partitions(self.spec, self.schema, rows)
        ]


def encode_partition(values: Any) -> str:
    """A partition record's values as JSON (bytes, decimals and UUIDs tagged)."""

    def encode(value: Any) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, bytes):
            return {"bytes": value.hex()}
        if isinstance(value, Decimal):
            return {"decimal": str(value)}
        if isinstance(value, uuid.UUID):
            return {"uuid": str(value)}
        raise TypeError(f"cannot carry a partition value of type {type(value).__name__}")

    return json.dumps([encode(values[i]) for i in range(len(values))])


#: ``encode_partition``'s tags, and how each reads its text back.
_DECODERS: dict[str, Callable[[str], object]] = {
    "bytes": bytes.fromhex,
    "decimal": Decimal,
    "uuid": uuid.UUID,
}


def decode_partition(key: str) -> Record:
    """The pyiceberg partition record of ``encode_partition``'s key."""
    from pyiceberg.typedef import Record

    def decode(value: object) -> object:
        if isinstance(value, dict):
            kind, text = next(iter(value.items()))
            return _DECODERS[kind](text)
        return value

    return Record(*[decode(v) for v in json.loads(key)])
