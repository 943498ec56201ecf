"""The compiled manifest decoder (``_avro_native.c``) against the Python one (``_avro``), the
reference: the same records, value for value and type for type, on every Iceberg manifest of
the shared fixtures and of tables written here, on hand-built Avro files using every Avro type,
and ``ValueError`` (never a crash, never garbage) on truncated and corrupted manifests.

The native half skips when the module is not built (``python scripts/build_native.py``);
``LAKEWARDEN_REQUIRE_NATIVE=1`` turns that into a failure.
"""

from __future__ import annotations

import datetime as dt
import gc
import io
import json
import math
import os
import random
import struct
import subprocess
import sys
import tracemalloc
import zlib
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pyarrow as pa
import pytest

from storage.formats.iceberg import _avro
from storage.formats.iceberg._entries import KEEP as LISTING_KEEP
from storage.formats.iceberg._entries import KEEP_DECODED as KEEP
from tests.spec.iceberg_v3_tables import write_v3_table

# A narrower projection than KEEP (what a filter looks at first, as listing once probed with)
PROBE: dict[str, Any] = {
    "status": True,
    "data_file": {
        name: True
        for name in (
            "content",
            "file_path",
            "partition",
            "record_count",
            "file_size_in_bytes",
            "lower_bounds",
        )
    },
}

# The statistics maps as listing keeps them: "raw", parsed only for the columns a filter reads
STATS = {"lower_bounds": "bytes", "upper_bounds": "bytes", "null_value_counts": "long"}


def with_raw(keep: dict[str, Any], fields: dict[str, str]) -> dict[str, Any]:
    """``keep`` with the ``fields`` of its data_file (of the record itself when it has no
    data_file) kept "raw"."""
    if isinstance(keep.get("data_file"), dict):
        return dict(keep, data_file=with_raw(keep["data_file"], fields))
    return dict(keep, **dict.fromkeys(fields, "raw"))


RAW_KEEP = with_raw(KEEP, STATS)
assert RAW_KEEP == LISTING_KEEP  # what listing decodes with: the raw cases test it
RAW_PROBE = with_raw(PROBE, {"lower_bounds": "bytes"})

REPO_ROOT = Path(__file__).resolve().parents[2]
needs_native = pytest.mark.skipif(
    not _avro.NATIVE_BUILT, reason="the compiled Avro decoder is not built (python scripts/build_native.py)"
)


def test_the_compiled_decoder_is_built_when_required():
    if os.environ.get("LAKEWARDEN_REQUIRE_NATIVE") != "1":
        pytest.skip("LAKEWARDEN_REQUIRE_NATIVE is not 1")
    assert _avro.NATIVE_BUILT, (
        "LAKEWARDEN_REQUIRE_NATIVE=1 but storage/formats/iceberg/_avro_native did not import"
    )


# -- comparing -------------------------------------------------------------------------------


def assert_same(got: Any, want: Any, where: str = "record") -> None:
    """Equal values of the same types all the way down (1 == 1.0 == True would pass ``==``)."""
    assert type(got) is type(want), f"{where}: {type(got).__name__} {got!r} != {type(want).__name__} {want!r}"
    if isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)} != {list(want)}"
        for key in want:
            assert type(next(k for k in got if k == key)) is type(key), f"{where}: key {key!r} type"
            assert_same(got[key], want[key], f"{where}[{key!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{where}: {len(got)} items != {len(want)}"
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{where}[{index}]")
    elif isinstance(want, float):
        assert (math.isnan(got) and math.isnan(want)) or (
            got == want and math.copysign(1, got) == math.copysign(1, want)
        ), f"{where}: {got!r} != {want!r}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def assert_decoders_agree(data: bytes, keep: Any) -> list[dict[str, Any]]:
    """The Python decoder's records, once the compiled one (when built) returned the same, and
    so did decoding in two stages (``join`` then ``decode_joined``, as listing's read-ahead
    does) with every pairing of the two decoders."""
    want = _avro.decode_records(data, keep, native=False)[1]
    choices = [False, True] if _avro.NATIVE_BUILT else [False]
    if _avro.NATIVE_BUILT:
        assert_same(_avro.decode_records(data, keep, native=True)[1], want)
    for joining in choices:
        for decoding in choices:
            joined = _avro.join(data, native=joining)
            assert_same(_avro.decode_joined(joined, keep, native=decoding)[1], want, f"{joining}/{decoding}")
    return want


def two_stage_outcome(data: bytes, keep: Any) -> Any:
    """The records the compiled decoder gives in two stages, or the exception raised."""
    try:
        return _avro.decode_joined(_avro.join(data, native=True), keep, native=True)[1]
    except Exception as exc:
        return exc


def outcome(data: bytes, keep: Any, native: bool) -> Any:
    """The records, or the exception type when decoding raises."""
    try:
        return _avro.decode_records(data, keep, native=native)[1]
    except Exception as exc:
        return exc


# -- manifests written by other engines and here --------------------------------------------


def is_manifest(path: Path) -> bool:
    try:
        meta = _avro._header(path.read_bytes())[0]
    except ValueError:
        return False
    return '"data_file"' in meta.get("avro.schema", b"").decode()


@pytest.fixture(scope="module")
def written_manifests(tmp_path_factory, sql_catalog) -> dict[str, bytes]:
    """The manifests of a pyiceberg table with a partition of every transform and type that
    reaches a manifest (a double partition value, nulls, deleted entries), and of a v3 table."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, TruncateTransform
    from pyiceberg.types import (
        BinaryType,
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        FloatType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    root = tmp_path_factory.mktemp("native")
    catalog = sql_catalog("native", f"file://{root}/warehouse")
    catalog.create_namespace("spec")
    types = [
        ("id", LongType()),
        ("small", IntegerType()),
        ("region", StringType()),
        ("amount", DoubleType()),
        ("ratio", FloatType()),
        ("day", DateType()),
        ("ts", TimestamptzType()),
        ("price", DecimalType(10, 2)),
        ("flag", BooleanType()),
        ("blob", BinaryType()),
    ]
    schema = Schema(*(NestedField(i + 1, name, kind, required=False) for i, (name, kind) in enumerate(types)))
    spec = PartitionSpec(
        PartitionField(3, 1000, IdentityTransform(), "region"),
        PartitionField(4, 1001, IdentityTransform(), "amount"),
        PartitionField(7, 1002, DayTransform(), "ts_day"),
        PartitionField(1, 1003, BucketTransform(4), "id_bucket"),
        PartitionField(9, 1004, IdentityTransform(), "flag"),
        PartitionField(2, 1005, TruncateTransform(10), "small_trunc"),
    )
    table = catalog.create_table("spec.everything", schema=schema, partition_spec=spec)
    for batch in range(3):
        rows = [_row(batch * 10 + i) for i in range(10)]
        table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    table.delete("id < 5")
    manifests = {}
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            path = manifest.manifest_path.removeprefix("file://")
            manifests[f"pyiceberg/{Path(path).name}"] = Path(path).read_bytes()
    v3 = write_v3_table(root / "v3", stale_position_delete=(1, 2))
    for path in (root / "v3").rglob("*.avro"):
        if is_manifest(path):
            manifests[f"v3/{path.name}"] = path.read_bytes()
    assert v3.data_paths and len(manifests) >= 6
    return manifests


def _row(i: int) -> dict[str, Any]:
    null = i % 7 == 3
    return {
        "id": i - 10,
        "small": None if null else -i,
        "region": None if null else ["eu", "us", "ap", "ü€"][i % 4],
        "amount": [0.1, -0.0, 2.5e300, float("inf")][i % 4],
        "ratio": None if null else i / 3,
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "ts": dt.datetime(2024, 1, 1 + i % 3, i % 24, tzinfo=dt.UTC),
        "price": Decimal(i * 100 - 999) / 100,
        "flag": None if null else i % 2 == 0,
        "blob": bytes([i, 0, 255]),
    }


def fixture_manifests() -> list[Path]:
    configured = os.environ.get("LAKEWARDEN_FIXTURES")
    root = Path(configured) if configured else REPO_ROOT.parent / "shared" / "fixtures"
    return sorted(p for p in root.rglob("*.avro") if is_manifest(p)) if root.is_dir() else []


@pytest.mark.parametrize("keep", [KEEP, PROBE, True], ids=["KEEP", "PROBE", "everything"])
def test_both_decoders_return_the_same_records_for_every_fixture_manifest(external_tables, keep):
    paths = fixture_manifests()
    assert paths, f"no Iceberg manifest under {external_tables}"
    for path in paths:
        records = assert_decoders_agree(path.read_bytes(), keep)
        assert records, path


@pytest.mark.parametrize("keep", [KEEP, PROBE, True], ids=["KEEP", "PROBE", "everything"])
def test_both_decoders_return_the_same_records_for_manifests_written_here(written_manifests, keep):
    for name, data in written_manifests.items():
        records = assert_decoders_agree(data, keep)
        assert records, name


def test_a_double_partition_value_keeps_its_full_precision(written_manifests):
    values = {
        record["data_file"]["partition"]["amount"]
        for name, data in written_manifests.items()
        if name.startswith("pyiceberg/")
        for record in assert_decoders_agree(data, KEEP)
    }
    assert 0.1 in values and 2.5e300 in values and math.inf in values


# -- hand-built Avro files with every type ---------------------------------------------------

POINT = {
    "type": "record",
    "name": "point",
    "fields": [{"name": "x", "type": "double"}, {"name": "tag", "type": ["null", "string"]}],
}
EVERYTHING = {
    "type": "record",
    "name": "everything",
    "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "by", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "fx", "type": {"type": "fixed", "name": "sixteen", "size": 16}},
        {"name": "fx_again", "type": "sixteen"},
        {"name": "e", "type": {"type": "enum", "name": "color", "symbols": ["red", "green", "blue"]}},
        {"name": "opt_first", "type": ["null", "string"]},
        {"name": "opt_second", "type": ["long", "null"]},
        {"name": "multi", "type": ["null", "int", "string", {"type": "array", "items": "long"}]},
        {"name": "two", "type": ["int", "string"]},
        {"name": "points", "type": {"type": "array", "items": POINT}},
        {"name": "smap", "type": {"type": "map", "values": "string"}},
        {"name": "pmap", "type": {"type": "map", "values": "point"}},
        {"name": "ints", "type": {"type": "array", "items": "int"}},
        {"name": "opt_ints", "type": ["null", {"type": "array", "items": "long"}]},
        {
            "name": "bounds",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "k1_v2",
                    "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "bytes"}],
                },
            },
        },
        {
            "name": "counts",
            "type": [
                "null",
                {
                    "type": "array",
                    "items": {
                        "type": "record",
                        "name": "k3_v4",
                        "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "long"}],
                    },
                },
            ],
        },
        {"name": "bounds_again", "type": {"type": "array", "items": "k1_v2"}},
        {
            "name": "nested",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "inner",
                    "fields": [{"name": "a", "type": "long"}, {"name": "p", "type": "point"}],
                },
            ],
        },
        {"name": "union_of_records", "type": ["point", "inner", "null"]},
    ],
}
# keep specs: everything, a projection (nested and array-of-record items), nothing of note
EVERYTHING_KEEPS = [
    True,
    {
        "b": True,
        "l": True,
        "fx_again": True,
        "multi": True,
        "points": {"tag": True},
        "pmap": {"x": True},
        "bounds": True,
        "counts": True,
        "opt_ints": True,
        "nested": {"p": {"x": True}},
        "union_of_records": {"a": True, "x": True},
    },
    {"s": False, "ints": False, "bounds": False, "counts": False, "nested": False},
]


def _point(rng: random.Random) -> dict[str, Any]:
    return {
        "x": rng.choice([0.5, -0.0, math.nan, -math.inf, 1e-310]),
        "tag": rng.choice([None, "", "p", "ß"]),
    }


def _everything(rng: random.Random) -> dict[str, Any]:
    def some(make: Any, most: int = 4) -> list[Any]:
        return [make() for _ in range(rng.randrange(most + 1))]

    longs = [0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), 2**63 - 1, -(2**63)]
    return {
        "n": None,
        "b": rng.random() < 0.5,
        "i": rng.choice([0, -1, 2**31 - 1, -(2**31), 300]),
        "l": rng.choice(longs),
        "f": rng.choice([0.0, -0.0, 1.5, math.inf, math.nan, 3.4e38]),
        "d": rng.choice([0.1, -0.0, math.nan, 1e308, 5e-324]),
        "by": rng.randbytes(rng.randrange(20)),
        "s": rng.choice(["", "a", "émoji 🦆", "x" * 200]),
        "fx": rng.randbytes(16),
        "fx_again": bytes(16),
        "e": rng.choice(["red", "green", "blue"]),
        "opt_first": rng.choice([None, "set"]),
        "opt_second": rng.choice([None, -5, 2**40]),
        "multi": rng.choice([None, 7, "seven", [1, -2, 2**62], []]),
        "two": rng.choice([3, "three"]),
        "points": some(lambda: _point(rng)),
        "smap": {f"k{j}": rng.choice(["", "v"]) for j in range(rng.randrange(4))},
        "pmap": {f"p{j}": _point(rng) for j in range(rng.randrange(3))},
        "ints": some(lambda: rng.choice([0, -1, 2**31 - 1]), 6),
        "opt_ints": rng.choice([None, [], [5, -(2**63)]]),
        "bounds": [{"key": j, "value": rng.randbytes(rng.randrange(9))} for j in range(rng.randrange(5))],
        "counts": rng.choice([None, [], [{"key": 1, "value": -1}, {"key": 2**31 - 1, "value": 2**63 - 1}]]),
        "bounds_again": [{"key": -3, "value": b""}],
        "nested": rng.choice([None, {"a": rng.choice(longs), "p": _point(rng)}]),
        "union_of_records": rng.choice([None, _point(rng), {"a": 9, "p": _point(rng)}]),
    }


def fastavro_file(schema: dict[str, Any], records: list[dict[str, Any]], **options: Any) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records, **options)
    return out.getvalue()


@pytest.mark.parametrize("codec", ["null", "deflate", "snappy"])
@pytest.mark.parametrize("keep", EVERYTHING_KEEPS, ids=["everything", "projection", "skips"])
def test_both_decoders_agree_on_every_avro_type(codec, keep):
    if codec == "snappy":
        pytest.importorskip("cramjam")
    rng = random.Random(7)
    records = [_everything(rng) for _ in range(300)]
    data = fastavro_file(EVERYTHING, records, codec=codec, sync_interval=2000)
    got = assert_decoders_agree(data, keep)
    assert len(got) == 300
    if keep is True:  # and both are right: what fastavro wrote (enums as their index)
        first = dict(records[0], e=["red", "green", "blue"].index(records[0]["e"]))
        first["f"] = struct.unpack("<f", struct.pack("<f", first["f"]))[0]
        first["bounds"] = {b["key"]: b["value"] for b in first["bounds"]}
        first["bounds_again"] = {-3: b""}
        if first["counts"] is not None:
            first["counts"] = {c["key"]: c["value"] for c in first["counts"]}
        assert repr(got[0]) == repr(first)


def _long(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _blocks(items: list[bytes]) -> bytes:
    """An Avro array/map body written as blocks of two items with negative counts and sizes."""
    out = b""
    for start in range(0, len(items), 2):
        body = b"".join(items[start : start + 2])
        out += _long(-len(items[start : start + 2])) + _long(len(body)) + body
    return out + _long(0)


def _container(schema: dict[str, Any], payloads: list[tuple[int, bytes]], codec: str = "null") -> bytes:
    sync = bytes(range(16))
    meta = {"avro.schema": json.dumps(schema).encode(), "avro.codec": codec.encode()}
    header = b"Obj\x01" + _long(len(meta))
    for key, value in meta.items():
        header += _long(len(key)) + key.encode() + _long(len(value)) + value
    out = header + _long(0) + sync
    for count, payload in payloads:
        if codec == "deflate":
            compressor = zlib.compressobj(wbits=-15)
            payload = compressor.compress(payload) + compressor.flush()
        out += _long(count) + _long(len(payload)) + payload + sync
    return out


BLOCKS_SCHEMA = {
    "type": "record",
    "name": "blocks",
    "fields": [
        {"name": "ints", "type": {"type": "array", "items": "long"}},
        {"name": "smap", "type": {"type": "map", "values": "string"}},
        {"name": "bounds", "type": EVERYTHING["fields"][20]["type"]},
        {"name": "counts", "type": EVERYTHING["fields"][21]["type"]},
        {"name": "points", "type": {"type": "array", "items": POINT}},
        {"name": "empty", "type": {"type": "array", "items": "long"}},
    ],
}


def _blocks_record(k: int) -> bytes:
    def text(value: str) -> bytes:
        return _long(len(value.encode())) + value.encode()

    return b"".join(
        [
            _blocks([_long(v) for v in (k, -k, 2**40, -1, 0)]),
            _blocks([text(f"k{j}") + text("v" * j) for j in range(3)]),
            _blocks([_long(j) + _long(2) + b"\x00\xff" for j in range(5)]),
            _long(1) + _blocks([_long(j) + _long(-j) for j in range(3)]),
            _blocks([b"\x00" * 8 + _long(1) + text("t")] * 3),
            _long(0),
        ]
    )


@pytest.mark.parametrize("codec", ["null", "deflate"])
def test_negative_block_counts_with_byte_sizes_read_like_positive_ones(codec):
    data = _container(
        BLOCKS_SCHEMA, [(2, _blocks_record(1) + _blocks_record(2)), (1, _blocks_record(3))], codec
    )
    got = assert_decoders_agree(data, True)
    assert [r["ints"] for r in got] == [[k, -k, 2**40, -1, 0] for k in (1, 2, 3)]
    assert got[0]["smap"] == {"k0": "", "k1": "v", "k2": "vv"}
    assert got[0]["bounds"] == {j: b"\x00\xff" for j in range(5)}
    assert got[0]["counts"] == {0: 0, 1: -1, 2: -2}
    assert got[0]["points"] == [{"x": 0.0, "tag": "t"}] * 3 and got[0]["empty"] == []


# -- corrupt manifests -----------------------------------------------------------------------


@pytest.fixture(scope="module", params=["null", "deflate"])
def small_manifest(request, written_manifests) -> bytes:
    """The smallest manifest written here with two entries or more, of either codec."""
    candidates = [
        data
        for data in written_manifests.values()
        if _avro._header(data)[0].get("avro.codec", b"null") == request.param.encode()
        and len(_avro.decode_records(data, True, native=False)[1]) > 1
    ]
    return min(candidates, key=len)


@needs_native
@pytest.mark.parametrize("keep", [KEEP, RAW_KEEP], ids=["KEEP", "raw"])
def test_a_manifest_cut_at_any_byte_fails_both_decoders_alike(small_manifest, keep):
    full = _avro.decode_records(small_manifest, keep, native=False)[1]
    for cut in range(len(small_manifest)):
        data = small_manifest[:cut]
        want, got = outcome(data, keep, native=False), outcome(data, keep, native=True)
        staged = two_stage_outcome(data, keep)
        if isinstance(want, Exception):
            assert isinstance(got, ValueError), f"cut at {cut}: Python raised {want!r}, native {got!r}"
            assert isinstance(staged, ValueError), f"cut at {cut}: two stages gave {staged!r}"
        else:  # cut between blocks: the entries before the cut
            assert_same(got, want, f"cut at {cut}")
            assert_same(staged, want, f"cut at {cut}, two stages")
            assert len(got) < len(full)


def _payload(data: bytes, keep: Any) -> tuple[bytes, int, Any]:
    schema, payloads = _avro.iter_payloads(data)
    (payload, count), *_ = payloads
    return payload, count, _avro.decoder_for(schema, keep).program()


@needs_native
@pytest.mark.parametrize("keep", [KEEP, True, RAW_KEEP], ids=["KEEP", "everything", "raw"])
def test_records_cut_at_any_byte_raise_value_error(small_manifest, keep):
    payload, count, program = _payload(small_manifest, keep)
    for cut in range(len(payload)):
        with pytest.raises(ValueError):
            _avro._native.decode(payload[:cut], count, program)


@needs_native
@pytest.mark.parametrize("keep", [KEEP, PROBE, True], ids=["KEEP", "PROBE", "everything"])
def test_corrupt_records_raise_value_error_or_decode_as_the_python_decoder_does(small_manifest, keep):
    # The Python decoder reads with pyiceberg's unchecked Cython reads, so it runs only where the
    # native one found every read in bounds (it then reads the same bytes).
    payload, count, program = _payload(small_manifest, keep)
    python = _avro.decoder_for(_avro.iter_payloads(small_manifest)[0], keep).read
    rng = random.Random(11)
    corruptions = [(at, 0xFF) for at in range(len(payload))]
    corruptions += [(rng.randrange(len(payload)), rng.randrange(1, 256)) for _ in range(2000)]
    decoded = 0
    for at, mask in corruptions:
        data = bytearray(payload)
        data[at] ^= mask
        try:
            got = _avro._native.decode(bytes(data), count, program)
        except ValueError:
            continue
        dec = _avro.Decoder(bytes(data))
        assert_same(got, [python(dec) for _ in range(count)], f"byte {at} ^ {mask:#x}")
        decoded += 1
    assert decoded  # some corruptions only change values (a byte of a path, a bound)


@needs_native
def test_a_corrupt_container_raises_value_error_or_decodes_as_the_python_decoder_does(small_manifest):
    # every byte of the header and first blocks, a sample of the rest
    rng = random.Random(5)
    head = min(len(small_manifest), 1500)
    for at in [
        *range(head),
        *rng.sample(range(head, len(small_manifest)), (len(small_manifest) - head) // 8),
    ]:
        data = bytearray(small_manifest)
        data[at] ^= 0x55
        got = outcome(bytes(data), KEEP, native=True)
        staged = two_stage_outcome(bytes(data), KEEP)
        if isinstance(got, Exception):
            assert isinstance(got, ValueError), f"byte {at}: {got!r}"
            assert isinstance(staged, ValueError), f"byte {at}: two stages gave {staged!r}"
            continue
        assert_same(staged, got, f"byte {at}, two stages")
        assert_same(got, _avro.decode_records(bytes(data), KEEP, native=False)[1], f"byte {at}")


@needs_native
@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"\xff" * 10 + b"\x01", "longer than"),
        (b"\xff" * 9 + b"\x7f", "64 bits"),
        (b"\x80", "runs past the end"),
        (b"\x01", "negative length"),
        (b"\x02\xff", "utf-8"),
    ],
)
def test_malformed_numbers_and_strings_raise_value_error(payload, message):
    schema = {"type": "record", "name": "r", "fields": [{"name": "s", "type": "string"}]}
    program = _avro._native.Program(_avro.compile_program(schema, True))
    with pytest.raises(ValueError, match=message):
        _avro._native.decode(payload, 1, program)


@needs_native
def test_counts_the_data_cannot_hold_raise_value_error():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [{"name": "a", "type": {"type": "array", "items": "long"}}],
    }
    program = _avro._native.Program(_avro.compile_program(schema, True))
    with pytest.raises(ValueError, match="block count larger"):
        _avro._native.decode(_long(2**40) + b"\x00", 1, program)
    with pytest.raises(ValueError, match="out of range"):
        _avro._native.decode(_long(-(2**63)), 1, program)
    with pytest.raises(ValueError, match="more records"):
        _avro._native.decode(b"\x00", 2, program)
    optional = {"type": "record", "name": "o", "fields": [{"name": "a", "type": ["null", "long"]}]}
    with pytest.raises(ValueError, match="union branch"):
        _avro._native.decode(
            _long(2) + b"\x00", 1, _avro._native.Program(_avro.compile_program(optional, True))
        )


@needs_native
def test_a_malformed_program_is_refused():
    with pytest.raises(ValueError, match="out of order"):
        _avro._native.Program([(8, True, 0, (0,), ("a",))])  # a record that contains itself
    with pytest.raises(ValueError, match="malformed program node"):
        _avro._native.Program([(99, True, 0, (), ())])
    with pytest.raises(ValueError):
        _avro._native.Program([])


@needs_native
def memory_growth(rounds: Any, warm: int, times: int) -> int:
    """Bytes still allocated after ``rounds(times)`` that were not before it (after ``rounds(warm)``)."""
    rounds(warm)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        rounds(times)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_decoding_many_times_keeps_memory_flat(small_manifest, stats_manifest):
    corrupt = bytearray(small_manifest)
    corrupt[len(corrupt) // 2] ^= 0xFF
    blobs = raw_blobs(stats_manifest)[:6]
    assert blobs

    def rounds(times: int) -> None:
        for _ in range(times):
            _avro.decode_records(small_manifest, KEEP, native=True)
            _avro.decode_records(small_manifest, True, native=True)
            try:
                _avro.decode_records(bytes(corrupt), KEEP, native=True)
            except ValueError:
                pass
            _avro.decode_records(small_manifest, RAW_KEEP, native=True)
            for values, blob in blobs:
                parse = _avro._native.int_bytes_map if values == "bytes" else _avro._native.int_long_map
                parse(blob)
                try:
                    parse(blob[:-1])
                except ValueError:
                    pass

    grown = memory_growth(rounds, 100, 1000)  # 100 first: warm caches (the program, interned keys)
    print(f"grown {grown}")
    assert grown < 16 * 1024, f"{grown} bytes more after 1000 decodes (a leak of one object a call: ~50 kB)"


def test_the_environment_can_force_the_python_decoder():
    code = (
        "from storage.formats.iceberg import _avro; print(_avro.NATIVE, _avro.NATIVE_BUILT,"
        " _avro.int_bytes_map is _avro._py_int_bytes_map, _avro.int_long_map is _avro._py_int_long_map)"
    )
    env = dict(os.environ, LAKEWARDEN_NATIVE_AVRO="0")
    forced = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True
    )
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.split() == ["False", str(_avro.NATIVE_BUILT), "True", "True"]


# -- statistics maps kept "raw" --------------------------------------------------------------


def parsers(values: str) -> list[Any]:
    """The parsers of a raw map of ``values`` ("bytes"/"long"): Python's, and C's when built."""
    python = _avro._py_int_bytes_map if values == "bytes" else _avro._py_int_long_map
    if not _avro.NATIVE_BUILT:
        return [python]
    return [python, _avro._native.int_bytes_map if values == "bytes" else _avro._native.int_long_map]


def assert_raw_parses_to_the_decoded_maps(
    data: bytes, keep: Any, raw_keep: Any, fields: dict[str, str]
) -> int:
    """Decoding ``data`` with ``raw_keep`` gives, in both decoders, the records ``keep`` gives
    with each of ``fields`` (in data_file when the keep has one) a blob that every parser turns
    into exactly the decoded map; the number of blobs checked."""
    want = assert_decoders_agree(data, keep)
    got = assert_decoders_agree(data, raw_keep)
    assert len(got) == len(want)
    nested = "data_file" in raw_keep
    blobs = 0
    for index, (raw_record, record) in enumerate(zip(got, want, strict=True)):
        if nested:
            assert_same({**raw_record, "data_file": None}, {**record, "data_file": None}, f"record {index}")
        holder, raw_holder = (
            (record["data_file"], raw_record["data_file"]) if nested else (record, raw_record)
        )
        assert list(raw_holder) == list(holder)
        for name, value in holder.items():
            where = f"record {index}.{name}"
            if name not in fields:
                assert_same(raw_holder[name], value, where)
            elif value is None:
                assert raw_holder[name] is None, where
            else:
                assert type(raw_holder[name]) is bytes, where
                for parse in parsers(fields[name]):
                    assert_same(parse(raw_holder[name]), value, f"{where} by {parse}")
                blobs += 1
    return blobs


RAW_CASES = [(KEEP, RAW_KEEP, STATS), (PROBE, RAW_PROBE, {"lower_bounds": "bytes"})]


@pytest.mark.parametrize(("keep", "raw_keep", "fields"), RAW_CASES, ids=["KEEP", "PROBE"])
def test_raw_statistics_maps_parse_to_the_decoded_ones_for_every_fixture_manifest(
    external_tables, keep, raw_keep, fields
):
    paths = fixture_manifests()
    assert paths, f"no Iceberg manifest under {external_tables}"
    blobs = sum(assert_raw_parses_to_the_decoded_maps(p.read_bytes(), keep, raw_keep, fields) for p in paths)
    assert blobs


@pytest.mark.parametrize(("keep", "raw_keep", "fields"), RAW_CASES, ids=["KEEP", "PROBE"])
def test_raw_statistics_maps_parse_to_the_decoded_ones_for_manifests_written_here(
    written_manifests, keep, raw_keep, fields
):
    blobs = sum(
        assert_raw_parses_to_the_decoded_maps(data, keep, raw_keep, fields)
        for data in written_manifests.values()
    )
    assert blobs


EVERYTHING_MAPS = {"bounds": "bytes", "counts": "long", "bounds_again": "bytes"}
EVERYTHING_RAW = [
    {**{field["name"]: True for field in EVERYTHING["fields"]}, **dict.fromkeys(EVERYTHING_MAPS, "raw")},
    with_raw(EVERYTHING_KEEPS[1], {"bounds": "bytes", "counts": "long"}),
]


@pytest.mark.parametrize("codec", ["null", "deflate"])
@pytest.mark.parametrize("which", [0, 1], ids=["everything", "projection"])
def test_raw_maps_parse_to_the_decoded_ones_among_every_avro_type(codec, which):
    rng = random.Random(7)
    data = fastavro_file(EVERYTHING, [_everything(rng) for _ in range(300)], codec=codec, sync_interval=2000)
    keep = True if which == 0 else EVERYTHING_KEEPS[1]
    # bounds in every record (and bounds_again, kept by the first), counts in two thirds
    assert assert_raw_parses_to_the_decoded_maps(data, keep, EVERYTHING_RAW[which], EVERYTHING_MAPS) >= 500


BLOCKS_RAW = {"bounds": "raw", "counts": "raw", "ints": True}


def test_a_raw_map_is_the_file_s_bytes_with_negative_block_counts_and_sizes():
    data = _container(BLOCKS_SCHEMA, [(2, _blocks_record(1) + _blocks_record(2)), (1, _blocks_record(3))])
    got = assert_decoders_agree(data, BLOCKS_RAW)
    bounds = _blocks([_long(j) + _long(2) + b"\x00\xff" for j in range(5)])
    counts = _blocks([_long(j) + _long(-j) for j in range(3)])
    assert [r["bounds"] for r in got] == [bounds] * 3 and [r["counts"] for r in got] == [counts] * 3
    for parse in parsers("bytes"):
        assert parse(bounds) == {j: b"\x00\xff" for j in range(5)}
    for parse in parsers("long"):
        assert parse(counts) == {0: 0, 1: -1, 2: -2}


K1_V2 = EVERYTHING["fields"][20]["type"]  # array of {key: int, value: bytes}, defines k1_v2
RAW_SHAPES = {
    "type": "record",
    "name": "shapes",
    "fields": [
        {"name": "plain", "type": K1_V2},
        {"name": "null_second", "type": [{"type": "array", "items": "k1_v2"}, "null"]},
        {
            "name": "holders",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "holder",
                    "fields": [
                        {"name": "m", "type": ["null", {"type": "array", "items": "k1_v2"}]},
                        {"name": "n", "type": "long"},
                    ],
                },
            },
        },
    ],
}
RAW_SHAPES_KEEP = {"plain": "raw", "null_second": "raw", "holders": {"m": "raw", "n": True}}


def test_raw_maps_read_alike_after_a_union_s_second_branch_and_inside_arrays_of_records():
    def pairs(rng: random.Random) -> list[dict[str, Any]]:
        return [
            {"key": rng.randrange(-(2**31), 2**31), "value": rng.randbytes(rng.randrange(4))}
            for _ in range(3)
        ]

    rng = random.Random(3)
    records = [
        {
            "plain": pairs(rng),
            "null_second": rng.choice([None, pairs(rng), []]),
            "holders": [{"m": rng.choice([None, pairs(rng)]), "n": i} for i in range(rng.randrange(3))],
        }
        for _ in range(50)
    ]
    data = fastavro_file(RAW_SHAPES, records, codec="deflate")
    want = assert_decoders_agree(data, True)
    got = assert_decoders_agree(data, RAW_SHAPES_KEEP)
    as_map = {"plain", "null_second", "m"}
    for raw_record, record in zip(got, want, strict=True):
        for raw_holder, holder in [
            (raw_record, record),
            *zip(raw_record["holders"], record["holders"], strict=True),
        ]:
            for name in as_map & set(holder):
                if holder[name] is None:
                    assert raw_holder[name] is None
                    continue
                for parse in parsers("bytes"):
                    assert_same(parse(raw_holder[name]), holder[name])


def _one_field(field_type: Any) -> dict[str, Any]:
    return {"type": "record", "name": "one", "fields": [{"name": "m", "type": field_type}]}


def _pairs(key: Any, value: Any) -> dict[str, Any]:
    fields = [{"name": "key", "type": key}, {"name": "value", "type": value}]
    return {"type": "array", "items": {"type": "record", "name": "pair", "fields": fields}}


NOT_RAW_MAPS = [
    *[_one_field(field["type"]) for field in EVERYTHING["fields"] if field["name"] not in EVERYTHING_MAPS],
    _one_field(_pairs("long", "bytes")),
    _one_field(_pairs("int", "string")),
    _one_field(_pairs("int", ["null", "bytes"])),
    _one_field({"type": "map", "values": "bytes"}),
    _one_field(["null", "long", _pairs("int", "bytes")]),
    _one_field(["null", "null"]),
]


@pytest.mark.parametrize(
    "schema", NOT_RAW_MAPS, ids=[json.dumps(s["fields"][0]["type"])[:40] for s in NOT_RAW_MAPS]
)
def test_raw_on_any_other_type_is_refused_by_both_compilers(schema):
    # EVERYTHING's named types are defined in its own fields: fields naming them are checked there
    if isinstance(schema["fields"][0]["type"], str) and schema["fields"][0]["type"] in ("sixteen", "k1_v2"):
        schema = dict(
            EVERYTHING, fields=[*EVERYTHING["fields"], {"name": "m", "type": schema["fields"][0]["type"]}]
        )
    keep = {"m": "raw"}
    with pytest.raises(ValueError, match='keep "raw" is only for an Iceberg int-keyed map'):
        _avro.ManifestDecoder(schema, keep)
    with pytest.raises(ValueError, match='keep "raw" is only for an Iceberg int-keyed map'):
        _avro.compile_program(schema, keep)


RAW_ON_WRONG_FIELDS = [
    with_raw(KEEP, {"file_path": "bytes"}),
    with_raw(KEEP, {"partition": "bytes"}),
    with_raw(KEEP, {"split_offsets": "long"}),
    dict(KEEP, status="raw"),
]


@pytest.mark.parametrize("native", [False, pytest.param(True, marks=needs_native)], ids=["python", "native"])
@pytest.mark.parametrize(
    "keep", RAW_ON_WRONG_FIELDS, ids=["file_path", "partition", "split_offsets", "status"]
)
def test_raw_on_a_manifest_field_that_is_no_int_keyed_map_raises_value_error(small_manifest, keep, native):
    with pytest.raises(ValueError, match='keep "raw"'):
        _avro.decode_records(small_manifest, keep, native=native)


def test_a_raw_map_read_by_a_binary_decoder_iter_blocks_did_not_make_is_refused(stats_manifest):
    schema, payloads = _avro.iter_payloads(stats_manifest)
    payload, count = next(payloads)
    read, dec = _avro.decoder_for(schema, RAW_KEEP).read, _avro.Decoder(payload)
    with pytest.raises(RuntimeError, match="iter_blocks did not make"):
        for _ in range(count):  # up to the first map that is not null
            read(dec)


@pytest.fixture(scope="module")
def stats_manifest(written_manifests) -> bytes:
    """The smallest manifest written here with both kinds of statistics maps (the v3 writer's
    have none)."""
    return min((d for d in written_manifests.values() if len({v for v, _ in raw_blobs(d)}) == 2), key=len)


def raw_blobs(data: bytes) -> list[tuple[str, bytes]]:
    """("bytes"/"long", blob) of every statistics map of ``data`` kept raw."""
    records = _avro.decode_records(data, RAW_KEEP, native=False)[1]
    return [
        (STATS[name], record["data_file"][name])
        for record in records
        for name in STATS
        if record["data_file"].get(name) is not None
    ]


def parsed(parse: Any, blob: bytes) -> Any:
    try:
        return parse(blob)
    except ValueError as exc:
        return ValueError(str(exc))


def assert_parsers_agree(values: str, blob: bytes, where: str) -> Any:
    """What every parser makes of ``blob`` (a dict or a ValueError, never another exception)."""
    outcomes = [parsed(parse, blob) for parse in parsers(values)]
    for got in outcomes[1:]:
        if isinstance(outcomes[0], ValueError):
            assert isinstance(got, ValueError), f"{where}: Python raised {outcomes[0]}, C gave {got!r}"
        else:
            assert_same(got, outcomes[0], where)
    return outcomes[0]


def test_raw_blobs_cut_short_or_followed_by_bytes_raise_value_error_in_every_parser(stats_manifest):
    blobs = raw_blobs(stats_manifest)
    assert {values for values, _ in blobs} == {"bytes", "long"}
    for values, blob in blobs:
        for cut in range(len(blob)):
            for parse in parsers(values):
                with pytest.raises(ValueError):
                    parse(blob[:cut])
        for tail in (b"\x00", b"\x02", b"\xff"):
            for parse in parsers(values):
                with pytest.raises(ValueError, match="bytes after"):
                    parse(blob + tail)


def test_corrupt_raw_blobs_raise_value_error_or_parse_alike_in_every_parser(stats_manifest):
    rng = random.Random(13)
    changed = 0
    for values, blob in raw_blobs(stats_manifest)[:12]:
        want = assert_parsers_agree(values, blob, "intact")
        corruptions = [(at, 0xFF) for at in range(len(blob))]
        corruptions += [(rng.randrange(len(blob)), rng.randrange(1, 256)) for _ in range(300)]
        for at, mask in corruptions:
            data = bytearray(blob)
            data[at] ^= mask
            got = assert_parsers_agree(values, bytes(data), f"byte {at} ^ {mask:#x}")
            changed += not isinstance(got, ValueError) and got != want
    assert changed  # some corruptions only change a bound or a count
    for _ in range(3000):  # and noise
        noise = rng.randbytes(rng.randrange(24))
        for values in ("bytes", "long"):
            assert_parsers_agree(values, noise, f"noise {noise!r}")


@pytest.mark.parametrize(
    ("values", "blob", "outcome"),
    [
        ("bytes", b"", "runs past the end"),
        ("bytes", b"\x00", {}),
        ("long", b"\x00", {}),
        ("long", b"\x00\x00", "bytes after"),
        ("long", b"\x01\x00\x02\x04\x00", {1: 2}),  # -1: one item, then the block's size (not checked)
        ("long", b"\x01\x04\x02\x04\x00", {1: 2}),
        ("long", b"\x01\x03\x02\x04\x00", "negative block size"),
        ("long", _long(-(2**63)) + b"\x00", "block count"),
        ("long", _long(2**40) + b"\x00", "block count larger"),
        ("long", b"\x02" + _long(-(2**63)) + _long(2**63 - 1) + b"\x00", {-(2**63): 2**63 - 1}),
        ("long", b"\x02" + b"\xff" * 9 + b"\x02\x00\x00", "64 bits"),
        ("long", b"\x02" + b"\xff" * 10 + b"\x01\x00\x00", "longer than"),
        ("bytes", b"\x02\x02\x01\x00", "negative length"),
        ("bytes", b"\x02\x02\x08ab\x00", "run past the end"),
        ("bytes", b"\x04\x02\x02a\x02\x02b\x00", {1: b"b"}),  # a repeated key: the last value
        ("bytes", b"\x04\x04\x00\x02\x00\x00", {2: b"", 1: b""}),  # in the file's order
    ],
)
def test_hand_made_raw_blobs_parse_or_fail_alike_in_every_parser(values, blob, outcome):
    for parse in parsers(values):
        if isinstance(outcome, str):
            with pytest.raises(ValueError, match=outcome):
                parse(blob)
        else:
            assert_same(parse(blob), outcome, str(parse))
    for parse in parsers(values):  # any bytes-like object, as the raw blob's slice would be
        assert repr(parsed(parse, bytearray(blob))) == repr(parsed(parse, blob)), f"bytearray by {parse}"


def test_the_public_parsers_are_the_compiled_ones_when_it_is_used():
    compiled = _avro.NATIVE
    assert (_avro.int_bytes_map is getattr(_avro._native, "int_bytes_map", None)) is compiled
    assert (_avro.int_long_map is getattr(_avro._native, "int_long_map", None)) is compiled


# -- the schema-level entry check --------------------------------------------------------------


def _entry_schema(**data_file_types: Any) -> dict[str, Any]:
    """A manifest_entry schema whose data_file fields have the given types (the rest as written
    by pyiceberg)."""
    fields = {
        "file_path": "string",
        "file_size_in_bytes": "long",
        "record_count": "long",
        "partition": {"type": "record", "name": "r102", "fields": []},
        **data_file_types,
    }
    return {
        "type": "record",
        "name": "manifest_entry",
        "fields": [
            {"name": "status", "type": "int", "field-id": 0},
            {
                "name": "data_file",
                "field-id": 2,
                "type": {
                    "type": "record",
                    "name": "r2",
                    "fields": [{"name": n, "type": t} for n, t in fields.items() if t is not None],
                },
            },
        ],
    }


def test_a_manifest_written_by_pyiceberg_is_well_typed(written_manifests):
    data = next(iter(written_manifests.values()))
    decoder = _avro.decoder_for(_avro.iter_payloads(data)[0], KEEP)
    assert decoder.well_typed


@pytest.mark.parametrize(
    "changes",
    [
        {"file_path": ["null", "string"]},
        {"record_count": ["null", "long"]},
        {"file_size_in_bytes": "string"},
        {"partition": ["null", {"type": "record", "name": "p", "fields": []}]},
        {"partition": None},
        {"file_path": None},
    ],
    ids=["nullable path", "nullable count", "string size", "nullable partition", "no partition", "no path"],
)
def test_an_entry_schema_that_does_not_guarantee_the_listed_fields_keeps_the_per_entry_check(changes):
    assert _avro.ManifestDecoder(_entry_schema(), KEEP).well_typed
    assert not _avro.ManifestDecoder(_entry_schema(**changes), KEEP).well_typed
    nullable_data_file = _entry_schema()
    nullable_data_file["fields"][1]["type"] = ["null", nullable_data_file["fields"][1]["type"]]
    assert not _avro.ManifestDecoder(nullable_data_file, KEEP).well_typed


# -- numbers read through a word at a time ---------------------------------------------------

COUNTS_SCHEMA = {
    "type": "record",
    "name": "entry",
    "fields": [
        {"name": "counts", "type": EVERYTHING["fields"][21]["type"]},
        {"name": "ids", "type": {"type": "array", "items": "int"}},
        {"name": "after", "type": "string"},
    ],
}
COUNTS_KEEPS = [
    {"counts": False, "ids": False, "after": True},  # read through: skip_longs
    {"counts": "raw", "ids": True, "after": True},  # a raw map is read through too, then cut
    True,
]


def _counts_program(keep: Any) -> Any:
    return _avro.decoder_for(json.dumps(COUNTS_SCHEMA), keep).program()


def _zigzag_of_length(length: int, rng: random.Random) -> int:
    """A long whose zigzag varint takes ``length`` bytes (1 to 10)."""
    low = 0 if length == 1 else 1 << (7 * (length - 1))
    high = (1 << min(64, 7 * length)) - 1
    zigzag = rng.randint(max(low, 1 if length > 1 else 0), high)
    return (zigzag >> 1) ^ -(zigzag & 1)


def _counts_record(values: list[int], ids: list[int], after: str) -> bytes:
    items = b"".join(_long(k) + _long(v) for k, v in enumerate(values))
    counts = _long(1) + (_long(len(values)) + items if values else b"") + _long(0)  # the union's array
    id_block = (_long(len(ids)) + b"".join(_long(i) for i in ids) if ids else b"") + _long(0)
    return counts + id_block + _long(len(after)) + after.encode()


@needs_native
@pytest.mark.parametrize("keep", COUNTS_KEEPS, ids=["skipped", "raw", "decoded"])
def test_numbers_of_every_length_read_through_land_where_the_decoders_agree(keep):
    """Maps of longs are read through eight bytes at a time: numbers of 1 to 10 bytes, in maps of
    0 to 40 items, each followed by fields read again: both decoders give the same records."""
    rng = random.Random(11)
    records, payload = [], b""
    for n in range(300):
        values = [_zigzag_of_length(rng.choice(range(1, 11)), rng) for _ in range(n % 41)]
        ids = [_zigzag_of_length(rng.choice((1, 2, 5)), rng) % 2**31 for _ in range(n % 7)]
        records.append((values, ids, f"after {n}"))
        payload += _counts_record(values, ids, f"after {n}")
    got = assert_decoders_agree(_container(COUNTS_SCHEMA, [(len(records), payload)]), keep)
    assert [r["after"] for r in got] == [f"after {n}" for n in range(300)]
    if keep is True:
        assert [r["counts"] for r in got] == [dict(enumerate(values)) for values, _, _ in records]
        assert [r["ids"] for r in got] == [ids for _, ids, _ in records]


@needs_native
@pytest.mark.parametrize("keep", COUNTS_KEEPS, ids=["skipped", "raw", "decoded"])
@pytest.mark.parametrize(
    ("number", "message"),
    [
        (b"\xff" * 9 + b"\x02", "64 bits"),  # ten bytes, the last above one
        (b"\xff" * 10 + b"\x01", "64 bits"),  # an eleventh byte: refused at the tenth
        (b"\x80" * 12, "64 bits"),
    ],
)
def test_a_malformed_number_among_many_is_refused_as_one_alone(keep, number, message):
    rng = random.Random(3)
    for at in range(0, 24, 5):  # the bad number after `at` good ones, at every alignment
        values = b"".join(_long(k) + _long(_zigzag_of_length(rng.choice((1, 2, 3)), rng)) for k in range(at))
        counts = _long(1) + _long(at + 1) + values + _long(at) + number + _long(0)
        record = counts + _long(0) + _long(1) + b"x" + b"\x00" * 16
        with pytest.raises(ValueError, match=message):
            _avro._native.decode(record, 1, _counts_program(keep))


@needs_native
@pytest.mark.parametrize("keep", COUNTS_KEEPS, ids=["skipped", "raw", "decoded"])
def test_numbers_cut_at_any_byte_fail_both_decoders_alike(keep):
    rng = random.Random(5)
    values = [_zigzag_of_length(length, rng) for length in (1, 3, 10, 2, 9, 1, 1, 4, 8, 1, 1, 1, 7, 2)]
    record = _counts_record(values, [1, 2**20], "tail")
    program = _counts_program(keep)
    assert _avro._native.decode(record, 1, program)[0]["after"] == "tail"
    for cut in range(len(record)):
        with pytest.raises(ValueError):
            _avro._native.decode(record[:cut], 1, program)
