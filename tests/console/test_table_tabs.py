"""The table page's tabs as a person reads them: snapshots paged with readable summaries, splits
with the planner's weight explained, properties as a table, the files histogram of the whole
snapshot, and the chart axes."""

from __future__ import annotations

import datetime as dt
import re
import uuid

import pytest

from console.chart_axes import size_bars, size_range_label, small_bars, time_ticks, value_ticks
from console.charts import histogram_svg, timeline_svg
from console.table_tabs import snapshot_page, snapshot_row
from storage import services
from storage.errors import InvalidInput
from storage.spec.models import Instant
from tests.console.tables import write_delta_table, write_iceberg_table

AT = dt.datetime(2026, 11, 28, 9, 13, tzinfo=dt.UTC)


@pytest.fixture
def seven_commits(warehouse, db):
    path = write_delta_table(warehouse / "orders", commits=7, rows_per_commit=10, partition_by=["region"])
    return services.table_register(location=str(path))


def _instant_ids(html: str) -> list[str]:
    return re.findall(r'<td data-label="Instant"><code>([^<]+)</code>', html)


def test_page_two_of_the_snapshots_shows_exactly_the_fourth_to_sixth_newest(client_as, viewer, seven_commits):
    client = client_as(viewer)

    second = client.get(
        f"/tables/{seven_commits.pk}/snapshots/", {"page": 2, "page_size": 3}
    ).content.decode()
    last = client.get(f"/tables/{seven_commits.pk}/snapshots/", {"page": 3, "page_size": 3}).content.decode()

    assert _instant_ids(second) == ["3", "2", "1"]
    assert "4–6 of 7, newest first" in second and "page 2 of 3" in second
    assert "page=1" in second and "page=3" in second  # newer and older pages are linked
    assert _instant_ids(last) == ["0"]


def test_the_first_page_holds_fifty_snapshots_by_default():
    instants = [Instant(id=i, timestamp=AT, operation="append") for i in reversed(range(153))]

    first, last = snapshot_page(instants, number=1), snapshot_page(instants, number=4)

    assert [row.instant.id for row in first.rows] == list(reversed(range(103, 153)))
    assert (first.first, first.last, first.pages, first.has_next) == (1, 50, 4, True)
    assert [row.instant.id for row in last.rows] == [2, 1, 0] and not last.has_next


def test_a_page_past_the_last_answers_400_and_names_the_pages(client_as, viewer, seven_commits):
    response = client_as(viewer).get(f"/tables/{seven_commits.pk}/snapshots/", {"page": 4, "page_size": 3})

    assert response.status_code == 400
    assert "page 4 does not exist: 7 snapshots make 3 pages of 3" in response.content.decode()


def test_the_summary_cell_reads_files_and_rows_for_a_delta_rs_append(client_as, viewer, seven_commits):
    html = client_as(viewer).get(f"/tables/{seven_commits.pk}/snapshots/").content.decode()

    cells = re.findall(r'<td data-label="Changes" class="summary" title="([^"]*)">([^<]*)</td>', html)
    assert [text for _title, text in cells] == ["+2 files, +10 rows"] * 7
    assert "num added rows: 10" in cells[0][0]  # every value the commit wrote, its key in words, on hover


@pytest.mark.parametrize(
    ("summary", "changes", "size", "exact"),
    [
        (  # Iceberg append
            {
                "added-data-files": "3",
                "added-records": "120",
                "added-files-size": "4608",
                "total-records": "120",
            },
            "+3 files, +120 rows",
            "+4.5 KiB",
            "+4,608 bytes",
        ),
        (  # Iceberg delete of one file
            {"deleted-data-files": "1", "deleted-records": "10", "removed-files-size": "1024"},
            "−1 file, −10 rows",
            "−1.0 KiB",
            "−1,024 bytes",
        ),
        (  # Delta (Spark) update: rewritten files
            {
                "numAddedFiles": "3",
                "numRemovedFiles": "3",
                "numAddedBytes": "2705",
                "numRemovedBytes": "8187",
            },
            "+3 −3 files",
            "+2.6 KiB −8.0 KiB",
            "+2,705 bytes −8,187 bytes",
        ),
        ({"engineInfo": "x"}, "", "", ""),  # nothing said of files or rows
    ],
)
def test_a_snapshot_summary_reads_as_added_and_removed_files_rows_and_bytes(summary, changes, size, exact):
    row = snapshot_row(Instant(id=1, timestamp=AT, operation="append", summary=summary))

    assert (row.changes, row.size, row.size_exact) == (changes, size, exact)


def test_a_snapshot_summarys_keys_read_as_words_on_hover():
    summary = {"added-data-files": "3", "numAddedBytes": "2705", "total_records": "10", "engineInfo": "x"}

    row = snapshot_row(Instant(id=1, timestamp=AT, operation="append", summary=summary))

    assert row.details == "added data files: 3\nnum added bytes: 2705\ntotal records: 10\nengine info: x"


def test_splits_of_small_files_explain_why_they_weigh_more_than_they_read(client_as, viewer, seven_commits):
    html = client_as(viewer).get(f"/tables/{seven_commits.pk}/splits/").content.decode()

    # 14 files of about 860 bytes: each weighs the 4 MiB open cost, one split of 14 x 4 MiB.
    assert "1 split over 14 parts" in html
    assert 'weights <span title="58,720,256 bytes">56.0 MiB</span> to' in html
    assert "at least the open-file cost (4.0 MiB) for every file it opens" in html
    assert "splits of at most the target size (128.0 MiB)" in html
    assert "but weigh 56.0 MiB" in html and "one split holds at most 32 of them" in html


def test_properties_are_a_table_of_keys_and_values(client_as, viewer, warehouse, db):
    catalog = services.catalog_create(
        name="lake", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    identifier = f"ns_{uuid.uuid4().hex[:6]}.t"
    iceberg = write_iceberg_table(services.iceberg_catalog(catalog), identifier, commits=1)
    with iceberg.transaction() as change:
        change.set_properties({"owner": "data-team", "write.target-file-size-bytes": "134217728"})
    table = services.table_register(catalog=catalog, identifier=identifier)

    html = client_as(viewer).get(f"/tables/{table.pk}/").content.decode()

    rows = re.findall(
        r'<tr><th scope="row"><code>([^<]+)</code></th><td class="value"><code>([^<]*)</code>', html
    )
    assert ("owner", "data-team") in rows
    assert ("write.target-file-size-bytes", "134217728") in rows


def test_the_files_histogram_counts_the_whole_snapshot_not_the_page(client_as, api_as, viewer, seven_commits):
    html = client_as(viewer).get(f"/tables/{seven_commits.pk}/files/", {"page_size": 3}).content.decode()
    listed = api_as(viewer).get(f"/api/v1/tables/{seven_commits.pk}/files/", {"page_size": 100}).json()
    sizes = [f["size_bytes"] for f in listed["files"]]

    total = sum(sizes)
    assert len(sizes) == 14
    assert f'<strong>14 files</strong>, <span title="{total:,} bytes">' in html
    assert "70 rows in them" in html and "Files 1–3 on page 1." in html
    assert "File sizes at snapshot 6: 14 files" in html
    bars = re.findall(r"<title>([^<]*): (\d+) files? \(", html)
    assert sum(int(count) for _label, count in bars) == 14
    assert {label for label, count in bars if int(count)} == {
        size_range_label(size.bit_length() - 1, size.bit_length()) for size in sizes
    }


def test_a_timeline_places_instants_at_their_times_with_round_ticks_and_hover_values():
    series = [
        {"id": "1", "at": "2026-11-28T10:00:00+00:00", "operation": "append", "records": 100},
        {"id": "2", "at": "2026-11-28T11:00:00+00:00", "operation": "append", "records": 250},
        {"id": "3", "at": "2026-11-28T14:00:00+00:00", "operation": "delete", "records": 200},
    ]

    svg = str(timeline_svg(series, "records", "Records"))

    xs = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]
    assert xs[1] - xs[0] == pytest.approx((xs[2] - xs[0]) / 4, abs=0.2)  # 1 h of 4 h
    assert re.findall(r'text-anchor="middle">([^<]+)</text>', svg) == [
        "Nov 28 10:00",
        "11:00",
        "12:00",
        "13:00",
        "14:00",
    ]
    assert "<title>250 · append · snapshot 2 · 2026-11-28T11:00:00</title>" in svg
    assert ">300</text>" in svg  # the value axis ends at a round tick above the highest


def test_time_ticks_pick_a_step_that_suits_the_span():
    def labels(**span):
        return [label for _at, label in time_ticks(AT, AT + dt.timedelta(**span))]

    assert labels(seconds=20) == ["Nov 28 09:13:00", "09:13:05", "09:13:10", "09:13:15", "09:13:20"]
    assert labels(hours=30) == ["Nov 28 12:00", "18:00", "Nov 29 00:00", "06:00", "12:00"]
    assert labels(days=10) == ["Nov 29", "Dec 1", "Dec 3", "Dec 5", "Dec 7"]
    assert labels(days=400) == ["Jan 2027", "Apr 2027", "Jul 2027", "Oct 2027", "Jan 2028"]
    assert labels(milliseconds=300) == []


def test_value_ticks_are_round_numbers_or_binary_sizes():
    assert value_ticks(90) == [0, 50, 100]
    assert value_ticks(454) == [0, 200, 400, 600]
    assert value_ticks(115 * 1024, as_bytes=True) == [0, 50 * 1024, 100 * 1024, 150 * 1024]


def test_size_bars_scale_to_the_table_and_mark_the_small_files():
    # 3 files of 64-128 KiB and 30 of 128-256 KiB: five bars around them, not one "< 1 MiB".
    bars = size_bars({"16": 3, "17": 30})

    assert bars == [(15, 16, 0), (16, 17, 3), (17, 18, 30), (18, 19, 0), (19, 20, 0)]
    assert [size_range_label(low, high) for low, high, _ in bars] == [
        "32–64 KiB",
        "64–128 KiB",
        "128–256 KiB",
        "256–512 KiB",
        "512 KiB–1 MiB",
    ]
    assert small_bars(bars, 256 * 1024) == 2
    # 2 B to 1 GiB of files: 30 powers of two merged three by three into 10 bars
    wide = size_bars({"1": 1, "30": 1})
    assert len(wide) == 10 and wide[0] == (1, 4, 1) and wide[-1] == (28, 31, 1)


def test_a_histogram_bar_says_its_files_and_share_on_hover():
    svg = str(histogram_svg(["1–2 KiB", "2–4 KiB"], [3, 1], title="sizes"))

    assert "<title>1–2 KiB: 3 files (75%)</title>" in svg
    assert "<title>2–4 KiB: 1 file (25%)</title>" in svg


def test_a_bad_page_is_refused_by_the_page_helper():
    with pytest.raises(InvalidInput, match="page 2 does not exist: 0 snapshots make 1 page of 50"):
        snapshot_page([], number=2)


def test_a_column_with_null_counts_only_says_no_bounds_were_recorded_not_question_marks():
    from console.templatetags.lakewarden import stats_rows
    from storage.spec.models import DataFile

    data_file = DataFile(
        path="part-0.parquet",
        size_bytes=100,
        record_count=5,
        lower_bounds={"id": 1},
        upper_bounds={"id": 5},
        null_counts={"id": 0, "tags": 2},
    )

    assert stats_rows(data_file) == [("id", 1, 5, 0), ("tags", None, None, 2)]


def test_a_threshold_past_the_middle_is_labelled_leftwards_inside_the_chart():
    right = str(histogram_svg(["a", "b", "c"], [1, 2, 3], title="t", marker_after=2, marker_label="small"))
    left = str(histogram_svg(["a", "b", "c"], [1, 2, 3], title="t", marker_after=0, marker_label="small"))

    assert 'class="tick marker-label" text-anchor="end">small</text>' in right
    assert 'class="tick marker-label" text-anchor="start">small</text>' in left
