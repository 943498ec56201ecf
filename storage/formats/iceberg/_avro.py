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

``decode_records`` uses a compiled decoder instead when it is built (``_avro_native.c``, built by
scripts/build_native.py; ``NATIVE`` says whether it is used): the schema and keep spec compile
into a small program (``_avro_program``) that C runs over the container, inflating the blocks
and decoding every record in one call, with every read bounds-checked. The Python decoder stays
as the fallback and as the reference the compiled one is tested against
(tests/spec/test_avro_native.py).

A keep spec may name an Iceberg int-keyed map field ``"raw"``: the record then holds the map's
encoded blocks as one ``bytes`` (None when the field's union is null), and ``int_bytes_map`` /
``int_long_map`` turn such a blob into the dict decoding it would have given. A listing reads
the per-column statistics of the columns a filter looks at only, and skips building the rest.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import struct
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fastavro

from storage.formats.iceberg._avro_bytes import header as _header
from storage.formats.iceberg._avro_bytes import joined as _joined
from storage.formats.iceberg._avro_bytes import py_int_bytes_map as _py_int_bytes_map
from storage.formats.iceberg._avro_bytes import py_int_long_map as _py_int_long_map
from storage.formats.iceberg._avro_program import (
    OPS,
    RAW,
    compile_program,
    int_keyed_pair,
    named_records,
    raw_map,
    record_fields,
    record_of,
    resolve,
    value_nodes,
)
from storage.formats.iceberg._entry_checks import entries_well_typed

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


def _signed_array(numbers: Any) -> Any:
    # pyiceberg 0.12's Cython read_ints returns an unsigned array('Q'): -1 would read as 2**64 - 1
    return array("q", numbers.tobytes())


def _as_is(numbers: Any) -> Any:
    return numbers


_MAX_LONG = (1 << 63) - 1


def _signed_keys_dict(found: dict[int, bytes]) -> dict[int, bytes]:
    # read_int_bytes_dict reads its keys as read_ints does: a key -3 would read as 2**64 - 3
    if found and max(found) > _MAX_LONG:
        return {key - (1 << 64) if key > _MAX_LONG else key: value for key, value in found.items()}
    return found


def _reads_negative_keys() -> bool:
    found: dict[int, bytes] = {}
    Decoder(b"\x01\x00").read_int_bytes_dict(1, found)
    return -1 in found


_signed = _signed_array if Decoder(b"\x01").read_ints(1)[0] != -1 else _as_is
_signed_keys = _as_is if _reads_negative_keys() else _signed_keys_dict


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


class _Compiler:
    def __init__(self) -> None:
        self.named: dict[str, Any] = {}

    def compile(self, schema: Any, keep: Any) -> Read:
        """Reader of ``schema``; ``keep`` is True (everything), False (skip), ``"raw"`` (an Iceberg
        int-keyed map read as its encoded bytes, see ``_raw``) or, for records, a mapping field
        name -> keep spec of the fields to return (others are skipped)."""
        if keep == RAW:
            return self._raw(schema)
        kind, schema = resolve(schema, self.named)
        if kind in _PRIMITIVE_READ:
            return _PRIMITIVE_READ[kind] if keep else _PRIMITIVE_SKIP[kind]
        if kind == "union":
            return self._union(schema, keep)
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

    def _raw(self, schema: Any) -> Read:
        """Reader of an Iceberg int-keyed map (or a union of it and null) returning the map's
        encoded blocks as they are in the payload, up to and with the closing zero count: the
        statistics maps cost a dict and an object per column to decode, and most listings never
        read them (``int_bytes_map``/``int_long_map`` parse one when asked)."""
        pair, null_at = raw_map(schema, self.named)

        def skip_blocks(dec: Any) -> None:
            while count := _block_count(dec):
                if pair == "bytes":
                    dec.read_int_bytes_dict(count, {})
                else:
                    dec.read_ints(2 * count)

        def read_raw(dec: Any) -> bytes:
            start = dec.tell()
            skip_blocks(dec)
            return _raw_since(dec, start)

        if null_at is None:
            return read_raw
        return lambda dec: None if _read_int(dec) == null_at else read_raw(dec)

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
        namespace: dict[str, Any] = {
            "_read_int": _read_int,
            "_signed": _signed,
            "_signed_keys": _signed_keys,
            "_raw_since": _raw_since,
        }
        body: list[str] = []
        for position, (field, wanted, optional, inner) in enumerate(record_fields(schema, keep)):
            reader = f"_r{position}"
            namespace[reader] = self.compile(inner, wanted)
            target = f"out[{field['name']!r}]"
            if wanted == RAW:
                inline = self._raw_inline(inner, target)
            else:
                inline = self._blocks_inline(inner, bool(wanted), target)
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

    def _raw_inline(self, schema: Any, target: str) -> list[str] | None:
        """Source lines reading an Iceberg int-keyed map kept ``"raw"`` into ``target``, inlined
        as ``_blocks_inline``'s are (None for a union of it and null: ``_raw`` reads that)."""
        pair, null_at = raw_map(schema, self.named)
        if null_at is not None:
            return None
        step = "dec.read_int_bytes_dict(n, {})" if pair == "bytes" else "dec.read_ints(2 * n)"
        lines = ["s = dec.tell()", "while n := _read_int(dec):", "    if n < 0:", "        n = -n"]
        lines += ["        _read_int(dec)", f"    {step}", f"{target} = _raw_since(dec, s)"]
        return lines

    def _blocks_inline(self, schema: Any, keep: bool, target: str) -> list[str] | None:
        """Source lines reading an Iceberg ``int -> bytes|long`` map or an ``int|long`` array
        into ``target`` (or skipping it), inlined in the record reader: a manifest entry holds
        up to eight of them, and a call per item or per field is most of what decoding costs."""
        if not isinstance(schema, dict) or schema.get("type") != "array":
            return None
        items = schema["items"]
        pair = int_keyed_pair(items, self.named)
        if pair == "bytes":
            step = ["dec.read_int_bytes_dict(n, v)" if keep else "dec.read_int_bytes_dict(n, {})"]
        elif pair == "long":
            step = (
                ["m = _signed(dec.read_ints(2 * n))", "v.update(zip(m[::2], m[1::2]))"]
                if keep
                else ["dec.read_ints(2 * n)"]
            )
        elif items in ("int", "long"):
            step = ["v.extend(_signed(dec.read_ints(n)))" if keep else "dec.read_ints(n)"]
        else:
            return None
        # a block count below zero is followed by the block's byte size
        lines = ["v = {}" if pair else "v = []"] if keep else []
        lines += ["while n := _read_int(dec):", "    if n < 0:", "        n = -n", "        _read_int(dec)"]
        lines += [f"    {x}" for x in step]
        result = "_signed_keys(v)" if pair == "bytes" else "v"
        return lines + ([f"{target} = {result}"] if keep else [])

    def _array(self, schema: dict[str, Any], keep: Any) -> Read:
        items = schema["items"]
        pair = int_keyed_pair(items, self.named)
        if pair == "bytes" and keep:
            # Iceberg's map<int, binary> (bounds): one C call per block
            def read_int_bytes(dec: Any) -> dict[int, bytes]:
                out: dict[int, bytes] = {}
                while count := _block_count(dec):
                    dec.read_int_bytes_dict(count, out)
                return _signed_keys(out)

            return read_int_bytes
        if pair == "long":
            # Iceberg's map<int, long> (sizes, counts): both numbers are varints
            if keep:

                def read_int_long(dec: Any) -> dict[int, int]:
                    out: dict[int, int] = {}
                    while count := _block_count(dec):
                        numbers = _signed(dec.read_ints(2 * count))
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


class ManifestDecoder:
    """Decodes manifest entries of one writer schema, returning only the ``keep`` fields."""

    def __init__(self, writer_schema: dict[str, Any], keep: dict[str, Any]) -> None:
        self.read = _Compiler().compile(writer_schema, keep)
        self._schema, self._keep, self._program = writer_schema, keep, None
        self._nodes: list[Any] = []
        # partition field id -> Avro field name (names may be sanitised, ids are not)
        # (data_file and partition may be nullable unions, ["null", {record}], as BigQuery and
        # some Spark versions write them, or references to a named record)
        self.partition_names: dict[int, str] = {}
        named = named_records(writer_schema)
        if not isinstance(writer_schema, dict) or writer_schema.get("type") != "record":
            raise ValueError("a manifest's Avro schema must be a record (manifest_entry)")
        for entry_field in writer_schema.get("fields", []):
            if entry_field["name"] != "data_file":
                continue
            data_file = record_of(entry_field["type"], named)
            for field in data_file.get("fields", []) if data_file else ():
                partition = record_of(field["type"], named) if field["name"] == "partition" else None
                for partition_field in partition.get("fields", []) if partition else ():
                    if "field-id" in partition_field:
                        self.partition_names[int(partition_field["field-id"])] = partition_field["name"]
        self.well_typed = entries_well_typed(writer_schema)

    def program(self) -> Any:
        """The compiled decoder's program for this schema and keep spec (built on first use)."""
        if self._program is None:
            try:
                nodes = compile_program(self._schema, self._keep)
                program = _native.Program(nodes)
            except _SCHEMA_ERRORS as exc:
                raise ValueError(f"an Avro schema this decoder cannot read: {exc!r}") from exc
            # the nodes first: a read-ahead thread may read them (probes) once the program is set
            self._nodes = nodes
            self._program = program
        return self._program

    def probes(self, fields: tuple[tuple[tuple[str, ...], str], ...]) -> tuple[int, ...]:
        """The probes of ``decode_filtered`` for ``fields`` in this program (``value_nodes``)."""
        self.program()
        return value_nodes(self._nodes, fields)


_decoders: dict[tuple[str, int], ManifestDecoder] = {}
# what a malformed schema (a corrupt manifest's, usually) raises while compiling: ValueError
# for the caller, like the malformed records
_SCHEMA_ERRORS = (KeyError, TypeError, AttributeError, IndexError, RecursionError)


def decoder_for(writer_schema_json: str, keep: dict[str, Any]) -> ManifestDecoder:
    """Cached per schema text: all manifests of a partition spec share one schema."""
    key = (writer_schema_json, id(keep))
    found = _decoders.get(key)
    if found is None:
        if len(_decoders) > 64:
            _decoders.clear()
        try:
            found = ManifestDecoder(json.loads(writer_schema_json), keep)
        except _SCHEMA_ERRORS as exc:
            raise ValueError(f"an Avro schema this decoder cannot read: {exc!r}") from exc
        _decoders[key] = found
    return found


def iter_records(data: bytes, keep: dict[str, Any]) -> Iterator[tuple[dict[str, Any], ManifestDecoder]]:
    """(record, decoder) for each record of an Avro container file held in ``data``."""
    decoder, blocks = iter_blocks(data, keep)
    read = decoder.read
    for dec, count in blocks:
        for _ in range(count):
            yield read(dec), decoder


def iter_payloads(data: bytes) -> tuple[str, Iterator[tuple[bytes, int]]]:
    """The writer schema JSON of ``data`` and its records as (decompressed records, record
    count): one pair for all records of a null- or deflate-compressed file, one per block else."""
    joined = _joined(data)
    if joined is not None:
        return joined[0], iter(((joined[1], joined[2]),))
    blocks = fastavro.block_reader(io.BytesIO(data))
    # fastavro's stub omits Block.bytes_ (a BytesIO of the block's decompressed records)
    return blocks.metadata["avro.schema"], ((block.bytes_.getvalue(), block.num_records) for block in blocks)  # type: ignore[attr-defined]


# id(binary decoder) -> (the decoder, its payload) while iter_blocks has it out: a "raw" reader
# slices the payload (holding the decoder keeps its id from being reused meanwhile)
_RAW_SOURCES: dict[int, tuple[Any, bytes]] = {}


def iter_blocks(data: bytes, keep: dict[str, Any]) -> tuple[ManifestDecoder, Iterator[tuple[Any, int]]]:
    """The decoder for ``data`` and its records as (binary decoder, record count) pairs. Each
    binary decoder is to be read before the next pair is asked for (a ``"raw"`` keep reads its
    payload, known until then)."""
    schema, payloads = iter_payloads(data)
    return decoder_for(schema, keep), _registered(payloads)


def _raw_since(dec: Any, start: int) -> bytes:
    """The bytes ``dec`` read since ``start``: the Cython decoder cannot hand its buffer back,
    so iter_blocks registers it with its payload."""
    source = _RAW_SOURCES.get(id(dec))
    if source is None or source[0] is not dec:
        raise RuntimeError('a map kept "raw" read by a binary decoder that iter_blocks did not make')
    return source[1][start : dec.tell()]


def _registered(payloads: Iterator[tuple[bytes, int]]) -> Iterator[tuple[Any, int]]:
    for payload, count in payloads:
        dec = Decoder(payload)
        _RAW_SOURCES[id(dec)] = (dec, payload)
        try:
            yield dec, count
        finally:
            del _RAW_SOURCES[id(dec)]


def _load_native() -> Any:
    """The compiled decoder (``_avro_native.c``, built by scripts/build_native.py), or None when
    it is not built or was built from another version of the program format."""
    try:
        module = importlib.import_module("storage.formats.iceberg._avro_native")
    except ImportError:
        return None
    return module if tuple(module.OPS) == OPS else None


_native = _load_native()
# Whether the compiled decoder is built (NATIVE_BUILT) and used by default (NATIVE);
# LAKEWARDEN_NATIVE_AVRO=0 makes the Python decoder the default.
NATIVE_BUILT: bool = _native is not None
NATIVE: bool = NATIVE_BUILT and os.environ.get("LAKEWARDEN_NATIVE_AVRO", "1") != "0"


def native_module() -> Any:
    """The compiled decoder's module when it is used (``NATIVE``), else None."""
    return _native if NATIVE else None


def decode_records(
    data: bytes, keep: dict[str, Any], *, native: bool | None = None
) -> tuple[ManifestDecoder, list[dict[str, Any]]]:
    """The decoder for ``data`` and every record of it, decoded with ``keep`` (a manifest holds
    a few thousand entries at most, so the list is bounded by the manifest's own size).

    ``native`` picks the decoder (default ``NATIVE``); both return the same records, maps kept
    ``"raw"`` included (the same bytes). The compiled
    one raises ``ValueError`` on anything malformed. The Python one does for a malformed container
    or schema, but reads records with pyiceberg's Cython reads, which check no bounds: a corrupt
    record may read as garbage, or a corrupt length past the buffer."""
    if not (NATIVE if native is None else native):
        decoder, blocks = iter_blocks(data, keep)
        read = decoder.read
        return decoder, [read(dec) for dec, count in blocks for _ in range(count)]
    return decode_joined(join(data, native=native), keep, native=native)


@dataclass(frozen=True, slots=True)
class Joined:
    """An Avro container's writer schema and its records still encoded, decompressed and with
    the framing checked (``join``): what ``decode_joined`` decodes."""

    schema: str
    payloads: tuple[tuple[bytes, int], ...]  # (encoded records, their count)
    # (the filter, per payload what skim_entries kept of it or None): ``skim_joined``
    skimmed: tuple[Any, tuple[Any, ...]] | None = None


def join(data: bytes, *, native: bool | None = None) -> Joined:
    """The first half of ``decode_records``: frame and inflate the container ``data``, which the
    compiled decoder does without the GIL, so a read-ahead thread can join the next manifest
    while the caller decodes this one. ``ValueError`` for a malformed container."""
    if (NATIVE if native is None else native) and _native is not None and _native.CONTAINER:
        meta, sync, offset = _header(data)
        codec = meta.get("avro.codec", b"null")
        if "avro.schema" not in meta:
            raise ValueError("an Avro container file without a schema (no avro.schema)")
        if codec in (b"null", b"deflate"):
            payload, count = _native.join_container(data, offset, sync, codec == b"deflate")
            return Joined(meta["avro.schema"].decode(), ((payload, count),))
    schema, payloads = iter_payloads(data)
    return Joined(schema, tuple(payloads))


def _decode_filtered(joined: Joined, program: Any, spec: Any) -> list[dict[str, Any]]:
    """The records of ``joined`` the filter ``spec`` keeps: from what ``skim_joined`` kept when it
    skimmed for this filter (``decode_skimmed``), else skimmed here (``decode_filtered``)."""
    skims = joined.skimmed[1] if joined.skimmed is not None and joined.skimmed[0] is spec else None
    records: list[dict[str, Any]] = []
    for at, (payload, count) in enumerate(joined.payloads):
        skim = skims[at] if skims is not None else None
        if skim is None:
            records += _native.decode_filtered(payload, count, program, spec)
        else:
            records += _native.decode_skimmed(payload, skim[0], skim[1], program, spec)
    return records


def decode_joined(
    joined: Joined, keep: dict[str, Any], *, native: bool | None = None, drop: Any = None
) -> tuple[ManifestDecoder, list[dict[str, Any]]]:
    """The second half of ``decode_records``: the decoder and every record of ``joined``; less
    those the filter ``drop(decoder)`` may give the compiled ``decode_filtered`` for (None: none)."""
    decoder = decoder_for(joined.schema, keep)
    if drop is not None and (NATIVE if native is None else native) and _native is not None:
        spec = drop(decoder)
        if spec is not None:
            return decoder, _decode_filtered(joined, decoder.program(), spec)
    if not (NATIVE if native is None else native):
        read = decoder.read
        return decoder, [read(dec) for dec, count in _registered(iter(joined.payloads)) for _ in range(count)]
    if _native is None:
        raise RuntimeError("the compiled Avro decoder is not built (python scripts/build_native.py)")
    program = decoder.program()
    if len(joined.payloads) == 1:
        payload, count = joined.payloads[0]
        return decoder, _native.decode(payload, count, program)
    return decoder, [
        record for payload, count in joined.payloads for record in _native.decode(payload, count, program)
    ]


# int_bytes_map(raw) / int_long_map(raw): the dict an Iceberg int -> bytes / int -> long map kept
# "raw" decodes to, exactly as decoding it without "raw" gives it (same keys, values and order);
# ValueError for a malformed or truncated blob or bytes after it. The compiled parsers are bound
# directly (no Python frame between): listing calls one per entry for each column a filter reads.
int_bytes_map: Callable[[bytes], dict[int, bytes]] = _native.int_bytes_map if NATIVE else _py_int_bytes_map
int_long_map: Callable[[bytes], dict[int, int]] = _native.int_long_map if NATIVE else _py_int_long_map
# reject_bounds(lower, upper, clauses): the compiled stats pre-check (``_prune.native_clauses``), or None
reject_bounds: Callable[[Any, Any, tuple[Any, ...]], bool] | None = _native.reject_bounds if NATIVE else None
# None without the compiled decoder: SlotsMaker(cls, names), a compiled maker of instances of a
# slots class (``_manifests.slots_maker``); plain_data_file(context, data, values, sequence,
# snapshot_id), the builder of a plain entry's DataFile (``_manifests.plain_context``);
# plain_slices(scan, records, one), the listing loop (``index._manifest_slices``); plain_layout and
# plain_decode, that loop over entries still encoded (``_entries.EncodedEntries``).
SlotsMaker: Any = _native.SlotsMaker if NATIVE else None
plain_data_file: Any = _native.plain_data_file if NATIVE else None
plain_slices: Any = _native.plain_slices if NATIVE else None
plain_layout: Any = _native.plain_layout if NATIVE else None
plain_decode: Any = _native.plain_decode if NATIVE else None
