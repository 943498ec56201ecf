"""The fast paths of Iceberg listing give the answers of the plain ones: manifests fetched ahead
(in order, stopped with the consumer), partition values converted once per raw tuple, models
built by ``slots_builder``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import subprocess
import sys
import threading
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from storage.formats.iceberg import IcebergAdapter
from storage.formats.iceberg._manifests import slots_builder
from storage.formats.iceberg._readahead import THREAD_PREFIX, read_ahead
from storage.formats.iceberg._values import avro_to_python
from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor

UTC = dt.UTC


@pytest.fixture
def read_ahead_threads():
    """The read-ahead threads alive now that were not before the test (another test's listing
    left half-consumed and not yet collected is none of this test's business)."""
    before = set(threading.enumerate())

    def alive() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX) and t not in before]

    return alive


# -- read_ahead --------------------------------------------------------------------------------


def test_read_ahead_runs_fetches_concurrently_and_returns_them_in_order(read_ahead_threads):
    started = {i: threading.Event() for i in range(10)}

    def fetch(i: int) -> str:
        started[i].set()
        if i == 0:
            # the first fetch finishes only once the fourth has started: they overlap
            assert started[3].wait(timeout=30)
        return f"item {i}"

    results = list(read_ahead(range(10), fetch, window=4))

    assert results == [(i, f"item {i}") for i in range(10)]
    assert not read_ahead_threads()


def test_a_consumer_that_stops_early_leaves_no_thread_and_stops_fetching(read_ahead_threads):
    fetched: list[int] = []
    lock = threading.Lock()

    def fetch(i: int) -> int:
        with lock:
            fetched.append(i)
        return i

    stream = read_ahead(range(1000), fetch, window=4)
    assert next(stream) == (0, 0)
    stream.close()

    assert not read_ahead_threads()
    assert len(fetched) <= 5  # the window and the one handed out, not the thousand


def test_read_ahead_keeps_the_weights_in_flight_within_its_budget(read_ahead_threads):
    submitted: list[int] = []

    def weight(i: int) -> int:  # called as each item is submitted, in the consumer's thread
        submitted.append(i)
        return 10 if i < 6 else 100

    stream = read_ahead(range(1000), lambda i: i, window=8, weight=weight, budget=25)
    assert next(stream) == (0, 0)
    # 0, 1 and 2 (30 >= 25) first; handing 0 out freed its 10, so 3 came in
    assert submitted == [0, 1, 2, 3]
    assert [next(stream) for _ in range(5)] == [(i, i) for i in range(1, 6)]
    # items heavier than the whole budget: two in flight, never one alone
    assert submitted == list(range(8))
    stream.close()
    assert not read_ahead_threads()


def test_read_ahead_runs_a_window_wider_than_its_threads_on_those_threads(read_ahead_threads):
    from storage.formats.iceberg._readahead import THREADS

    threads: set[int] = set()
    lock = threading.Lock()
    started, release = threading.Semaphore(0), threading.Event()
    seen_blocked: list[int] = []

    def fetch(i: int) -> int:
        with lock:
            threads.add(threading.get_ident())
        started.release()
        assert release.wait(timeout=30)
        return i

    def release_once_the_threads_are_busy() -> None:
        # every thread blocks in a fetch: THREADS of them, the rest of the window queued
        for _ in range(THREADS):
            assert started.acquire(timeout=30)
        with lock:
            seen_blocked.append(len(threads))
        release.set()

    releaser = threading.Thread(target=release_once_the_threads_are_busy)
    releaser.start()
    assert [i for i, _ in read_ahead(range(200), fetch, window=THREADS * 3)] == list(range(200))
    releaser.join()
    assert seen_blocked == [THREADS]
    assert len(threads) == THREADS  # never more threads than that, however wide the window
    assert not read_ahead_threads()


def test_read_ahead_raises_a_failed_fetch_where_a_sequential_loop_would(read_ahead_threads):
    def fetch(i: int) -> int:
        if i == 2:
            raise OSError("manifest 2 is unreadable")
        return i

    stream = read_ahead(range(6), fetch, window=3)
    assert [next(stream), next(stream)] == [(0, 0), (1, 1)]
    with pytest.raises(OSError, match="manifest 2"):
        next(stream)
    assert not read_ahead_threads()


def test_read_ahead_raises_an_error_of_the_items_themselves_in_order(read_ahead_threads):
    def items():
        yield 0
        yield 1
        raise ValueError("no third manifest")

    stream = read_ahead(items(), lambda i: i * 10, window=4)
    assert [next(stream), next(stream)] == [(0, 0), (1, 10)]
    with pytest.raises(ValueError, match="no third"):
        next(stream)
    assert not read_ahead_threads()


_COLLECTED_INSIDE_THREADING = """
import gc, threading, time
from storage.formats.iceberg._readahead import THREAD_PREFIX, read_ahead

stream = read_ahead(range(100), lambda i: i, window=4)
assert next(stream) == (0, 0)
holder = [stream]
holder.append(holder)  # only the collector frees it now
del stream, holder
gc.disable()

def collect_inside_threading():
    # as when a collection starts inside Thread.start's bootstrap, which holds this lock
    with threading._shutdown_locks_lock:
        gc.collect()

collector = threading.Thread(target=collect_inside_threading, daemon=True)
collector.start()
collector.join(timeout=30)
assert not collector.is_alive(), "the collector's thread is stuck closing the listing"
deadline = time.monotonic() + 30
while any(t.name.startswith(THREAD_PREFIX) for t in threading.enumerate()):
    assert time.monotonic() < deadline, "read-ahead threads did not end"
    time.sleep(0.05)
print("closed")
"""


def test_a_listing_the_garbage_collector_closes_inside_threading_locks_does_not_deadlock():
    """Seen in CI: a dropped listing finalized by a collection that started inside another
    thread's bootstrap joined its workers there and waited for a lock its own thread held."""
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTED_INSIDE_THREADING],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "closed"


# -- on a real table ----------------------------------------------------------------------------


@pytest.fixture
def catalog(tmp_path, sql_catalog):
    catalog = sql_catalog("t", f"file://{tmp_path}")
    catalog.create_namespace("db")
    return catalog


def _many_manifests(catalog):
    """A table whose current snapshot has a dozen data manifests (one per append)."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    table = catalog.create_table("db.many", Schema(NestedField(1, "id", LongType(), required=False)))
    for i in range(12):
        table.append(pa.table({"id": pa.array([i], pa.int64())}))
    return IcebergAdapter.open(catalog.load_table("db.many").metadata_location)


def test_listing_many_manifests_gives_every_file_in_manifest_order(catalog):
    spec_table = _many_manifests(catalog)
    pyiceberg_table = spec_table.pyiceberg_table
    snapshot = pyiceberg_table.metadata.current_snapshot()
    expected = [
        entry.data_file.file_path
        for manifest in snapshot.manifests(pyiceberg_table.io)
        for entry in manifest.fetch_manifest_entry(pyiceberg_table.io)
    ]

    listed = [s.base_file.path for s in spec_table.file_index().list_files_at()]

    assert len(expected) == 12
    assert listed == expected


def test_a_listing_closed_after_its_first_file_leaves_no_read_ahead_thread(catalog, read_ahead_threads):
    spec_table = _many_manifests(catalog)

    listing = spec_table.file_index().list_files_at()
    first = next(listing)
    assert first.base_file is not None
    assert read_ahead_threads()  # fetching ahead while the first manifest is consumed
    listing.close()

    assert not read_ahead_threads()


def _transforms_table(catalog):
    """Partitioned by every transform (one per column: pyiceberg writes no more), nulls included,
    in files that share partitions."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import (
        BucketTransform,
        DayTransform,
        HourTransform,
        IdentityTransform,
        MonthTransform,
        TruncateTransform,
        YearTransform,
    )
    from pyiceberg.types import (
        DateType,
        DecimalType,
        LongType,
        NestedField,
        StringType,
        TimestampType,
        TimestamptzType,
    )

    types = {
        "id": (LongType(), pa.int64(), BucketTransform(4), "id_bucket"),
        "region": (StringType(), pa.string(), IdentityTransform(), "region"),
        "ts": (TimestamptzType(), pa.timestamp("us", "UTC"), DayTransform(), "ts_day"),
        "at": (TimestamptzType(), pa.timestamp("us", "UTC"), HourTransform(), "at_hour"),
        "local": (TimestampType(), pa.timestamp("us"), MonthTransform(), "local_month"),
        "day": (DateType(), pa.date32(), YearTransform(), "day_year"),
        "name": (StringType(), pa.string(), TruncateTransform(1), "name_trunc"),
        "price": (DecimalType(9, 2), pa.decimal128(9, 2), IdentityTransform(), "price"),
        "seen": (TimestampType(), pa.timestamp("us"), IdentityTransform(), "seen"),
        "born": (DateType(), pa.date32(), IdentityTransform(), "born"),
    }
    schema = Schema(*(NestedField(i, n, t[0], required=False) for i, (n, t) in enumerate(types.items(), 1)))
    spec = PartitionSpec(*(PartitionField(i, 999 + i, t[2], t[3]) for i, t in enumerate(types.values(), 1)))
    table = catalog.create_table("db.transforms", schema, partition_spec=spec)
    when = dt.datetime(2024, 1, 1, 5, tzinfo=UTC)
    rows = {
        "id": [1, 2, None],
        "region": ["eu", "us", None],
        "ts": [when, dt.datetime(2024, 2, 3, 6, tzinfo=UTC), None],
        "at": [when, dt.datetime(1969, 12, 31, 23, tzinfo=UTC), None],
        "local": [dt.datetime(2024, 1, 1, 5), dt.datetime(2023, 7, 9), None],
        "day": [dt.date(2024, 1, 1), dt.date(1969, 12, 31), None],
        "name": ["eve", "us", None],
        "price": [Decimal("1.50"), Decimal("-2.25"), None],
        "seen": [dt.datetime(2024, 1, 1, 5), dt.datetime(1960, 1, 1), None],
        "born": [dt.date(2024, 1, 1), dt.date(1969, 12, 31), None],
    }
    data = pa.table({name: pa.array(rows[name], t[1]) for name, t in types.items()})
    for _ in range(3):  # the same partitions in three files (three manifests): cache hits
        table.append(data)
    return catalog.load_table("db.transforms")


def _expected_partitions(table) -> list[dict]:
    """What the uncached conversion gives: each raw partition value of pyiceberg's own manifest
    reading through ``avro_to_python`` of its field's result type (nulls stay null)."""
    spec, schema = table.spec(), table.schema()
    converters = [
        (f.name, avro_to_python(f.transform.result_type(schema.find_type(f.source_id)))) for f in spec.fields
    ]
    found = []
    for manifest in table.metadata.current_snapshot().manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io):
            raw = entry.data_file.partition
            found.append(
                {
                    name: None if raw[i] is None else convert(raw[i])
                    for i, (name, convert) in enumerate(converters)
                }
            )
    return found


def test_cached_partition_values_equal_the_uncached_conversion_for_every_transform(catalog):
    table = _transforms_table(catalog)
    spec_table = IcebergAdapter.open(table.metadata_location)
    expected = _expected_partitions(table)

    index = spec_table.file_index()
    first = [dict(s.base_file.partition) for s in index.list_files_at()]
    again = [dict(s.base_file.partition) for s in index.list_files_at()]  # the cache is warm now

    assert len(first) == 9
    assert first == expected
    assert again == expected
    by_region = {p["region"]: p for p in first}
    assert by_region["eu"] == {
        "id_bucket": by_region["eu"]["id_bucket"],
        "region": "eu",
        "ts_day": dt.date(2024, 1, 1),
        "at_hour": 19723 * 24 + 5,  # hours since the epoch
        "local_month": 648,  # months since the epoch
        "day_year": 54,
        "name_trunc": "e",
        "price": Decimal("1.50"),
        "seen": dt.datetime(2024, 1, 1, 5),
        "born": dt.date(2024, 1, 1),
    }
    assert isinstance(by_region["eu"]["id_bucket"], int)
    assert by_region["us"]["at_hour"] == -1 and by_region["us"]["day_year"] == -1
    assert by_region["us"]["born"] == dt.date(1969, 12, 31) and by_region["us"]["price"] == Decimal("-2.25")
    assert by_region[None] == dict.fromkeys(by_region[None])
    eu = {s.partition.path for s in index.list_files_at() if s.base_file.partition["region"] == "eu"}
    assert eu == {
        f"id_bucket={by_region['eu']['id_bucket']}/region=eu/ts_day=2024-01-01/at_hour=2024-01-01-05"
        "/local_month=2024-01/day_year=2024/name_trunc=e/price=1.50/seen=2024-01-01T05%3A00%3A00"
        "/born=2024-01-01"
    }


def test_float_partition_values_keep_their_sign(catalog):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import DoubleType, NestedField

    schema = Schema(NestedField(1, "x", DoubleType(), required=False))
    spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "x"))
    table = catalog.create_table("db.floats", schema, partition_spec=spec)
    table.append(pa.table({"x": pa.array([-0.0], pa.float64())}))
    table.append(pa.table({"x": pa.array([0.0], pa.float64())}))
    spec_table = IcebergAdapter.open(catalog.load_table("db.floats").metadata_location)

    signs = sorted(
        math.copysign(1, s.base_file.partition["x"]) for s in spec_table.file_index().list_files_at()
    )

    assert signs == [-1.0, 1.0]


# -- slots_builder --------------------------------------------------------------------------------


def test_slots_builder_builds_what_the_dataclass_constructor_builds():
    fields = {
        "path": "s3://lake/t/data/a.parquet",
        "size_bytes": 10,
        "record_count": 2,
        "content": FileContent.POSITION_DELETES,
        "file_format": "parquet",
        "partition": {"day": dt.date(2024, 1, 1)},
        "lower_bounds": {"id": 1},
        "upper_bounds": {"id": 9},
        "null_counts": {"id": 0},
        "split_offsets": (4,),
        "equality_columns": ("id",),
        "extra": {"spec_id": 0},
    }
    built = slots_builder(DataFile)(*fields.values())
    assert type(built) is DataFile
    assert built == DataFile(**fields)
    assert [getattr(built, f.name) for f in dataclasses.fields(DataFile)] == list(fields.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.path = "elsewhere"  # type: ignore[misc]

    descriptor = PartitionDescriptor("day=2024-01-01", {"day": dt.date(2024, 1, 1)})
    assert slots_builder(FileSlice)(descriptor, built, (), None, 7) == FileSlice(
        descriptor, built, base_instant=7
    )


def test_slots_builder_refuses_a_class_whose_init_does_more():
    @dataclasses.dataclass(frozen=True, slots=True)
    class Checked:
        value: int

        def __post_init__(self) -> None:
            if self.value < 0:
                raise ValueError("negative")

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        value: int

    for cls in (Checked, NoSlots):
        with pytest.raises(TypeError):
            slots_builder(cls)


def test_a_manifest_corrupt_in_its_framing_fails_the_listing_at_that_manifest(catalog):
    """Manifests are joined (framed and inflated) on the read-ahead threads: a corrupt one is
    reported when the listing reaches it, naming it, after the files of the manifests before."""
    from storage.spec.errors import CorruptTable

    spec_table = _many_manifests(catalog)
    manifests = [
        m.path
        for m in spec_table.file_index()._manifests(spec_table.pyiceberg_table.metadata.current_snapshot())
    ]
    victim = Path(manifests[5].removeprefix("file://"))
    data = bytearray(victim.read_bytes())
    # inside the last block's sync marker (a container ends with it: its last 16 bytes); -20 hit the
    # deflated data before it, whose last bytes may inflate to other bytes without an error
    data[-8] ^= 0xFF
    victim.write_bytes(bytes(data))

    listed = []
    with pytest.raises(CorruptTable, match=rf"manifest {manifests[5]} is not a valid Iceberg manifest"):
        for file_slice in spec_table.file_index().list_files_at():
            listed.append(file_slice.base_file.path)
    assert len(listed) == 5


# -- statistics maps kept raw ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["spark_v2_position_deletes", "spark_v2_lineitem_partitioned", "trino_timetravel"]
)
def test_statistics_kept_raw_read_as_the_decoded_maps(iceberg_fixture, name):
    """Listing keeps the statistics maps encoded (``KEEP``) until read: every listed file's
    bounds and null counts equal those of the same manifests decoded in full."""
    from storage.formats.iceberg import _avro
    from storage.formats.iceberg._entries import KEEP, KEEP_DECODED
    from storage.formats.iceberg._values import LazyStats

    table = IcebergAdapter.open(str(iceberg_fixture(name)))
    index = table.file_index()
    snapshot = table.pyiceberg_table.metadata.current_snapshot()
    decoder = index._decoder
    expected = {}
    raw_kinds = set()
    for manifest in index._manifests(snapshot):
        data = (Path(manifest.path.removeprefix("file://"))).read_bytes()
        decoded = _avro.decode_records(data, KEEP_DECODED)[1]
        kept = _avro.decode_records(data, KEEP)[1]
        for full, raw in zip(decoded, kept, strict=True):
            raw_kinds.add(type(raw["data_file"]["lower_bounds"]))
            file = full["data_file"]
            expected[file["file_path"]] = tuple(
                None if file[key] is None else dict(LazyStats(file[key], decoder, bounds))
                for key, bounds in (
                    ("lower_bounds", True),
                    ("upper_bounds", True),
                    ("null_value_counts", False),
                )
            )
    assert bytes in raw_kinds  # the listing's keep did keep them raw
    listed = 0
    for file_slice in index.list_files_at():
        got = file_slice.base_file
        stats = (got.lower_bounds, got.upper_bounds, got.null_counts)
        assert tuple(None if s is None else dict(s) for s in stats) == expected[got.path]
        listed += 1
    assert listed > 0


def test_a_schema_whose_statistics_cannot_be_kept_raw_is_decoded_in_full():
    from storage.formats.iceberg._entries import KEEP, KEEP_DECODED, _keep_for

    def schema(bounds_type):
        data_file = {
            "type": "record",
            "name": "r2",
            "fields": [
                {"name": "file_path", "type": "string"},
                {"name": "lower_bounds", "type": bounds_type},
            ],
        }
        return json.dumps(
            {
                "type": "record",
                "name": "manifest_entry",
                "fields": [{"name": "status", "type": "int"}, {"name": "data_file", "type": data_file}],
            }
        )

    pairs = {
        "type": "array",
        "items": {
            "type": "record",
            "name": "k126_v127",
            "fields": [{"name": "key", "type": "int"}, {"name": "value", "type": "bytes"}],
        },
    }
    assert _keep_for(schema(pairs)) is KEEP
    assert _keep_for(schema(["null", pairs])) is KEEP
    assert _keep_for(schema({"type": "map", "values": "bytes"})) is KEEP_DECODED


def test_malformed_raw_statistics_are_reported_as_a_corrupt_table():
    from storage.formats.iceberg._values import stats_map
    from storage.spec.errors import CorruptTable

    assert stats_map(b"\x00") == {}
    assert stats_map({1: b"x"}) == {1: b"x"}
    with pytest.raises(CorruptTable, match="column statistics are malformed"):
        stats_map(b"\x02\x02")  # one pair announced, its key and value missing
