"""Fresh figures and measured benefit and cost (issue 31): a process re-reads its table's facts
before it runs and after it commits, in the same task, and keeps both on its row with its cost.
Every expected fact is what the spec API reads from the table's own metadata."""

from __future__ import annotations

import datetime as dt
import re
from html import unescape

import pytest
from django.utils import timezone

from processes.health import format_remedies, health_scores, remedies_of
from processes.models import Process, ProcessStatus
from processes.ranking import DEFAULT_THROUGHPUT, OVERHEAD_SECONDS
from storage.health import TableFacts, table_health
from storage.models import Table
from storage.refresh import table_facts
from tests.storage.test_active_refresh import append_delta, spec_facts


def _health(facts: dict, maintained: dt.datetime | None, now: dt.datetime) -> int:
    counts = TableFacts(facts["files"], facts["small_files"], facts["snapshots"], facts["compactable_files"])
    return table_health(counts, maintained, 0, now, remedies_of(format_remedies(), "delta")).score


def test_a_compaction_keeps_the_tables_real_facts_before_and_after_and_refreshes_its_row(make_delta, run_now):
    table, path = make_delta(files=12)
    append_delta(path, 1000)  # another writer: the row still says 12 files
    assert Table.objects.get(pk=table.pk).file_count == 12
    before = spec_facts(table)

    process = run_now(table, "rewrite")

    assert process.status == ProcessStatus.SUCCESS, process.failure
    after = spec_facts(table)
    row = Table.objects.get(pk=table.pk)
    assert (before["files"], before["compactable_files"], after["files"]) == (13, 13, 1)
    assert table_facts(row) == after  # the figures every page shows are the ones after the commit
    now = timezone.now()  # (a never maintained table's score does not depend on the time)
    assert process.measured["before"] == {**before, "health": _health(before, None, now)}
    assert process.measured["after"] == {**after, "health": health_scores(now, [table.pk])[table.pk]}
    assert process.measured["after"]["health"] == _health(after, row.last_maintenance_at, now)
    assert row.health_score == process.measured["after"]["health"]  # the score the lists sort by
    cost = process.measured["cost"]
    assert (cost["bytes_read"], cost["bytes_written"]) == (
        process.summary["bytes_in"],
        process.summary["bytes_out"],
    )
    assert cost["bytes_read"] == before["bytes"] and cost["worker_seconds"] > 0
    # predicted before it ran: its plan's bytes at the default throughput (no past runs yet)
    planned = process.preview["bytes_in"] + process.preview["bytes_out"]
    assert process.preview["bytes_in"] == cost["bytes_read"]  # the plan read what it planned to
    assert process.preview["predicted_worker_seconds"] == pytest.approx(
        OVERHEAD_SECONDS + planned / DEFAULT_THROUGHPUT, abs=0.001
    )


def test_a_process_is_created_with_the_worker_seconds_its_actions_past_runs_predict(make_delta, monkeypatch):
    from processes import services

    monkeypatch.setattr(services, "process_enqueue", lambda process: None)
    table, _ = make_delta(files=12)
    # three runs of rewrite: 2 s, 3 s and 4 s for 1, 2 and 3 MB moved: 1 s fixed, then 1 MB/s
    for moved, seconds in ((1_000_000, 2.0), (2_000_000, 3.0), (3_000_000, 4.0)):
        Process.objects.create(
            table=table, action="rewrite", factory="delta-rewrite", status=ProcessStatus.SUCCESS,
            measured={"cost": {"worker_seconds": seconds, "bytes_read": moved // 2, "bytes_written": moved // 2}},
        )  # fmt: skip

    process = services.process_create(table=table, action="rewrite", params={})

    planned = process.preview["bytes_in"] + process.preview["bytes_out"]
    assert planned > 0
    assert process.preview["predicted_worker_seconds"] == pytest.approx(1.0 + planned / 1_000_000, abs=0.001)


def test_a_failed_process_keeps_the_facts_it_started_from_and_its_cost(test_plugin, make_delta, run_now):
    table, _ = make_delta(files=3)

    process = run_now(table, "touch", {"fail": True})

    assert process.status == ProcessStatus.FAILED
    facts = spec_facts(table)  # its health then: before the failure counted
    assert process.measured["before"] == {**facts, "health": _health(facts, None, timezone.now())}
    assert process.measured["after"] == {}
    stored = Table.objects.get(pk=table.pk).health_score  # the failure counts at once: 15 x 1/3
    assert (
        stored
        == health_scores(timezone.now(), [table.pk])[table.pk]
        == process.measured["before"]["health"] + 5
    )
    assert (process.measured["cost"]["bytes_read"], process.measured["cost"]["bytes_written"]) == (0, 0)


def test_the_process_page_shows_predicted_beside_measured(client_as, viewer, db):
    table = Table.objects.create(name="orders", format="delta", location="/lake/orders")
    before = {
        "files": 454,
        "small_files": 454,
        "compactable_files": 450,
        "snapshots": 30,
        "bytes": 9000,
        "health": 71,
    }
    after = {
        "files": 18,
        "small_files": 2,
        "compactable_files": 0,
        "snapshots": 31,
        "bytes": 8800,
        "health": 9,
    }
    process = Process.objects.create(
        table=table, action="rewrite", factory="delta-rewrite", status=ProcessStatus.SUCCESS,
        preview={"available": True, "bytes_in": 9000, "bytes_out": 8900, "health_after": 8,
                 "predicted_worker_seconds": 20.5,
                 "facts_after": {"file_count": 17, "small_file_count": 1, "compactable_file_count": 0,
                                 "instant_count": 31}},
        measured={"before": before, "after": after,
                  "cost": {"worker_seconds": 12.5, "bytes_read": 9000, "bytes_written": 8800}},
    )  # fmt: skip

    html = client_as(viewer).get(f"/processes/{process.pk}/").content.decode()

    section = html[html.index('id="measured"') :]
    rows = [
        [
            unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row)
        ]
        for row in re.findall(r"<tr>(.*?)</tr>", section[: section.index("</section>")], re.S)
    ]
    assert rows == [
        ["", "Before", "Predicted after", "Measured after"],
        ["files", "454", "17", "18"],
        ["small files", "454", "1", "2"],
        ["compactable files", "450", "0", "0"],
        ["snapshots", "30", "31", "31"],
        ["size", "8.8 KiB", "—", "8.6 KiB"],
        ["health score", "71", "8", "9"],
        ["", "Predicted", "Measured"],
        ["worker-seconds", "20.5 s", "12.5 s"],
        ["bytes read", "8.8 KiB", "8.8 KiB"],
        ["bytes written", "8.7 KiB", "8.6 KiB"],
    ]
    prediction = html[html.index('id="prediction"') : html.index("</section>", html.index('id="prediction"'))]
    assert re.search(r"<th>health score</th><td>[^<]*</td><td>71 → 9</td>", prediction)
