"""A projecting decoder for Iceberg manifests (Avro), built once per writer schema.

Why not decode records with fastavro: fastavro turns every record into a dict, including the
four or six per-column statistics maps (Iceberg encodes a map as an array of ``{key, value}``
records), so decoding a manifest entry with 8 columns builds ~50 small dicts, and its reader
schema projection is slower still. Measured on the listing benchmark, fastavro decoding alone
took half of pyiceberg's whole planning time. Here fastavro's ``block_reader`` still parses the
container and decompresses blocks, and the records are decoded by closures compiled from the
writer schema over pyiceberg's Cython ``BinaryDecoder`` primitives: fields listing does not need
are skipped without building objects, and ``int -> bytes`` maps (the bounds) are read by one C
call into a dict.
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import fastavro

try:
    from pyiceberg.avro.decoder_fast import CythonBinaryDecoder as Decoder
except ImportError:  # pragma: no cover - pyiceberg without its compiled extension
    from pyiceberg.avro.decoder import StreamingBinaryDecoder as _Streaming

    class Decoder(_Streaming):  # type: ignore[no-redef]
        def __init__(self, contents: bytes) -> None:
            super().__init__(io.BytesIO(contents))


Read = Callable[[Any], Any]

_read_int = Decoder.read_int
_DOUBLE = struct.Struct("<d")


def _read_double(dec: Any) -> float:
    # pyiceberg 0.12's Cython decoder returns doubles rounded to single precision
    # (apache/iceberg-python#3808): a double partition value 0.1 would read as 0.10000000149
    return float(_DOUBLE.unpack(dec.read(8))[0])


_PRIMITIVE_READ: dict[str, Read] = {
    "null": lambda dec: None,
    "boolean": Decoder.read_boolean,
    "int": Decoder.read_int,
    "long": Decoder.read_int,
    "float": Decoder.read_float,
    "double": _read_double,
    "bytes": Decoder.read_bytes,
    "string": Decoder.read_utf8,
}
_PRIMITIVE_SKIP: dict[str, Read] = {
    "null": lambda dec: None,
    "boolean": Decoder.skip_boolean,
    "int": Decoder.skip_int,
    "long": Decoder.skip_int,
    "float": Decoder.skip_float,
    "double": Decoder.skip_double,
    "bytes": Decoder.skip_bytes,
    "string": Decoder.skip_utf8,
}


def _block_count(dec: Any) -> int:
    """Item count of the next array/map block (a negative count is followed by a byte size)."""
    count = _read_int(dec)
    if count < 0:
        _read_int(dec)
        return -count
    return count


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "union"
    return schema["type"] if isinstance(schema["type"], str) else "nested"


class _Compiler:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}

    def compile(self, schema: Any, keep: Any) -> Read:
        """Reader of ``schema``; ``keep`` is True (everything), False (skip) or, for records, a
        mapping field name -> keep spec of the fields to return (others are skipped)."""
        if isinstance(schema, str):
            if schema in _PRIMITIVE_READ:
                return _PRIMITIVE_READ[schema] if keep else _PRIMITIVE_SKIP[schema]
            return self.compile(self.named[schema], keep)
        if isinstance(schema, list):
            return self._union(schema, keep)
        kind = schema["type"]
        if not isinstance(kind, str):
            return self.compile(kind, keep)
        if "name" in schema and kind in ("record", "enum", "fixed"):
            self.named[schema["name"]] = schema
        if kind in _PRIMITIVE_READ:
            return _PRIMITIVE_READ[kind] if keep else _PRIMITIVE_SKIP[kind]
        if kind == "record":
            return self._record(schema, keep)
        if kind == "array":
            return self._array(schema, keep)
        if kind == "map":
            return self._map(schema, keep)
        if kind == "enum":
            return _read_int if keep else Decoder.skip_int
        if kind == "fixed":
            size = schema["size"]
            if keep:
                return lambda dec: dec.read(size)
            return lambda dec: dec.skip(size)
        raise ValueError(f"unsupported Avro type {kind!r} in manifest schema")

    def _union(self, branches: list[Any], keep: Any) -> Read:
        readers = tuple(self.compile(b, keep) for b in branches)
        if len(branches) == 2 and branches[0] == "null":
            inner = readers[1]
            return lambda dec: None if _read_int(dec) == 0 else inner(dec)
        if len(branches) == 2 and branches[1] == "null":
            inner = readers[0]
            return lambda dec: inner(dec) if _read_int(dec) == 0 else None
        return lambda dec: readers[_read_int(dec)](dec)

    def _record(self, schema: dict[str, Any], keep: Any) -> Read:
        # Generated straight-line code: one statement per field, no per-field loop or branch,
        # optional fields (["null", T] unions) inlined. This is the hot path of listing.
        namespace: dict[str, Any] = {"_read_int": _read_int}
        body: list[str] = []
        for position, field in enumerate(schema["fields"]):
            if keep is True:
                wanted: Any = True
            elif keep is False:
                wanted = False
            else:
                wanted = keep.get(field["name"], False)
            field_type = field["type"]
            optional = isinstance(field_type, list) and len(field_type) == 2 and field_type[0] == "null"
            reader = f"_r{position}"
            inner = field_type[1] if optional else field_type
            namespace[reader] = self.compile(inner, wanted)
            inline = self._blocks_inline(inner, bool(wanted), f"out[{field['name']!r}]")
            if inline is not None:
                if optional:
                    null = f"out[{field['name']!r}] = None" if wanted else "pass"
                    inline = ["if _read_int(dec) == 0:", f"    {null}", "else:"] + [
                        f"    {x}" for x in inline
                    ]
                body.extend(f"    {line}" for line in inline)
                continue
            call = f"(None if _read_int(dec) == 0 else {reader}(dec))" if optional else f"{reader}(dec)"
            if wanted is False:
                body.append(f"    {call}")
            else:
                body.append(f"    out[{field['name']!r}] = {call}")
        if keep is False:
            source = "def read(dec):\n" + "\n".join(body or ["    pass"]) + "\n"
        else:
            source = "def read(dec):\n    out = {}\n" + "\n".join(body) + "\n    return out\n"
        exec(compile(source, f"<avro record {schema.get('name', '')}>", "exec"), namespace)  # noqa: S102
        return namespace["read"]

    def _blocks_inline(self, schema: Any, keep: bool, target: str) -> list[str] | None:
        """Source lines reading an Iceberg ``int -> bytes|long`` map or an ``int|long`` array
        into ``target`` (or skipping it), inlined in the record reader: a manifest entry holds
        up to eight of them, and a call per item or per field is most of what decoding costs."""
        if not isinstance(schema, dict) or schema.get("type") != "array":
            return None
        items = schema["items"]
        pair = _int_keyed_pair(items, self.named)
        if pair == "bytes":
            step = ["dec.read_int_bytes_dict(n, v)" if keep else "dec.read_int_bytes_dict(n, {})"]
        elif pair == "long":
            step = (
                ["m = dec.read_ints(2 * n)", "v.update(zip(m[::2], m[1::2]))"]
                if keep
                else ["dec.read_ints(2 * n)"]
            )
        elif items in ("int", "long"):
            step = ["v.extend(dec.read_ints(n))" if keep else "dec.read_ints(n)"]
        else:
            return None
        # a block count below zero is followed by the block's byte size
        lines = ["v = {}" if pair else "v = []"] if keep else []
        lines += ["while n := _read_int(dec):", "    if n < 0:", "        n = -n", "        _read_int(dec)"]
        lines += [f"    {x}" for x in step]
        return lines + ([f"{target} = v"] if keep else [])

    def _array(self, schema: dict[str, Any], keep: Any) -> Read:
        items = schema["items"]
        pair = _int_keyed_pair(items, self.named)
        if pair == "bytes" and keep:
            # Iceberg's map<int, binary> (bounds): one C call per block
            def read_int_bytes(dec: Any) -> dict[int, bytes]:
                out: dict[int, bytes] = {}
                while count := _block_count(dec):
                    dec.read_int_bytes_dict(count, out)
                return out

            return read_int_bytes
        if pair == "long":
            # Iceberg's map<int, long> (sizes, counts): both numbers are varints
            if keep:

                def read_int_long(dec: Any) -> dict[int, int]:
                    out: dict[int, int] = {}
                    while count := _block_count(dec):
                        numbers = dec.read_ints(2 * count)
                        out.update(zip(numbers[::2], numbers[1::2], strict=True))
                    return out

                return read_int_long

            def skip_int_long(dec: Any) -> None:
                while count := _block_count(dec):
                    dec.read_ints(2 * count)

            return skip_int_long
        item = self.compile(items, keep)
        if not keep:

            def skip_array(dec: Any) -> None:
                while count := _block_count(dec):
                    for _ in range(count):
                        item(dec)

            return skip_array

        def read_array(dec: Any) -> list[Any]:
            out = []
            while count := _block_count(dec):
                for _ in range(count):
                    out.append(item(dec))
            return out

        return read_array

    def _map(self, schema: dict[str, Any], keep: Any) -> Read:
        value = self.compile(schema["values"], keep)

        def read_map(dec: Any) -> dict[str, Any] | None:
            out = {}
            while count := _block_count(dec):
                for _ in range(count):
                    key = Decoder.read_utf8(dec)
                    out[key] = value(dec)
            return out if keep else None

        return read_map


def _int_keyed_pair(items: Any, named: dict[str, Any]) -> str | None:
    """ "bytes"/"long" when ``items`` is Iceberg's ``{key: int, value: bytes|long}`` map record."""
    if isinstance(items, str):
        items = named.get(items, items)
    if not isinstance(items, dict) or items.get("type") != "record":
        return None
    fields = items.get("fields", [])
    if (
        len(fields) != 2
        or fields[0]["name"] != "key"
        or fields[0]["type"] != "int"
        or fields[1]["name"] != "value"
    ):
        return None
    value = fields[1]["type"]
    return value if value in ("bytes", "long") else None


class ManifestDecoder:
    """Decodes manifest entries of one writer schema, returning only the ``keep`` fields."""

    def __init__(self, writer_schema: dict[str, Any], keep: dict[str, Any]) -> None:
        self.read = _Compiler().compile(writer_schema, keep)
        # partition field id -> Avro field name (names may be sanitised, ids are not)
        # (data_file and partition may be nullable unions, ["null", {record}], as BigQuery and
        # some Spark versions write them, or references to a named record)
        self.partition_names: dict[int, str] = {}
        named = _named_records(writer_schema)
        if not isinstance(writer_schema, dict) or writer_schema.get("type") != "record":
            raise ValueError("a manifest's Avro schema must be a record (manifest_entry)")
        for entry_field in writer_schema.get("fields", []):
            if entry_field["name"] != "data_file":
                continue
            data_file = _record_of(entry_field["type"], named)
            for field in data_file.get("fields", []) if data_file else ():
                partition = _record_of(field["type"], named) if field["name"] == "partition" else None
                for partition_field in partition.get("fields", []) if partition else ():
                    if "field-id" in partition_field:
                        self.partition_names[int(partition_field["field-id"])] = partition_field["name"]


def _named_records(schema: Any) -> dict[str, Any]:
    """Every named record of a schema by name (full name and short name)."""
    found: dict[str, Any] = {}

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for branch in node:
                walk(branch)
        elif isinstance(node, dict):
            if node.get("type") == "record" and "name" in node:
                found[node["name"]] = node
                found[str(node["name"]).rsplit(".", 1)[-1]] = node
                for field in node.get("fields", []):
                    walk(field.get("type"))
            elif isinstance(node.get("type"), (dict, list)):
                walk(node["type"])
            else:
                walk(node.get("items"))
                walk(node.get("values"))

    walk(schema)
    return found


def _record_of(schema: Any, named: dict[str, Any]) -> dict[str, Any] | None:
    """The record a field type is: itself, the non-null branch of a union, or a named one."""
    if isinstance(schema, str):
        schema = named.get(schema)
    if isinstance(schema, list):
        records = [r for r in (_record_of(b, named) for b in schema if b != "null") if r is not None]
        return records[0] if len(records) == 1 else None
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            return schema
        if isinstance(schema.get("type"), (dict, list)):
            return _record_of(schema["type"], named)
    return None


def checked_entry(record: Any) -> dict[str, Any]:
    """A decoded manifest entry with the fields listing relies on, or ``ValueError``: a null
    ``data_file`` (a nullable union written null), a missing path, size or count. A null
    partition tuple reads as an empty one (every partition value null)."""
    data = record.get("data_file") if isinstance(record, dict) else None
    if not isinstance(data, dict):
        raise ValueError("a manifest entry has no data_file")
    if not isinstance(record.get("status"), int):
        raise ValueError("a manifest entry has no status")
    if not isinstance(data.get("file_path"), str):
        raise ValueError("a manifest entry's data_file has no file_path")
    if not isinstance(data.get("file_size_in_bytes"), int) or not isinstance(data.get("record_count"), int):
        raise ValueError(f"data file {data['file_path']} has no file_size_in_bytes or record_count")
    partition = data.get("partition")
    if partition is None:
        data["partition"] = {}
    elif not isinstance(partition, dict):
        raise ValueError(f"data file {data['file_path']} has a partition that is not a record")
    return record


def checked_manifest_list(rows: Any, path: str) -> None:
    """``CorruptTable`` naming ``path`` unless every row of a manifest list names its manifest."""
    from storage.spec.errors import CorruptTable

    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("manifest_path"), str):
            raise CorruptTable(f"manifest list {path} has a row without a manifest_path")


_decoders: dict[tuple[str, int], ManifestDecoder] = {}


def decoder_for(writer_schema_json: str, keep: dict[str, Any]) -> ManifestDecoder:
    """Cached per schema text: all manifests of a partition spec share one schema."""
    key = (writer_schema_json, id(keep))
    found = _decoders.get(key)
    if found is None:
        if len(_decoders) > 64:
            _decoders.clear()
        found = _decoders[key] = ManifestDecoder(json.loads(writer_schema_json), keep)
    return found


def iter_records(data: bytes, keep: dict[str, Any]) -> Iterator[tuple[dict[str, Any], ManifestDecoder]]:
    """(record, decoder) for each record of an Avro container file held in ``data``."""
    decoder, blocks = iter_blocks(data, keep)
    read = decoder.read
    for dec, count in blocks:
        for _ in range(count):
            yield read(dec), decoder


_MAGIC = b"Obj\x01"


def _joined(data: bytes) -> tuple[str, bytes, int] | None:
    """(writer schema JSON, all records decompressed, record count) of the Avro container file
    in ``data`` when its codec is null or deflate (else None: fastavro reads it).

    A container's blocks only frame the records: their payloads, decompressed, concatenate into
    the records' plain encoding. pyiceberg writes one block per manifest entry, and reading block
    by block (fastavro's ``block_reader``: a ``Block`` and a ``BytesIO`` each, then a decoder)
    cost a tenth of a listing; here the header and the framing are read with the binary decoder
    and each payload is inflated by one ``zlib`` call."""
    dec = Decoder(data)
    if dec.read(4) != _MAGIC:
        raise ValueError("not an Avro container file (bad magic)")
    meta: dict[str, bytes] = {}
    while count := _block_count(dec):
        for _ in range(count):
            key = Decoder.read_utf8(dec)
            meta[key] = Decoder.read_bytes(dec)
    sync = dec.read(16)
    codec = meta.get("avro.codec", b"null")
    if codec not in (b"null", b"deflate") or "avro.schema" not in meta:
        return None
    end, inflate = len(data), codec == b"deflate"
    payloads = []
    total = 0
    while dec.tell() < end:
        count = _read_int(dec)
        size = _read_int(dec)
        if count < 0 or size < 0:
            raise ValueError("an Avro block with a negative record count or size")
        payload = dec.read(size)
        if dec.read(16) != sync:
            raise ValueError("an Avro block does not end with the file's sync marker")
        payloads.append(zlib.decompress(payload, -15) if inflate else payload)
        total += count
    return meta["avro.schema"].decode(), b"".join(payloads), total


def iter_payloads(data: bytes) -> tuple[str, Iterator[tuple[bytes, int]]]:
    """The writer schema JSON of ``data`` and its records as (decompressed records, record
    count): one pair for all records of a null- or deflate-compressed file, one per block else."""
    joined = _joined(data)
    if joined is not None:
        return joined[0], iter(((joined[1], joined[2]),))
    blocks = fastavro.block_reader(io.BytesIO(data))
    # fastavro's stub omits Block.bytes_ (a BytesIO of the block's decompressed records)
    return blocks.metadata["avro.schema"], ((block.bytes_.getvalue(), block.num_records) for block in blocks)  # type: ignore[attr-defined]


def iter_blocks(data: bytes, keep: dict[str, Any]) -> tuple[ManifestDecoder, Iterator[tuple[Any, int]]]:
    """The decoder for ``data`` and its records as (binary decoder, record count) pairs."""
    schema, payloads = iter_payloads(data)
    return decoder_for(schema, keep), ((Decoder(payload), count) for payload, count in payloads)


def decode_records(data: bytes, keep: dict[str, Any]) -> tuple[ManifestDecoder, list[dict[str, Any]]]:
    """The decoder for ``data`` and every record of it, decoded with ``keep`` (a manifest holds
    a few thousand entries at most, so the list is bounded by the manifest's own size)."""
    decoder, blocks = iter_blocks(data, keep)
    read = decoder.read
    return decoder, [read(dec) for dec, count in blocks for _ in range(count)]
