"""The ``sort`` and ``zorder`` strategies of the Iceberg and Delta rewrites: every row kept once,
files ordered (sort: disjoint ranges, sorted inside), file skipping improved (zorder), bad
orderings refused before anything is done, and the z-order key on hand-computed values."""

from __future__ import annotations

import datetime as dt
import random
import re
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from processes.maintenance.group_writer import column_key, order_table, zorder_key
from processes.maintenance.iceberg.rewrite import spec_view
from processes.maintenance.planning import Ordering, SortField
from processes.models import ProcessStatus
from tests.processes.conftest import append_files, delta_read, iceberg_rows, multiset

# --- the z-order key on its own ------------------------------------------------------------------


def test_column_keys_preserve_order_per_type():
    cases = [
        pa.array([-(2**63), -5, -1, 0, 1, 7, 2**63 - 1], pa.int64()),
        pa.array([-128, -1, 0, 5, 127], pa.int8()),
        pa.array([-1e300, -2.5, -1e-300, 0.0, 1e-300, 1.5, 1e300], pa.float64()),
        pa.array([dt.date(1900, 1, 1), dt.date(1970, 1, 1), dt.date(2024, 5, 1)], pa.date32()),
        pa.array([dt.datetime(1969, 12, 31), dt.datetime(2024, 1, 1)], pa.timestamp("us", tz="UTC")),
        pa.array(["", "a", "ab", "abcdefgh", "b", "é"]),
        pa.array([Decimal("-10.50"), Decimal("-0.01"), Decimal("3.00")], pa.decimal128(10, 2)),
    ]
    for values in cases:
        keys = column_key(values)
        assert list(keys) == sorted(keys) and len(set(keys)) == len(keys), values.type


def test_column_keys_on_hand_computed_values():
    assert [int(k) for k in column_key(pa.array([-1, 0, 1, None], pa.int64()))] == [
        0x7FFFFFFFFFFFFFFF,
        0x8000000000000000,
        0x8000000000000001,
        0,  # nulls first, as Iceberg's zero bytes
    ]
    # 1.5 = 0x3FF8000000000000: the sign bit set; -2.5 = 0xC004000000000000: every bit flipped
    assert [int(k) for k in column_key(pa.array([1.5, -2.5]))] == [0xBFF8000000000000, 0x3FFBFFFFFFFFFFFF]
    assert [int(k) for k in column_key(pa.array(["ab", "abcdefghij"]))] == [
        0x6162000000000000,
        0x6162636465666768,  # first 8 bytes only
    ]


def test_zorder_interleaves_bits_most_significant_first():
    # x = 3 -> 0x80..03, y = 0 -> 0x80..00: bit b of column c lands at 2b + c
    words = zorder_key([pa.array([3], pa.int8()), pa.array([0], pa.int8())])
    assert [int(w) for w in words[0]] == [0xC000000000000000, 0b1010]
    # three columns, all sign bits then the low bits: positions 189, 190 (x's bits 1, 0 -> 63*3, 62*3)
    words = zorder_key([pa.array([2], pa.int64()), pa.array([-1], pa.int64()), pa.array([0], pa.int64())])
    y_key = 0x7FFFFFFFFFFFFFFF
    expected = 0
    for bit in range(64):
        for key in (0x8000000000000002, y_key, 0x8000000000000000):
            expected = (expected << 1) | ((key >> (63 - bit)) & 1)
    assert int(words[0][0]) << 128 | int(words[0][1]) << 64 | int(words[0][2]) == expected


def test_zorder_clusters_a_grid_into_quadrants():
    xs, ys = np.meshgrid(np.arange(8), np.arange(8))
    table = pa.table({"x": xs.ravel(), "y": ys.ravel()})
    ordered = order_table(table, Ordering("zorder", columns=("x", "y")))
    first = ordered.slice(0, 16).to_pydict()
    assert set(first["x"]) == set(range(4)) and set(first["y"]) == set(range(4))
    assert ordered.num_rows == 64 and multiset_of(ordered) == multiset_of(table)


def test_sort_honours_direction_and_null_placement_per_field():
    table = pa.table({"a": [1, None, 2, 1, None], "b": ["x", "y", None, None, "z"]})
    ordering = Ordering("sort", (SortField("a", True, False), SortField("b", False, True)))
    assert order_table(table, ordering).to_pydict() == {
        "a": [2, 1, 1, None, None],
        "b": [None, None, "x", "y", "z"],
    }


def multiset_of(table):
    return sorted(map(tuple, (r.values() for r in table.to_pylist())))


# --- tables -------------------------------------------------------------------------------------

XY = pa.schema([pa.field("id", pa.int64()), pa.field("x", pa.int64()), pa.field("y", pa.int64())])


def xy_files(files: int = 12, rows: int = 60, seed: int = 7) -> list[pa.Table]:
    """Randomly ordered (x, y) in 0..127 (a power-of-two domain: z-order cells align with values): every file spans nearly the whole range of both."""
    rng = random.Random(seed)
    out = []
    for f in range(files):
        ids = range(f * rows, (f + 1) * rows)
        out.append(
            pa.table(
                {
                    "id": list(ids),
                    "x": [rng.randrange(128) for _ in ids],
                    "y": [rng.randrange(128) for _ in ids],
                },
                schema=XY,
            )
        )
    return out


@pytest.fixture
def iceberg_xy(iceberg_catalog):
    import uuid

    from storage import services

    row, catalog = iceberg_catalog
    namespace = f"ns_{uuid.uuid4().hex[:8]}"
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.xy", schema=XY)
    append_files(table, xy_files())
    return services.table_register(catalog=row, identifier=f"{namespace}.xy"), table


@pytest.fixture
def delta_xy(warehouse, db):
    from storage import services

    path = warehouse / "delta_xy"
    for part in xy_files():
        write_deltalake(str(path), part, mode="append")
    return services.table_register(location=str(path)), path


# Each output file of ~1 KiB target: 720 rows are cut into several files.
SMALL = {"target-file-size": 65536}


def iceberg_file_stats(table):
    table.refresh()
    spec = spec_view(table)
    return [s.base_file for s in spec.file_index().list_files_at()], spec


def delta_spec(path):
    from storage.spec import load_table

    return load_table(str(path), format="delta")


def overlapping(spec, predicate: str) -> int:
    return len(list(spec.file_index().list_files_at(filters=predicate)))


def check_sorted_files(paths, column):
    ranges = []
    for path in paths:
        values = pq.read_table(path.removeprefix("file://"), columns=[column])[column].to_pylist()
        assert values == sorted(values)
        ranges.append((values[0], values[-1]))
    ranges.sort()
    for (_, high), (low, _) in zip(ranges, ranges[1:], strict=False):
        assert high <= low  # disjoint (ties only at the boundary)


pytestmark = pytest.mark.django_db(transaction=True)


def force_files(monkeypatch, rows_per_file: int = 180):
    """Cut output files at ``rows_per_file`` rows (small tables, several files per group)."""
    from processes.maintenance import group_writer

    original = group_writer.GroupWriter._outputs
    monkeypatch.setattr(
        group_writer.GroupWriter,
        "_outputs",
        lambda self, group: max(original(self, group), -(-group.record_count // rows_per_file)),
    )


def test_iceberg_sort_orders_the_files_and_keeps_every_row(iceberg_xy, run_now, monkeypatch):
    console_table, table = iceberg_xy
    force_files(monkeypatch)
    before = multiset(iceberg_rows(table))
    params = {**SMALL, "strategy": "sort", "sort-order": [{"column": "x", "direction": "asc"}]}

    process = run_now(console_table, "rewrite", params)

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 12 and process.summary["files_out"] == 4
    assert process.summary["strategy"] == "sort:x asc nulls-first"
    assert multiset(iceberg_rows(table)) == before
    files, spec = iceberg_file_stats(table)
    check_sorted_files([f.path for f in files], "x")
    assert table.current_snapshot().summary.operation.value == "replace"
    # the same ordering again: nothing to do (the files are the last sort's)
    again = run_now(console_table, "rewrite", params)
    assert again.status == ProcessStatus.SUCCESS and again.summary["files_in"] == 0


def test_iceberg_zorder_prunes_ranges_on_each_column(iceberg_xy, run_now, monkeypatch):
    console_table, table = iceberg_xy
    force_files(monkeypatch, 45)
    before = multiset(iceberg_rows(table))
    _, spec = iceberg_file_stats(table)
    predicates = ("x >= 10 and x < 20", "y >= 10 and y < 20")
    assert [overlapping(spec, p) for p in predicates] == [12, 12]  # random: nothing pruned

    process = run_now(console_table, "rewrite", {**SMALL, "strategy": "zorder", "zorder-columns": ["x", "y"]})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert multiset(iceberg_rows(table)) == before
    files, spec = iceberg_file_stats(table)
    assert len(files) == 16
    for predicate in predicates:
        assert overlapping(spec, predicate) <= 8, predicate  # at least half pruned


def test_delta_sort_and_zorder_keep_rows_and_order_files(delta_xy, run_now, monkeypatch):
    console_table, path = delta_xy
    force_files(monkeypatch, 45)
    before = multiset(delta_read(path))
    process = run_now(console_table, "rewrite", {**SMALL, "strategy": "zorder", "zorder-columns": ["x", "y"]})
    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert multiset(delta_read(path)) == before
    spec = delta_spec(path)
    assert len(list(spec.file_index().list_files_at())) == 16
    assert overlapping(spec, "x >= 10 and x < 20") <= 8 and overlapping(spec, "y >= 10 and y < 20") <= 8
    again = run_now(console_table, "rewrite", {**SMALL, "strategy": "zorder", "zorder-columns": ["x", "y"]})
    assert again.status == ProcessStatus.SUCCESS and again.summary["files_in"] == 0

    process = run_now(console_table, "rewrite", {**SMALL, "strategy": "sort", "sort-order": ["y"]})
    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["files_in"] == 16  # another ordering: the partition again
    assert multiset(delta_read(path)) == before
    check_sorted_files([s.base_file.path for s in delta_spec(path).file_index().list_files_at()], "y")


@pytest.mark.parametrize(
    ("params", "reason"),
    [
        ({"strategy": "zorder", "zorder-columns": ["nope"]}, "zorder-columns: unknown column(s) nope"),
        ({"strategy": "sort", "sort-order": ["x", "nope"]}, "sort-order: unknown column(s) nope"),
        ({"strategy": "sort"}, "strategy sort needs a sort-order: the table has no sort order"),
    ],
)
def test_bad_orderings_are_refused_at_submission(iceberg_xy, params, reason):
    from processes import services
    from processes.models import Process
    from storage.errors import InvalidInput

    console_table, table = iceberg_xy
    snapshot = table.current_snapshot().snapshot_id
    with pytest.raises(InvalidInput) as refused:
        services.process_create(table=console_table, action="rewrite", params=params)
    assert reason in refused.value.message and not Process.objects.exists()
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot


def test_delta_zorder_on_a_partition_column_is_refused(warehouse, db):
    from processes import services as process_services
    from storage import services
    from storage.errors import InvalidInput

    path = warehouse / "delta_part"
    for part in xy_files(3):
        write_deltalake(
            str(path),
            part.append_column("region", pa.array(["eu"] * part.num_rows)),
            mode="append",
            partition_by=["region"],
        )
    console_table = services.table_register(location=str(path))
    version = delta_spec(path).version
    params = {"strategy": "zorder", "zorder-columns": ["x", "region"]}
    with pytest.raises(InvalidInput, match="zorder-columns region: a partition column"):
        process_services.process_create(table=console_table, action="rewrite", params=params)
    assert delta_spec(path).version == version


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"strategy": "zorder", "zorder-columns": ["x"], "sort-order": ["x"]}, "sort-order"),
        ({"zorder-columns": ["x"]}, "zorder-columns"),
        ({"strategy": "zorder"}, "zorder-columns"),
        ({"strategy": "sort", "sort-order": [{"column": "x", "direction": "up"}]}, "sort-order"),
        ({"strategy": "cluster"}, "strategy"),
    ],
)
def test_mixed_or_malformed_strategy_params_are_refused_by_the_api(iceberg_xy, params, field):
    from processes import services
    from storage.errors import InvalidInput

    console_table, _ = iceberg_xy
    with pytest.raises(InvalidInput, match=field):
        services.process_create(table=console_table, action="rewrite", params=params)


def test_unorderable_columns_are_refused():
    from processes.maintenance.planning import CompactionSettings, resolve_ordering

    schema = pa.schema(
        [("x", pa.int64()), ("tags", pa.list_(pa.string())), ("s", pa.struct([("a", pa.int8())]))]
    )
    for column in ("tags", "s"):
        settings = CompactionSettings.from_config({"strategy": "zorder", "zorder-columns": ["x", column]})
        with pytest.raises(ValueError, match=f"zorder-columns: column {column} of type .* cannot be ordered"):
            resolve_ordering(settings, schema)
    settings = CompactionSettings.from_config({"strategy": "sort", "sort-order": ["x", "x"]})
    with pytest.raises(ValueError, match="named twice"):
        resolve_ordering(settings, schema)


def test_iceberg_sort_defaults_to_the_table_sort_order_and_zorder_refuses_partition_columns(
    make_iceberg, run_now
):
    from pyiceberg.table.sorting import NullOrder
    from pyiceberg.transforms import BucketTransform, IdentityTransform

    from processes import services
    from processes.maintenance.planning import CompactionSettings, iceberg_strategy
    from storage.errors import InvalidInput

    console_table, table = make_iceberg(files=6, rows_per_file=20, partitioned=True)
    zorder = CompactionSettings.from_config({"strategy": "zorder", "zorder-columns": ["id", "region"]})
    with pytest.raises(ValueError, match="zorder-columns region: a partition column"):
        iceberg_strategy(table.metadata, None, zorder, spec_view(table).schema)
    with table.update_sort_order() as update:
        update.desc("id", IdentityTransform(), NullOrder.NULLS_LAST)
    table.refresh()
    before = multiset(iceberg_rows(table))

    process = run_now(console_table, "rewrite", {"strategy": "sort"})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["strategy"] == "sort:id desc nulls-last"
    assert process.summary["files_in"] == 6 and process.summary["partitions"] == 2
    assert multiset(iceberg_rows(table)) == before
    for data_file in iceberg_file_stats(table)[0]:
        ids = pq.read_table(data_file.path.removeprefix("file://"), columns=["id"])["id"].to_pylist()
        assert ids == sorted(ids, reverse=True)
    assert table.current_snapshot().summary.additional_properties["lakewarden.rewrite-strategy"] == (
        "sort:id desc nulls-last"
    )
    with table.update_sort_order() as update:
        update.asc("id", BucketTransform(4), NullOrder.NULLS_FIRST)
    table.refresh()
    snapshot = table.current_snapshot().snapshot_id
    with pytest.raises(InvalidInput, match=re.escape("bucket[4](id)")):
        services.process_create(table=console_table, action="rewrite", params={"strategy": "sort"})
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot
