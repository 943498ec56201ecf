"""The Iceberg rewrite's ``output-spec-id``: a table whose partitioning evolved is compacted into
one spec, every file's partition tuple computed from its rows."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from processes.maintenance.iceberg.rewrite import spec_view
from processes.models import ProcessStatus
from storage.formats.iceberg.commit import decode_partition, encode_partition
from tests.processes.conftest import append_files, iceberg_files, iceberg_rows, multiset, rows

pytestmark = pytest.mark.django_db(transaction=True)

EPOCH = dt.date(1970, 1, 1)


@pytest.fixture
def evolved(make_iceberg):
    """An unpartitioned table of 12 files (ids 0..59, two days of ``ts``), then partitioned by
    region and day(ts) with 6 more files of one region and day each (ids 3000..3029)."""
    from pyiceberg.transforms import DayTransform

    console_table, table = make_iceberg(files=0)
    append_files(table, [rows(i * 5, 5) for i in range(6)] + [rows(1430 + i * 5, 5) for i in range(6)])
    with table.update_spec() as update:
        update.add_identity("region")
        update.add_field("ts", DayTransform(), "ts_day")
    table.refresh()
    append_files(table, [rows(3000 + i * 5, 5, ("eu", "us")[i % 2]) for i in range(6)])
    return console_table, table


def live_data_files(table):
    table.refresh()
    return [task.file for task in table.scan().plan_files()]


def test_files_of_an_older_spec_are_rewritten_into_the_current_one(evolved, run_now):
    console_table, table = evolved
    before = multiset(iceberg_rows(table))
    assert {f.spec_id for f in live_data_files(table)} == {0, 1}

    process = run_now(console_table, "rewrite", {"min-input-files": 2})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    assert process.summary["output_spec_id"] == 1
    assert process.summary["files_in"] == 18
    files = live_data_files(table)
    assert {f.spec_id for f in files} == {1}
    seen = set()
    for data_file in files:
        region, day = data_file.partition[0], data_file.partition[1]
        content = pq.read_table(data_file.file_path.removeprefix("file://"))
        assert set(content["region"].to_pylist()) == {region}
        assert {(ts.date() - EPOCH).days for ts in content["ts"].to_pylist()} == {day}
        assert data_file.record_count == content.num_rows
        seen.add((region, day))
    # ids 0..29 and 1430..1459 span 2024-01-01 and 2024-01-02, both regions; 3000.. is 2024-01-03
    days = {(dt.date(2024, 1, d) - EPOCH).days for d in (1, 2, 3)}
    assert seen == {(r, d) for r in ("eu", "us") for d in days}
    assert len(files) == len(seen)
    assert multiset(iceberg_rows(table)) == before
    assert multiset(spec_view(table).read_arrow()) == before


def test_pruning_by_the_new_partition_column_works_on_the_result(evolved, run_now):
    from pyiceberg.expressions import EqualTo

    console_table, table = evolved
    expected = iceberg_rows(table).filter(pc.field("region") == "eu")
    assert run_now(console_table, "rewrite", {"min-input-files": 2}).status == ProcessStatus.SUCCESS

    table.refresh()
    scan = table.scan(row_filter=EqualTo("region", "eu"))
    planned = [task.file for task in scan.plan_files()]
    assert planned and {f.partition[0] for f in planned} == {"eu"}
    assert len(planned) < len(iceberg_files(table))
    assert multiset(scan.to_arrow()) == multiset(expected)
    pruned = list(spec_view(table).file_index().list_files_at(filters="region = 'eu'"))
    assert {s.base_file.path for s in pruned} == {f.file_path for f in planned}


def test_an_older_spec_can_be_the_output_spec(evolved, run_now):
    console_table, table = evolved
    before = multiset(iceberg_rows(table))

    process = run_now(console_table, "rewrite", {"min-input-files": 2, "output-spec-id": 0})

    assert process.status == ProcessStatus.SUCCESS, process.failure
    files = live_data_files(table)
    assert {f.spec_id for f in files} == {0} and all(len(f.partition) == 0 for f in files)
    assert multiset(iceberg_rows(table)) == before


def test_an_unknown_output_spec_is_refused_at_submission(evolved):
    from processes import services
    from processes.models import Process
    from storage.errors import InvalidInput

    console_table, table = evolved
    snapshot, files = table.current_snapshot().snapshot_id, iceberg_files(table)

    with pytest.raises(InvalidInput) as refused:
        services.process_create(table=console_table, action="rewrite", params={"output-spec-id": 7})

    assert "output-spec-id 7 is not a partition spec of this table (its specs: 0, 1)" in refused.value.message
    assert not Process.objects.exists()
    table.refresh()
    assert table.current_snapshot().snapshot_id == snapshot and iceberg_files(table) == files


def test_a_negative_or_non_integer_output_spec_is_refused_by_the_api(evolved):
    from processes import services
    from storage.errors import InvalidInput

    console_table, _ = evolved
    for bad in (-1, "1", 1.5):
        with pytest.raises(InvalidInput, match="output-spec-id"):
            services.process_create(table=console_table, action="rewrite", params={"output-spec-id": bad})


def test_partition_keys_travel_exactly():
    from pyiceberg.typedef import Record

    values = Record("eu", 19723, None, b"\x00\xff", Decimal("12.30"), 1.5, True, -(2**62))
    decoded = decode_partition(encode_partition(values))
    assert decoded == values
    assert isinstance(decoded[4], Decimal) and str(decoded[4]) == "12.30"
    with pytest.raises(TypeError, match="partition value of type date"):
        encode_partition(Record(dt.date(2024, 1, 1)))
