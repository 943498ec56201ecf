"""The compiled stats pre-check of listing (``_avro.reject_bounds`` over the clauses
``_prune.native_clauses`` splits off a filter) rejects exactly the entries the Python pre-check
(``_prune.stats_check`` over the parsed bounds) rejects: on thousands of random bounds and
filters over every type it compiles, at the edges of each type, with bounds missing, promoted
(4-byte bounds of a long column) or split over several blocks; and malformed bounds fail as the
Python parsers fail. Listing a real table with and without it gives the same files.
"""

from __future__ import annotations

import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType,
    DateType,
    DoubleType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
    TimeType,
)

from storage.formats.iceberg import _avro
from storage.formats.iceberg._prune import native_clauses, stats_check
from storage.formats.iceberg._values import ColumnDecoder, stats_map
from storage.spec.expressions import And, Comparison, In, Not, Or
from tests.spec.test_avro_native import _long  # Avro's zigzag varint
from tests.spec.test_iceberg_filtered_decode import count_dropped

pytestmark = pytest.mark.skipif(
    not _avro.NATIVE_BUILT, reason="the compiled Avro decoder is not built (python scripts/build_native.py)"
)

UTC = dt.UTC
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "small", IntegerType(), required=False),
    NestedField(3, "day", DateType(), required=False),
    NestedField(4, "ts", TimestampType(), required=False),
    NestedField(5, "tstz", TimestamptzType(), required=False),
    NestedField(6, "name", StringType(), required=False),
    NestedField(7, "blob", BinaryType(), required=False),
    NestedField(8, "amount", DoubleType(), required=False),
    NestedField(9, "clock", TimeType(), required=False),
)
DECODER = ColumnDecoder(SCHEMA)
TYPES = {field.name: field.field_type for field in SCHEMA.fields}
IDS = {field.name: field.field_id for field in SCHEMA.fields}
OPS = ("=", "<", "<=", ">", ">=", "!=")

# small domains, so that bounds and literals meet at their edges often
INT64 = (-(2**63), 2**63 - 1)
DOMAINS: dict[str, list[Any]] = {
    "id": [INT64[0], INT64[0] + 1, -(2**31) - 1, -(2**31), -3, -1, 0, 1, 2, 255, 256, 2**31, INT64[1]],
    "small": [-(2**31), -129, -128, -1, 0, 1, 127, 128, 2**31 - 1],
    "day": [
        dt.date(1, 1, 1),
        dt.date(1969, 12, 31),
        dt.date(1970, 1, 1),
        dt.date(2024, 2, 29),
        dt.date(9999, 12, 31),
    ],
    "ts": [
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
        dt.datetime(1970, 1, 1),
        dt.datetime(1970, 1, 1, 0, 0, 0, 1),
        dt.datetime(2024, 5, 1, 12),
    ],
    "tstz": [
        dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        dt.datetime(1970, 1, 1, tzinfo=UTC),
        dt.datetime(2024, 5, 1, 12, tzinfo=UTC),
        dt.datetime(2024, 5, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))),  # the same instant
    ],
    "name": ["", "a", "ab", "b", "z", "é", "日本", "\U0001f600", "a\x00", "A"],
    "blob": [b"", b"\x00", b"\x00\x00", b"\x01", b"\x7f", b"\x80", b"\xff", b"\xff\x00"],
    "amount": [-1.5, 0.0, 2.5],
    "clock": [dt.time(0), dt.time(12), dt.time(23, 59)],
}
# literals the compiled check must leave to Python: other types, out of range, naive vs aware
FOREIGN: dict[str, list[Any]] = {
    "id": [2**63, -(2**63) - 1, 1.5, True],
    "small": [0.5],
    "day": [dt.datetime(1970, 1, 1)],
    "ts": [dt.datetime(1970, 1, 1, tzinfo=UTC)],
    "tstz": [dt.datetime(1970, 1, 1)],
    "name": [b"a"],
    "blob": ["a"],
}


def _internal(column: str, value: Any) -> Any:
    """``value`` as pyiceberg's ``to_bytes`` takes it for the column's type."""
    if column == "day":
        return (value - dt.date(1970, 1, 1)).days
    if column in ("ts", "tstz"):
        epoch = dt.datetime(1970, 1, 1, tzinfo=UTC if value.tzinfo else None)
        return (value - epoch) // dt.timedelta(microseconds=1)
    if column == "clock":
        return (value.hour * 3600 + value.minute * 60 + value.second) * 1_000_000 + value.microsecond
    return value


def raw_map(pairs: list[tuple[int, bytes]], blocks: int = 1) -> bytes:
    """An Iceberg int -> bytes map as the manifest decoder keeps it raw: its Avro array blocks
    (``blocks`` of them; from the second on with a negative count and a byte size) and the
    closing zero count."""
    out = bytearray()
    size = max(1, -(-len(pairs) // blocks)) if pairs else 1
    for first in range(0, len(pairs), size):
        chunk = pairs[first : first + size]
        body = b"".join(_long(key) + _long(len(value)) + value for key, value in chunk)
        out += _long(len(chunk)) + body if first == 0 else _long(-len(chunk)) + _long(len(body)) + body
    return bytes(out + b"\x00")


def python_rejects(expr: Any, lower: bytes | None, upper: bytes | None) -> bool:
    check = stats_check(expr, DECODER)
    if check is None:
        return False
    return not check(None if lower is None else stats_map(lower), None if upper is None else stats_map(upper))


def native_rejects(expr: Any, lower: bytes | None, upper: bytes | None) -> tuple[bool, int]:
    """What listing decides (``index._Checks``): the compiled clauses, then Python for the rest;
    and the number of clauses compiled."""
    clauses, rest = native_clauses(expr, DECODER)
    if clauses and _avro.reject_bounds(lower, upper, clauses):
        return True, len(clauses)
    if rest is None:
        return False, len(clauses)
    return python_rejects(rest, lower, upper), len(clauses)


# bounds no strict UTF-8 decoder reads (Python's keeps the file for them)
NOT_UTF8 = [
    b"\xff",
    b"\xff\xfe",
    b"a\xc3",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe0\x9f\xbf",
    b"z\x80",
]


def _random_comparison(rng: random.Random) -> Comparison:
    column = rng.choice(list(DOMAINS))
    values = DOMAINS[column] + (FOREIGN.get(column, []) if rng.random() < 0.1 else [])
    return Comparison(rng.choice(OPS), column, rng.choice(values))


def _random_filter(rng: random.Random) -> Any:
    shape = rng.random()
    if shape < 0.5:
        return _random_comparison(rng)
    if shape < 0.8:
        return And(*(_random_comparison(rng) for _ in range(rng.randrange(2, 4))))
    if shape < 0.9:
        return And(_random_comparison(rng), Or(_random_comparison(rng), _random_comparison(rng)))
    column = rng.choice(["id", "name", "day"])
    return And(In(column, tuple(rng.sample(DOMAINS[column], 2))), _random_comparison(rng))


def _random_bounds(rng: random.Random) -> tuple[bytes | None, bytes | None]:
    """Raw lower and upper maps of a file: each column's min <= max, some absent, some columns'
    bounds missing from one side, long bounds sometimes written 4 bytes wide (a column promoted
    from int), the pairs in any order and over one to three blocks."""
    lower: list[tuple[int, bytes]] = []
    upper: list[tuple[int, bytes]] = []
    for column, domain in DOMAINS.items():
        low, high = sorted(rng.sample(domain, 2), key=lambda v: _internal(column, v))
        if column in ("ts", "tstz") or rng.random() < 0.3:
            low, high = sorted((rng.choice(domain), rng.choice(domain)), key=lambda v: _internal(column, v))
        for side, value in ((lower, low), (upper, high)):
            if rng.random() < 0.1:
                continue
            encoded = to_bytes(TYPES[column], _internal(column, value))
            if column == "id" and -(2**31) <= value < 2**31 and rng.random() < 0.3:
                encoded = to_bytes(IntegerType(), value)  # promoted from int: 4 bytes
            if column == "name" and rng.random() < 0.15:
                encoded = rng.choice(NOT_UTF8)  # a foreign writer's bound: unknown, never pruned by it
            side.append((IDS[column], encoded))
    rng.shuffle(lower)
    rng.shuffle(upper)
    blocks = rng.randrange(1, 4)
    return (
        None if rng.random() < 0.05 else raw_map(lower, blocks),
        None if rng.random() < 0.05 else raw_map(upper, blocks),
    )


def test_the_compiled_check_rejects_exactly_what_the_python_check_rejects():
    rng = random.Random(20261125)
    outcomes = {True: 0, False: 0}
    compiled = 0
    for trial in range(20_000):
        expr = _random_filter(rng)
        lower, upper = _random_bounds(rng)
        want = python_rejects(expr, lower, upper)
        got, clauses = native_rejects(expr, lower, upper)
        assert got == want, f"trial {trial}: {expr!r} over {lower!r} / {upper!r}"
        outcomes[want] += 1
        compiled += clauses > 0
    # both answers are common, and most filters reached the compiled check
    assert outcomes[True] > 3000 and outcomes[False] > 3000, outcomes
    assert compiled > 12_000


@pytest.mark.parametrize(
    ("expr", "compiled", "rest"),
    [
        (Comparison(">=", "id", 5), 1, None),
        (And(Comparison(">=", "id", 5), Comparison("<", "id", 9)), 2, None),
        (And(Comparison("=", "name", "eu"), And(Comparison(">", "day", dt.date(2024, 1, 1)))), 2, None),
        (
            And(Comparison("=", "tstz", dt.datetime(2024, 1, 1, tzinfo=UTC)), Comparison("=", "blob", b"x")),
            2,
            None,
        ),
        (Comparison("!=", "id", 5), 0, Comparison("!=", "id", 5)),
        (Comparison(">", "amount", 1.0), 0, Comparison(">", "amount", 1.0)),
        (Comparison(">", "clock", dt.time(1)), 0, Comparison(">", "clock", dt.time(1))),
        (Comparison("=", "id", 2**63), 0, Comparison("=", "id", 2**63)),
        (
            Comparison("=", "tstz", dt.datetime(2024, 1, 1)),
            0,
            Comparison("=", "tstz", dt.datetime(2024, 1, 1)),
        ),
        (Comparison("=", "nope", 1), 0, Comparison("=", "nope", 1)),
        (
            And(
                Comparison(">", "id", 1),
                Or(Comparison("=", "id", 1), Comparison("=", "id", 2)),
                Not(Comparison("=", "small", 3)),
            ),
            1,
            And(Or(Comparison("=", "id", 1), Comparison("=", "id", 2)), Not(Comparison("=", "small", 3))),
        ),
    ],
)
def test_filters_split_into_compiled_clauses_and_the_rest(expr, compiled, rest):
    clauses, remainder = native_clauses(expr, DECODER)
    assert len(clauses) == compiled
    assert remainder == rest


def test_literals_become_what_the_bounds_hold():
    clauses, _ = native_clauses(
        And(
            Comparison("=", "day", dt.date(1969, 12, 31)),
            Comparison("<", "ts", dt.datetime(1970, 1, 1, 0, 0, 1)),
            Comparison(">=", "tstz", dt.datetime(1970, 1, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2)))),
            Comparison("<=", "name", "é"),
        ),
        DECODER,
    )
    assert clauses == ((3, 0, 0, -1), (4, 0, 1, 1_000_000), (5, 0, 4, 0), (6, 2, 2, "é".encode()))


def _utf8_edge_cases(rng: random.Random) -> list[bytes]:
    """Every one- and two-byte string, the boundaries of each UTF-8 lead byte's ranges, and
    random three- and four-byte strings."""
    found = [bytes([a]) for a in range(256)] + [bytes([a, b]) for a in range(256) for b in range(256)]
    for lead in range(0xC0, 0x100):
        for second in (0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0):
            found += [
                bytes([lead, second, 0x80]),
                bytes([lead, second, 0x80, 0xBF]),
                bytes([lead, second, 0xC0, 0x80]),
            ]
            found += [b"ok" + bytes([lead, second, 0x80, 0x80])]
    found += [rng.randbytes(rng.randrange(3, 9)) for _ in range(100_000)]
    found += [chr(c).encode("utf-8", "surrogatepass") for c in range(0xD700, 0xE100)]  # around surrogates
    return found


def test_string_bounds_count_only_when_python_would_decode_them():
    """A string bound that is not strict UTF-8 is unknown: the compiled check must know UTF-8
    exactly as Python's decoder does (one test: a bound equal to itself against the empty
    literal, which rejects a known non-empty bound)."""
    rng = random.Random(8)
    clause = ((6, 2, 0, b""),)  # name = ''
    decodable = 0
    for blob in _utf8_edge_cases(rng):
        try:
            blob.decode("utf-8")
            known = True
        except UnicodeDecodeError:
            known = False
        decodable += known
        bound = raw_map([(6, blob)])
        assert _avro.reject_bounds(bound, bound, clause) is (known and blob != b""), blob
        # as binary, every bound counts
        assert _avro.reject_bounds(bound, bound, ((6, 1, 0, b""),)) is (blob != b""), blob
    assert decodable > 20_000


def test_bounds_of_unreadable_width_are_unknown_and_reject_nothing():
    clauses = ((1, 0, 0, 5),)  # id = 5
    for width in (0, 9, 16):
        bound = raw_map([(1, b"\x09" * width)])
        assert not _avro.reject_bounds(bound, bound, clauses)
    assert _avro.reject_bounds(raw_map([(1, b"\x09")]), None, clauses)  # one byte: 9 > 5
    assert _avro.reject_bounds(raw_map([(1, b"\xff")]), raw_map([(1, b"\xfe")]), clauses) is True  # -1..-2
    assert _avro.reject_bounds(None, None, clauses) is False


def test_a_repeated_key_reads_its_last_value_as_the_parsed_map_does():
    lower = raw_map([(1, to_bytes(LongType(), 100)), (1, to_bytes(LongType(), 1))])
    assert stats_map(lower)[1] == to_bytes(LongType(), 1)
    assert not _avro.reject_bounds(lower, None, ((1, 0, 0, 5),))


@pytest.mark.parametrize(
    "blob",
    [b"", b"\x02\x02", b"\x02\x02\x08ab\x00", b"\x00\x00", b"\x02\x02\x01\x00", b"\x01\x03\x02\x04\x00"],
)
def test_malformed_bounds_raise_value_error_as_the_parsers_do(blob):
    with pytest.raises(ValueError):
        _avro.int_bytes_map(blob)
    for lower, upper in ((blob, None), (None, blob), (raw_map([]), blob)):
        with pytest.raises(ValueError):
            _avro.reject_bounds(lower, upper, ((1, 0, 0, 5),))


@pytest.mark.parametrize(
    "clauses",
    [
        [(1, 0, 0, 5)],  # a list
        ((1, 0, 0),),
        ((1, 2, 0, 5),),  # unknown kind
        ((1, 0, 5, 5),),  # unknown op
        ((1, 0, 0, "5"),),
        ((1, 1, 0, "a"),),  # bytes clause with a str
        ((1, 0, 0, 2**64),),
        tuple((1, 0, 0, 5) for _ in range(17)),
    ],
)
def test_malformed_clauses_are_refused(clauses):
    with pytest.raises((ValueError, OverflowError)):
        _avro.reject_bounds(None, None, clauses)


def test_bounds_that_are_not_bytes_are_refused():
    with pytest.raises(TypeError):
        _avro.reject_bounds({1: b"x"}, None, ((1, 0, 0, 5),))


# -- listing a real table ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def table(tmp_path_factory, sql_catalog):
    """A table of 30 one-file appends, each file holding a disjoint id range, a name, a day and
    a timestamp, so every compiled type prunes."""
    catalog = sql_catalog("prune", tmp_path_factory.mktemp("native_prune").as_uri())
    catalog.create_namespace("db")
    table = catalog.create_table(
        "db.t",
        pa.schema(
            [
                pa.field("id", pa.int64()),
                pa.field("name", pa.string()),
                pa.field("day", pa.date32()),
                pa.field("tstz", pa.timestamp("us", "UTC")),
                pa.field("amount", pa.float64()),
            ]
        ),
    )
    for k in range(30):
        ids = list(range(k * 10, k * 10 + 10))
        table.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "name": pa.array([f"name-{k:02d}-{i}" for i in ids]),
                    "day": pa.array([dt.date(2024, 1, 1) + dt.timedelta(days=k)] * 10, pa.date32()),
                    "tstz": pa.array(
                        [dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(hours=i) for i in ids],
                        pa.timestamp("us", "UTC"),
                    ),
                    "amount": pa.array([i * 0.5 for i in ids], pa.float64()),
                }
            )
        )
    from storage.formats.iceberg import IcebergAdapter

    return IcebergAdapter.open(catalog.load_table("db.t").metadata_location)


FILTERS = [
    "id = 42",
    "id >= 100 and id < 130",
    "id > 295",
    "id < 0",
    "name = 'name-07-75'",
    "name >= 'name-28'",
    "day = date '2024-01-05'",
    "day > date '2024-01-28' and id > 10",
    "tstz >= timestamp '2024-01-12 00:00:00+00:00' and tstz < timestamp '2024-01-12 06:00:00+00:00'",
    "id > 50 and (id < 60 or id > 280)",
    "id in (5, 155) and amount > 1",
    "amount > 140",
]


@pytest.mark.parametrize("filter_text", FILTERS)
def test_listing_with_the_compiled_check_lists_what_the_python_check_lists(table, filter_text, monkeypatch):
    import storage.formats.iceberg.index as index
    from storage.spec.expressions import bind_filter, to_arrow

    calls: list[bool] = []
    compiled = index.reject_bounds

    def counted(lower, upper, clauses):
        calls.append(compiled(lower, upper, clauses))
        return calls[-1]

    dropped: list[int] = []
    monkeypatch.setattr(index, "reject_bounds", counted)
    count_dropped(monkeypatch, dropped)
    with_compiled = sorted(s.base_file.path for s in table.file_index().list_files_at(filters=filter_text))
    monkeypatch.setattr(index, "reject_bounds", None)  # neither the listing's check nor the decoder's
    python_only = sorted(s.base_file.path for s in table.file_index().list_files_at(filters=filter_text))

    assert with_compiled == python_only
    assert len(with_compiled) < 30  # pruning pruned
    # every file holding a matching row is listed
    predicate = to_arrow(bind_filter(filter_text, table.schema))
    for file_slice in table.file_index().list_files_at():
        path = file_slice.base_file.path
        if pq.read_table(path.removeprefix("file://")).filter(predicate).num_rows:
            assert path in with_compiled, path
    # when the filter has a clause it compiles, the compiled check saw every entry: the decoder
    # dropped some while decoding (decode_filtered), the listing's check saw the others
    compiles = bool(native_clauses(table.bind(filter_text), ColumnDecoder(table.pyiceberg_table.schema()))[0])
    assert compiles == (filter_text not in ("amount > 140", "id in (5, 155) and amount > 1"))
    if compiles:
        assert sum(dropped) > 0 and len(calls) + sum(dropped) == 30
    else:
        assert calls == [] and dropped == []


# -- the compiled model builders ------------------------------------------------------------------


def _model(data_file: Any) -> dict[str, Any]:
    """Every field of a DataFile, its statistics as plain dicts, with the type of each value."""
    import dataclasses

    out = {}
    for field in dataclasses.fields(data_file):
        value = getattr(data_file, field.name)
        if field.name in ("lower_bounds", "upper_bounds", "null_counts") and value is not None:
            value = (type(value).__name__, dict(value.items()), value._bounds)
        out[field.name] = (type(value).__name__, value)
    return out


def _listing(table: Any) -> list[tuple[Any, ...]]:
    return [
        (
            s.partition,
            s.base_instant,
            s.file_group_id,
            _model(s.base_file),
            [_model(d) for d in s.delete_files],
        )
        for s in table.file_index().list_files_at()
    ]


@pytest.fixture(scope="module")
def fixture_tables(iceberg_fixture, external_tables):
    from storage.formats.iceberg import IcebergAdapter

    names = sorted(p.name for p in (external_tables / "iceberg").iterdir() if p.is_dir())
    assert len(names) >= 5
    return {name: IcebergAdapter.open(str(iceberg_fixture(name))) for name in names}


def test_plain_entries_are_built_in_c_as_make_data_file_builds_them(
    fixture_tables, table, tmp_path, monkeypatch
):
    """Every Iceberg fixture table (Spark and Trino: v1 and v2, partitioned, with position and
    equality deletes), the table above, and a v3 table (row lineage: never plain) list the same
    slices, field for field and type for type, with the compiled loop reading the encoded entries
    (plain_decode), with it over decoded entries (plain_slices) and the builder, with the builder
    alone, and with neither; with the compiled ones, make_data_file builds no data file of the
    tables without row lineage (the delete files of the delete index are its), and the entries of
    the tables without deletes or row lineage are read encoded."""
    from storage.formats.iceberg import IcebergAdapter, _entries, _manifests, index
    from tests.spec.iceberg_v3_tables import write_v3_table

    v3 = write_v3_table(tmp_path / "v3", stale_position_delete=(1, 2))
    tables = dict(fixture_tables, here=table, v3=IcebergAdapter.open(str(tmp_path / "v3")))
    assert v3.data_paths
    by_python: list[Any] = []
    python_builder = index.make_data_file

    def counted(record, *args):
        if not record["data_file"].get("content"):
            by_python.append(record)
        return python_builder(record, *args)

    read_encoded: list[int] = []
    compiled_decode = _entries.plain_decode

    def counted_decode(layout, payload, offset, count, scan, one):
        read_encoded.append(count)
        return compiled_decode(layout, payload, offset, count, scan, one)

    for name, spec_table in tables.items():
        monkeypatch.setattr(index, "make_data_file", counted)
        monkeypatch.setattr(_entries, "plain_decode", counted_decode)
        by_python.clear()
        read_encoded.clear()
        with_c = _listing(spec_table)
        built_by_python, encoded = len(by_python), sum(read_encoded)
        monkeypatch.setattr(_entries, "plain_layout", None)
        decoded_first = _listing(spec_table)
        monkeypatch.setattr(index, "plain_slices", None)
        builder_only = _listing(spec_table)
        monkeypatch.setattr(_manifests, "plain_data_file", None)
        without = _listing(spec_table)
        monkeypatch.undo()
        assert with_c == decoded_first == builder_only == without, name
        assert with_c, name
        has_deletes = any(s[4] for s in with_c)
        assert (encoded >= len(with_c)) == (name != "v3" and not has_deletes), (name, encoded)
        if name == "v3":
            assert built_by_python == len(with_c)  # every entry has a row id: make_data_file's
        else:
            assert built_by_python == 0, name  # every data file of these tables is plain


def test_entries_that_are_not_plain_are_left_to_make_data_file():
    from storage.formats.iceberg._avro import plain_data_file
    from storage.formats.iceberg._manifests import SpecContext, make_data_file, plain_context

    context = SpecContext(_spec(), SCHEMA)
    plain = plain_context(DECODER, context)
    assert plain is not None
    base = {
        "content": 0,
        "file_path": "s3://b/f.parquet",
        "file_format": "PARQUET",
        "partition": {},
        "record_count": 3,
        "file_size_in_bytes": 100,
        "lower_bounds": raw_map([(1, to_bytes(LongType(), 1))]),
        "upper_bounds": None,
        "null_value_counts": raw_map([]),
        "split_offsets": [4],
        "equality_ids": [],
        "referenced_data_file": None,
        "content_offset": None,
        "content_size_in_bytes": None,
        "first_row_id": None,
    }
    record = {"status": 1, "data_file": base}
    built = plain_data_file(plain, base, {}, 7, 9)
    assert _model(built) == _model(make_data_file(record, {}, DECODER, 7, 9, context, {}))
    assert built.file_format == "parquet" and built.split_offsets == (4,) and built.upper_bounds is None
    assert built.extra == {
        "sequence_number": 7,
        "snapshot_id": 9,
        "spec_id": context.spec_id,
        "identity_columns": {6: "name"},
    }
    # the same entry in other shapes: still plain, and built alike
    for change in (
        {"file_format": "Avro"},
        {"split_offsets": []},
        {"split_offsets": None},
        {"content": None},
        {"equality_ids": None},
        {"referenced_data_file": ""},
    ):
        data = dict(base, **change)
        built = plain_data_file(plain, data, {}, 7, 9)
        assert built is not None, change
        assert _model(built) == _model(
            make_data_file({"status": 1, "data_file": data}, {}, DECODER, 7, 9, context, {})
        )
    # not plain: left to make_data_file
    for change in (
        {"content": 1},
        {"content": 2},
        {"content": 2**70},
        {"content": True},
        {"equality_ids": [1]},
        {"referenced_data_file": "s3://b/g.parquet"},
        {"content_offset": 4},
        {"first_row_id": 0},
        {"file_format": b"PARQUET"},
        {"split_offsets": (4,)},
    ):
        assert plain_data_file(plain, dict(base, **change), {}, 7, 9) is None, change
    for missing in ("file_path", "file_format", "record_count", "file_size_in_bytes"):
        data = dict(base)
        del data[missing]
        assert plain_data_file(plain, data, {}, 7, 9) is None, missing
    assert plain_data_file(plain, list(base.items()), {}, 7, 9) is None
    with pytest.raises(ValueError):
        plain_data_file(plain[:5], base, {}, 7, 9)


def _spec():
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    return PartitionSpec(PartitionField(6, 1000, IdentityTransform(), "name"))


def test_a_spec_with_identity_fields_names_them_in_extra_and_nanosecond_ones_are_left_to_python():
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import TimestampNanoType

    from storage.formats.iceberg._avro import plain_data_file
    from storage.formats.iceberg._manifests import SpecContext, plain_context

    context = SpecContext(_spec(), SCHEMA)
    data = {"file_path": "f", "file_format": "parquet", "record_count": 1, "file_size_in_bytes": 2}
    built = plain_data_file(plain_context(DECODER, context), data, {"name": "x"}, 1, 2)
    assert built.extra["identity_columns"] == {6: "name"} and built.partition == {"name": "x"}
    assert built.lower_bounds is None and built.split_offsets is None and built.equality_columns == ()
    nanos = Schema(NestedField(1, "at", TimestampNanoType(), required=False))
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "at"))
    assert plain_context(ColumnDecoder(nanos), SpecContext(spec, nanos)) is None


def test_slots_makers_build_what_the_constructors_build():
    from storage.formats.iceberg._manifests import _lazy_stats, slots_maker
    from storage.formats.iceberg._values import LazyStats

    raw = raw_map([(1, to_bytes(LongType(), 5)), (6, b"eu")])
    for maker in (
        _lazy_stats,
        slots_maker(LazyStats, ("_raw", "_decoder", "_bounds", "_by_id"), native=False),
    ):
        made = maker(raw, DECODER, True, None)
        reference = LazyStats(raw, DECODER, True)
        assert type(made) is LazyStats
        assert {s: getattr(made, s) for s in LazyStats.__slots__} == {
            s: getattr(reference, s) for s in LazyStats.__slots__
        }
        assert dict(made.items()) == {"id": 5, "name": "eu"}
        with pytest.raises(TypeError):
            maker(raw, DECODER, True)
    assert type(_lazy_stats).__name__ == "SlotsMaker"
    with pytest.raises(TypeError):
        _lazy_stats(raw, DECODER, True, _raw=None)
    for bad in (("nope",), ("ids", "names", "_missing")):
        with pytest.raises(ValueError, match="slot"):
            slots_maker(LazyStats, bad)
        with pytest.raises(ValueError, match="slot"):
            slots_maker(LazyStats, bad, native=False)
    with pytest.raises(ValueError, match="slot"):
        slots_maker(LazyStats, ("__init__",))  # a method, not a slot


# -- inflating -------------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 4096, 70_000, 3_000_000])
def test_blocks_that_inflate_far_beyond_their_size_join_as_fastavro_reads_them(size):
    """A deflate block of a highly compressible record inflates to hundreds of times its size:
    the compiled join (libdeflate when built with it: retried with more room) gives the records
    fastavro reads, next to ordinary blocks."""
    import io

    import fastavro

    schema = fastavro.parse_schema(
        {
            "type": "record",
            "name": "r",
            "fields": [{"name": "k", "type": "long"}, {"name": "text", "type": "string"}],
        }
    )
    rows = [{"k": i, "text": ("a" * size if i == 1 else f"row {i}")} for i in range(5)]
    buffer = io.BytesIO()
    fastavro.writer(buffer, schema, rows, codec="deflate", sync_interval=1)  # one record a block
    data = buffer.getvalue()
    assert len(data) < size // 100 + 2000  # the big record compresses hundreds of times
    joined = _avro.join(data)
    assert sum(count for _, count in joined.payloads) == 5
    _, records = _avro.decode_joined(joined, True)
    assert records == rows


def test_the_compiled_module_inflates_with_libdeflate_when_its_header_is_installed():
    import os

    assert _avro._native.LIBDEFLATE in (0, 1)
    if os.path.exists("/usr/include/libdeflate.h"):  # setup installs it (libdeflate-dev) as root
        assert _avro._native.LIBDEFLATE == 1, "built without libdeflate: run scripts/build_native.py"


def test_malformed_bounds_fail_the_listing_s_pre_check_as_a_corrupt_table():
    from storage.formats.iceberg._manifests import SpecContext
    from storage.formats.iceberg.index import _Checks
    from storage.spec.errors import CorruptTable

    context = SpecContext(_spec(), SCHEMA)
    rejects = _Checks(Comparison("=", "id", 5), DECODER).rejecter(context)
    good = raw_map([(1, to_bytes(LongType(), 9))])
    assert rejects(None, {}, {"lower_bounds": good, "upper_bounds": good})  # 9 > 5: compiled, rejected
    with pytest.raises(CorruptTable, match="column statistics are malformed"):
        rejects(None, {}, {"lower_bounds": b"\x02\x02", "upper_bounds": good})
