"""The overview ranks tables by health and explains why; table pages draw their metrics."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from console.charts import histogram_svg, timeline_svg
from processes.health import tables_by_health
from processes.models import Process, ProcessStatus
from storage import services
from storage.health import table_health
from storage.models import Table
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def many_small(warehouse):
    return services.table_register(
        location=str(write_delta_table(warehouse / "many_small", commits=30, rows_per_commit=3))
    )


@pytest.fixture
def few_files(warehouse):
    return services.table_register(location=str(write_delta_table(warehouse / "few_files", commits=2)))


def test_registration_keeps_a_histogram_and_a_timeline_that_agree_with_the_table(many_small):
    metrics = many_small.metrics

    assert sum(metrics["size_histogram"]) == many_small.file_count == 30
    assert metrics["small_file_count"] == many_small.small_file_count == 30
    assert [point["id"] for point in metrics["timeline"]] == [str(v) for v in range(30)]
    assert [point["files"] for point in metrics["timeline"]] == list(range(1, 31))
    assert metrics["timeline"][-1]["records"] == many_small.record_count == 90


def test_the_timeline_of_an_iceberg_table_comes_from_its_snapshot_totals(warehouse):
    import uuid

    from tests.console.tables import write_iceberg_table

    catalog = services.catalog_create(
        name="lake", kind="iceberg_sql", properties={"warehouse": warehouse.as_uri()}
    )
    identifier = f"ns_{uuid.uuid4().hex[:6]}.t"
    write_iceberg_table(services.iceberg_catalog(catalog), identifier, commits=4)

    table = services.table_register(catalog=catalog, identifier=identifier)

    assert [p["records"] for p in table.metrics["timeline"]] == [10, 20, 30, 40]
    assert [p["operation"] for p in table.metrics["timeline"]] == ["append"] * 4


def test_small_files_never_maintained_and_failures_rank_a_table_first_and_say_why(many_small, few_files):
    Process.objects.create(
        table=many_small,
        action="rewrite",
        factory="x",
        status=ProcessStatus.FAILED,
        finished_at=timezone.now(),
    )

    ranked = tables_by_health(limit=None)

    assert [h.table.name for h in ranked] == ["many_small", "few_files"]
    assert ranked[0].score > ranked[1].score
    enabled = "checkpoint, purge-deletion-vectors, rewrite, vacuum"
    assert ranked[0].reasons == [
        "100% of 30 files are small and compactable: rewrite would fix it",
        f"never maintained (enabled: {enabled})",
        "1 failed process in 7 days: fix the cause and retry",
    ]


def test_recent_maintenance_lowers_the_score(many_small):
    now = timezone.now()
    before = table_health(many_small, None, 0, now).score
    after = table_health(many_small, now - dt.timedelta(hours=1), 0, now).score

    assert after < before


def test_an_empty_table_is_healthy(warehouse):
    table = Table.objects.create(name="empty", format="delta", location=str(warehouse / "empty"))

    assert table_health(table, None, 0, timezone.now()).score == 0


def test_the_overview_lists_tables_needing_attention_for_a_viewer(client_as, viewer, many_small, few_files):
    html = client_as(viewer).get("/").content.decode()

    assert html.index("many_small") < html.index("few_files")
    assert "Tables needing attention" in html and "never maintained" in html


def test_the_liveness_fragment_says_when_no_worker_or_beat_answers(client_as, viewer):
    from django.core.cache import cache

    from console.health import WORKERS_CACHE_KEY

    cache.delete(WORKERS_CACHE_KEY)  # no answer of an earlier test's workers
    html = client_as(viewer).get("/liveness/").content.decode()

    assert "beat never seen" in html and "dot-bad" in html


def test_the_table_page_draws_the_timeline_and_histogram(client_as, viewer, many_small):
    html = client_as(viewer).get(f"/tables/{many_small.pk}/").content.decode()

    assert html.count("<svg") >= 5
    assert "Records after each snapshot" in html and "File sizes (all live files)" in html
    assert "small &lt; 16 MiB" in html


def test_a_timeline_has_one_dot_per_instant_coloured_by_operation():
    series = [
        {"id": str(i), "at": "2024-01-01T00:00:00", "operation": op, "records": i, "files": i, "bytes": i}
        for i, op in enumerate(["append", "append", "delete"])
    ]

    svg = str(timeline_svg(series, "records", "Records"))

    assert svg.count("<circle") == 3
    assert svg.count("#cf222e") == 1  # the delete


def test_chart_text_is_escaped():
    svg = str(histogram_svg(["<b>"], [1], title="<script>alert(1)</script>"))

    assert "<script>" not in svg and "&lt;script&gt;" in svg
