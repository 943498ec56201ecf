"""Filtered decoding (``_avro_native.decode_filtered``): while decoding a manifest for a listing
with a filter, the compiled decoder reads through, without building them, the entries the listing
would drop (deleted ones, and those whose partition or compiled bounds clauses the filter
rejects). It must fail wherever decoding fails, drop exactly what the listing loop drops, and a
listing with it must list exactly, field for field, what a listing without it lists.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import random
from typing import Any

import pyarrow as pa
import pytest

from storage.formats.iceberg import _avro
from storage.formats.iceberg._entries import KEEP as LISTING_KEEP
from storage.spec.expressions import And, Comparison, Or
from tests.spec.test_avro_native import (
    EVERYTHING,
    EVERYTHING_KEEPS,
    _everything,
    assert_same,
    fastavro_file,
    fixture_manifests,
    written_manifests,  # noqa: F401 - a fixture
)

pytestmark = pytest.mark.skipif(
    not _avro.NATIVE_BUILT, reason="the compiled Avro decoder is not built (python scripts/build_native.py)"
)
UTC = dt.UTC
NOTHING = (-1, -1, -1, -1, -1)


def count_dropped(monkeypatch: Any, dropped: list[int]) -> None:
    """Has each filtered decoding of a payload (``decode_filtered``, or ``skim_entries`` then
    ``decode_skimmed``) append to ``dropped`` how many entries it dropped."""
    native = _avro._native
    decode_filtered, skim_entries, decode_skimmed = (
        native.decode_filtered,
        native.skim_entries,
        native.decode_skimmed,
    )
    # id(kept) -> [(kept, count of the skimmed payload)]: empty kept bytes are one object in
    # CPython, so several payloads skimmed ahead may share a key (only their sum is compared)
    counts: dict[int, list[tuple[bytes, int]]] = {}

    def counted(payload: bytes, count: int, program: Any, spec: Any) -> list[Any]:
        records = decode_filtered(payload, count, program, spec)
        dropped.append(count - len(records))
        return records

    def skimmed(payload: bytes, count: int, program: Any, spec: Any) -> Any:
        found = skim_entries(payload, count, program, spec)
        if found is not None:
            counts.setdefault(id(found[0]), []).append((found[0], count))
        return found

    def decoded(payload: bytes, kept: bytes, partitions: Any, program: Any, spec: Any) -> list[Any]:
        records = decode_skimmed(payload, kept, partitions, program, spec)
        dropped.append(counts[id(kept)].pop()[1] - len(records))
        return records

    monkeypatch.setattr(native, "decode_filtered", counted)
    monkeypatch.setattr(native, "skim_entries", skimmed)
    monkeypatch.setattr(native, "decode_skimmed", decoded)


def in_two_halves(payload: bytes, count: int, program: Any, spec: Any) -> Any:
    """What ``skim_entries`` then ``decode_skimmed`` give (a read-ahead thread skims, the consumer
    decodes): the records, or None when the skim found the payload malformed."""
    found = _avro._native.skim_entries(payload, count, program, spec)
    if found is None:
        return None
    return _avro._native.decode_skimmed(payload, found[0], found[1], program, spec)


def _outcome(call: Any, *args: Any) -> Any:
    try:
        return call(*args)
    except Exception as exc:
        return exc


def _decoder_and_payload(data: bytes, keep: Any) -> tuple[Any, bytes, int]:
    schema, payloads = _avro.iter_payloads(data)
    (payload, count), *_ = payloads
    return _avro.decoder_for(schema, keep), payload, count


def _variants(payload: bytes, rng: random.Random, corruptions: int) -> list[bytes]:
    """The payload, cut at every byte, and with random bytes overwritten."""
    found = [payload] + [payload[:cut] for cut in range(len(payload))]
    for _ in range(corruptions):
        corrupt = bytearray(payload)
        for _ in range(rng.randrange(1, 4)):
            corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
        found.append(bytes(corrupt))
    return found


@pytest.mark.parametrize("keep", EVERYTHING_KEEPS, ids=["everything", "projection", "skips"])
def test_filtered_decoding_fails_where_decoding_fails_and_else_returns_the_same_records(keep):
    """On every Avro type, whole, cut at every byte and corrupted: a filter that drops nothing
    gives what ``decode`` gives, and one that drops every record (its field ``i`` probed as an
    entry's status, 2 in every record: deleted) fails exactly where ``decode`` fails."""
    rng = random.Random(17)
    records = [dict(_everything(rng), i=2) for _ in range(25)]
    decoder, payload, count = _decoder_and_payload(fastavro_file(EVERYTHING, records), keep)
    program = decoder.program()
    (status,) = decoder.probes(((("i",), "long"),))
    assert (status >= 0) == (keep is True)  # kept only there
    drop_all = ((status, -1, -1, -1, -1), {}, None, None)
    failures = 0
    decode, decode_filtered = _avro._native.decode, _avro._native.decode_filtered
    for variant in _variants(payload, rng, 400):
        want = _outcome(decode, variant, count, program)
        kept = _outcome(decode_filtered, variant, count, program, (NOTHING, {}, None, None))
        halves = in_two_halves(variant, count, program, (NOTHING, {}, None, None))
        if isinstance(want, Exception):
            failures += 1
            assert isinstance(kept, ValueError), f"decode raised {want!r}, filtered gave {kept!r}"
            assert halves is None, f"decode raised {want!r}, the skim kept {halves!r}"
        else:
            assert_same(kept, want)
            assert_same(halves, want)
        if status < 0:
            continue
        dropped = _outcome(decode_filtered, variant, count, program, drop_all)
        halves = in_two_halves(variant, count, program, drop_all)
        if isinstance(want, Exception):
            assert isinstance(dropped, ValueError), f"decode raised {want!r}, dropping all gave {dropped!r}"
            assert halves is None, f"decode raised {want!r}, the skim kept {halves!r}"
        else:  # a corrupted i may keep a record: decoded as decode decodes it
            assert_same(dropped, [r for r in want if r["i"] != 2])
            assert_same(halves, [r for r in want if r["i"] != 2])
    assert failures > len(payload)  # every cut, and corruptions, failed


def _manifests(written: dict[str, bytes]) -> list[bytes]:
    return list(written.values()) + [path.read_bytes() for path in fixture_manifests()]


def test_deleted_entries_are_dropped_and_every_other_entry_decoded_as_decode_does(written_manifests):  # noqa: F811
    seen_deleted = 0
    for data in _manifests(written_manifests):
        decoder, payload, count = _decoder_and_payload(data, LISTING_KEEP)
        program = decoder.program()
        want = _avro._native.decode(payload, count, program)
        probes = decoder.probes(((("status",), "long"),)) + (-1, -1, -1, -1)
        assert probes[0] >= 0
        got = _avro._native.decode_filtered(payload, count, program, (probes, {}, None, None))
        assert_same(got, [r for r in want if r["status"] != 2])
        seen_deleted += len(want) - len(got)
        for cut in range(0, len(payload), 7):
            with pytest.raises(ValueError):
                _avro._native.decode_filtered(payload[:cut], count, program, (probes, {}, None, None))
    assert seen_deleted > 0


def _probes(decoder: Any) -> tuple[int, ...]:
    from storage.formats.iceberg.index import _PROBES

    return decoder.probes(_PROBES)


def test_partition_and_bounds_drop_what_the_listing_rules_drop(written_manifests):  # noqa: F811
    """Random partition verdicts and random compiled clauses on the id column: exactly the entries
    that are deleted, whose partition is rejected, or (data entries) whose bounds reject the
    clauses are dropped; each distinct partition is judged once per verdicts dict."""
    rng = random.Random(5)
    checked = 0
    for data in _manifests(written_manifests):
        decoder, payload, count = _decoder_and_payload(data, LISTING_KEEP)
        program = decoder.program()
        probes = _probes(decoder)
        if probes[2] < 0 or probes[3] < 0:
            continue
        want = _avro._native.decode(payload, count, program)
        for _ in range(20):
            salt = rng.random()
            calls: list[Any] = []

            def partition_rejects(
                partition: dict[str, Any], salt: float = salt, calls: list[Any] = calls
            ) -> bool:
                calls.append(partition)
                return random.Random(f"{salt}{sorted(partition.items(), key=str)}").random() < 0.3

            clauses = (
                tuple((1, 0, rng.randrange(5), rng.randrange(-20, 40)) for _ in range(rng.randrange(3)))
                or None
            )
            verdicts: dict[bytes, bool] = {}
            spec = (probes, verdicts, partition_rejects, clauses)
            got = _avro._native.decode_filtered(payload, count, program, spec)
            expected = []
            for record in want:
                data_file = record["data_file"]
                if record["status"] == 2:
                    continue
                if random.Random(f"{salt}{sorted(data_file['partition'].items(), key=str)}").random() < 0.3:
                    continue
                if (
                    clauses
                    and not data_file.get("content")
                    and _avro.reject_bounds(
                        data_file.get("lower_bounds"), data_file.get("upper_bounds"), clauses
                    )
                ):
                    continue
                expected.append(record)
            assert_same(got, expected)
            distinct = {
                repr(sorted(r["data_file"]["partition"].items(), key=str)) for r in want if r["status"] != 2
            }
            assert len(calls) <= len(distinct) and len(verdicts) == len(calls)
            again = len(calls)
            assert_same(_avro._native.decode_filtered(payload, count, program, spec), expected)
            assert len(calls) == again  # judged once: the verdicts are kept
            # in two halves: the same records, each distinct partition judged once per verdicts dict
            kept, partitions = _avro._native.skim_entries(payload, count, program, spec)
            assert len(set(partitions)) == len(partitions) <= len(distinct)
            assert_same(_avro._native.decode_skimmed(payload, kept, partitions, program, spec), expected)
            assert len(calls) == again
            fresh = (probes, {}, partition_rejects, clauses)
            assert_same(in_two_halves(payload, count, program, fresh), expected)
            assert len(calls) - again == len(fresh[1]) <= len(partitions)
            checked += 1
    assert checked >= 20


def test_a_partition_check_that_raises_fails_the_decoding(written_manifests):  # noqa: F811
    decoder, payload, count = _decoder_and_payload(next(iter(written_manifests.values())), LISTING_KEEP)

    def broken(partition: dict[str, Any]) -> bool:
        raise ZeroDivisionError("a bug in the check")

    spec = (_probes(decoder), {}, broken, None)
    with pytest.raises(ZeroDivisionError):
        _avro._native.decode_filtered(payload, count, decoder.program(), spec)
    kept, partitions = _avro._native.skim_entries(payload, count, decoder.program(), spec)  # not judged yet
    with pytest.raises(ZeroDivisionError):
        _avro._native.decode_skimmed(payload, kept, partitions, decoder.program(), spec)


def test_decode_skimmed_refuses_what_skim_entries_cannot_have_given(written_manifests):  # noqa: F811
    """The consumer's half checks what it is handed: whole entries, inside the payload, of its
    partitions (a payload swapped for another, or kept bytes cut, fail instead of reading
    elsewhere)."""
    decoder, payload, count = _decoder_and_payload(next(iter(written_manifests.values())), LISTING_KEEP)
    program, spec = decoder.program(), (_probes(decoder), {}, lambda partition: False, None)
    kept, partitions = _avro._native.skim_entries(payload, count, program, spec)
    assert len(kept) > 0 and len(partitions) > 0
    with pytest.raises(ValueError, match="not whole entries"):
        _avro._native.decode_skimmed(payload, kept[:-1], partitions, program, spec)
    with pytest.raises(TypeError):  # bytes only: read in place, its data must be aligned
        _avro._native.decode_skimmed(payload, memoryview(kept)[1:], partitions, program, spec)
    with pytest.raises(ValueError, match="outside the payload"):
        _avro._native.decode_skimmed(payload[: len(payload) // 2], kept, partitions, program, spec)
    with pytest.raises(ValueError, match="outside the payload or its partitions"):
        _avro._native.decode_skimmed(payload, kept, partitions[:0], program, spec)
    with pytest.raises(ValueError, match="partitions must be bytes"):
        _avro._native.decode_skimmed(payload, kept, ("not bytes",), program, spec)


def test_a_partition_the_listing_cannot_convert_is_left_to_the_listing_loop(partitioned):
    """The listing's partition verdict for the decoder drops nothing when converting the values
    fails: the entry is decoded and the listing loop raises what it raises for it."""
    from storage.formats.iceberg.index import _Checks

    index = partitioned.file_index()
    manifest = index._manifests(partitioned.pyiceberg_table.metadata.current_snapshot())[0]
    decoder = _avro.decoder_for(
        _avro.iter_payloads(open(manifest.path.removeprefix("file://"), "rb").read())[0], LISTING_KEEP
    )
    checks = _Checks(partitioned.bind("region = 'eu'"), index._decoder)
    probes, verdicts, partition_rejects, clauses = checks.drop(
        manifest, decoder, index.spec_context(manifest.spec_id)
    )
    assert verdicts == {} and probes[2] >= 0
    assert partition_rejects({"ts_day": 19783, "region": "us"}) is True
    assert partition_rejects({"ts_day": 19783, "region": "eu"}) is False
    with pytest.raises(OverflowError):  # what the listing loop raises for such a day
        index.spec_context(manifest.spec_id).partitions(decoder.partition_names)(
            {"ts_day": 10**9, "region": "us"}
        )
    assert partition_rejects({"ts_day": 10**9, "region": "us"}) is False


@pytest.mark.parametrize(
    "spec, message",
    [
        ((), "filter is"),
        ((NOTHING, {}, None), "filter is"),
        (((0, -1, -1), {}, None, None), "probes must be"),
        ((NOTHING, [], None, None), "probes must be"),
        ((NOTHING, {}, 5, None), "probes must be"),
        (((10_000, -1, -1, -1, -1), {}, None, None), "a probe is not"),
        (((0, -1, -1, -1, -1), {}, None, None), "a probe is not"),  # the root is a record, not a long
        ((NOTHING, {}, len, None), "without a partition probe"),
        ((NOTHING, {}, None, ((1, 9, 0, 1),)), "unknown clause"),
    ],
)
def test_a_malformed_filter_is_refused(written_manifests, spec, message):  # noqa: F811
    decoder, payload, count = _decoder_and_payload(next(iter(written_manifests.values())), LISTING_KEEP)
    with pytest.raises(ValueError, match=message):
        _avro._native.decode_filtered(payload, count, decoder.program(), spec)


# -- listings -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory, sql_catalog):
    """A table partitioned by day(ts) and region, 24 appends of 3 files, then a copy-on-write
    delete (deleted entries) and an overwrite of one partition."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform, IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

    from storage.formats.iceberg import IcebergAdapter

    catalog = sql_catalog("filtered", tmp_path_factory.mktemp("filtered").as_uri())
    catalog.create_namespace("db")
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "region", StringType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, DayTransform(), "ts_day"),
        PartitionField(3, 1001, IdentityTransform(), "region"),
    )
    table = catalog.create_table("db.t", schema=schema, partition_spec=spec)
    arrow = table.schema().as_arrow()
    for k in range(24):
        rows = [
            {
                "id": k * 30 + i,
                "ts": dt.datetime(2024, 3, 1 + k % 6, i % 24, tzinfo=UTC),
                "region": ["eu", "us", "ap"][i % 3],
            }
            for i in range(30)
        ]
        table.append(pa.Table.from_pylist(rows, schema=arrow))
    table.delete("id < 100")
    return IcebergAdapter.open(catalog.load_table("db.t").metadata_location)


def _model(data_file: Any) -> dict[str, Any]:
    out = {}
    for field in dataclasses.fields(data_file):
        value = getattr(data_file, field.name)
        if field.name in ("lower_bounds", "upper_bounds", "null_counts") and value is not None:
            value = (type(value).__name__, dict(value.items()))
        out[field.name] = (type(value).__name__, value)
    return out


def _listed(table: Any, expr: Any) -> list[Any]:
    return [
        (s.partition, s.base_instant, _model(s.base_file), [_model(d) for d in s.delete_files])
        for s in table.file_index().list_files_at(None, expr)
    ]


def _filters(table: Any) -> list[Any]:
    """Comparisons on the values the table's files hold (their lower bounds), on every column of a
    type the compiled clauses or the partition checks read, alone and combined."""
    columns: dict[str, list[Any]] = {}
    for file_slice in table.file_index().list_files_at():
        bounds = file_slice.base_file.lower_bounds
        for name, value in (dict(bounds.items()) if bounds is not None else {}).items():
            if isinstance(value, (int, str, dt.date, dt.datetime)) and not isinstance(value, bool):
                columns.setdefault(name, []).append(value)
    rng = random.Random(len(columns))
    found: list[Any] = []
    for name, values in sorted(columns.items()):
        for _ in range(3):
            found.append(Comparison(rng.choice(["=", "<", "<=", ">", ">="]), name, rng.choice(values)))
    found += [And(a, b) for a, b in zip(found, found[1:], strict=False)][:6]
    found += [Or(a, b) for a, b in zip(found, found[2:], strict=False)][:3]
    return found


@pytest.fixture(scope="module")
def listed_tables(iceberg_fixture, external_tables, partitioned):
    from storage.formats.iceberg import IcebergAdapter

    names = sorted(p.name for p in (external_tables / "iceberg").iterdir() if p.is_dir())
    return {name: IcebergAdapter.open(str(iceberg_fixture(name))) for name in names} | {"here": partitioned}


def test_listings_with_filtered_decoding_list_what_listings_without_it_list(listed_tables, monkeypatch):
    """Every Iceberg fixture table and a partitioned table with deleted entries, under filters on
    every column: the same slices, field for field, with the decoder dropping entries and without;
    and the decoder did drop entries."""
    from storage.formats.iceberg import index

    dropped: list[int] = []
    compared = 0
    for name, table in listed_tables.items():
        filters = _filters(table)
        assert filters, name
        for expr in filters:
            count_dropped(monkeypatch, dropped)
            with_drops = _listed(table, expr)
            monkeypatch.setattr(index._Checks, "drop", lambda *args: None)
            without = _listed(table, expr)
            monkeypatch.undo()
            assert with_drops == without, (name, expr)
            compared += 1
    assert compared > 40 and sum(dropped) > 100


def test_a_filtered_listing_skims_ahead_and_decodes_only_the_kept_entries(listed_tables, monkeypatch):
    """The read-ahead threads skim each manifest for the filter (``skim_entries``), the listing's
    own thread decodes what they kept (``decode_skimmed``) and never skims again itself."""
    import threading

    from storage.formats.iceberg._readahead import THREAD_PREFIX

    native = _avro._native
    seen: dict[str, set[str]] = {"skim_entries": set(), "decode_skimmed": set(), "decode_filtered": set()}
    for name in seen:
        original = getattr(native, name)

        def traced(*args: Any, original: Any = original, name: str = name) -> Any:
            seen[name].add(threading.current_thread().name)
            return original(*args)

        monkeypatch.setattr(native, name, traced)
    table = listed_tables["here"]
    expr = _filters(table)[0]
    listed = _listed(table, expr)
    assert listed
    assert seen["skim_entries"] and all(name.startswith(THREAD_PREFIX) for name in seen["skim_entries"])
    assert seen["decode_skimmed"] == {threading.current_thread().name}
    assert seen["decode_filtered"] == set()


def test_one_index_lists_filter_after_filter_as_fresh_indexes_do(tmp_path, sql_catalog):
    """An index keeps its manifests' summary verdicts for as long as its filter is the same object,
    and the survivors' partition verdicts per listing: on one index, a filter that rules out
    manifests and then one that needs them list what fresh indexes list, field for field."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import LongType, NestedField, TimestamptzType

    from storage.formats.iceberg import IcebergAdapter

    catalog = sql_catalog("verdicts", tmp_path.as_uri())
    catalog.create_namespace("db")
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ts", TimestamptzType()))
    created = catalog.create_table(
        "db.t", schema=schema, partition_spec=PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"))
    )
    for day in range(4):  # one manifest per day: its summary spans that day alone
        when = dt.datetime(2024, 3, 1 + day, 12, tzinfo=UTC)
        created.append(pa.Table.from_pylist([{"id": day, "ts": when}], schema=created.schema().as_arrow()))
    table = IcebergAdapter.open(catalog.load_table("db.t").metadata_location)
    early = Comparison("<", "ts", dt.datetime(2024, 3, 3, tzinfo=UTC))
    late = Comparison(">=", "ts", dt.datetime(2024, 3, 3, tzinfo=UTC))
    index = table.file_index()
    for expr, days in ((early, 2), (late, 2), (early, 2), (None, 4), (late, 2)):
        got = [
            (s.partition, s.base_instant, _model(s.base_file), [_model(d) for d in s.delete_files])
            for s in index.list_files_at(None, expr)
        ]
        assert got == _listed(table, expr) and len(got) == days, expr
