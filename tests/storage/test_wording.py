"""Counts in words (issue 34): "1 small file", never "1 small files", wherever health speaks."""

from __future__ import annotations

import datetime as dt

from storage.health import ALL_REMEDIES, Remedies, TableFacts, table_health
from storage.wording import counted

NOW = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)


def test_counted_is_singular_only_for_exactly_one():
    assert [counted(n, "small file") for n in (0, 1, 2, 12_345)] == [
        "0 small files",
        "1 small file",
        "2 small files",
        "12,345 small files",
    ]
    assert counted(1, "process", "processes") == "1 process"
    assert counted(3, "process", "processes") == "3 processes"


def test_health_reasons_say_one_small_file_and_one_failed_process():
    facts = TableFacts(file_count=1, small_file_count=1, instant_count=1, compactable_file_count=0)
    health = table_health(facts, NOW - dt.timedelta(hours=1), 1, NOW, ALL_REMEDIES)
    assert health.reasons == [
        "1 small file, but no partition has 5: nothing to compact",
        "1 failed process in 7 days: fix the cause and retry",
    ]


def test_a_declined_compaction_is_said_plainly():
    declined = Remedies(
        declined={"compact": "Lakewarden does not run rewrite on paimon tables: a writer's job"}
    )
    facts = TableFacts(file_count=20, small_file_count=20, instant_count=1, compactable_file_count=20)
    health = table_health(facts, NOW, 0, NOW, declined)
    assert health.reasons[0] == (
        "100% of 20 files are small, but Lakewarden does not run rewrite on paimon tables: a writer's job"
    )
    assert "compactable" not in health.reasons[0]
