"""Health that means work (issue 31): the score counts only what an enabled action of the table's
format could improve, and each reason names that action or says why none can. The overview (in
Python) and the tables list (in SQL) agree on every case."""

from __future__ import annotations

import pytest
from django.utils import timezone

from processes.health import format_remedies, health_scores, remedies_of, tables_by_health
from processes.models import PluginConfig, PluginKind
from processes.services import process_preview
from storage import services
from storage.models import Table
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db

DELTA_ACTIONS = "checkpoint, purge-deletion-vectors, rewrite, vacuum"


def _explained(table: Table):
    """The overview's health of ``table`` (the stored score), checked against the score computed now."""
    health = {h.table.pk: h for h in tables_by_health(limit=None)}[table.pk]
    assert health_scores(timezone.now(), [table.pk]) == {table.pk: health.score}
    return health


def _switch(name: str, *, enabled: bool) -> None:
    """Enable or disable a factory as the admin and the seeding do (a saved row)."""
    config = PluginConfig.objects.get(kind=PluginKind.PROCESS_FACTORY, name=name)
    config.enabled = enabled
    config.save()


def _delta(folder, **options) -> Table:
    """A Delta table written by deltalake into ``folder``, registered."""
    return services.table_register(location=str(write_delta_table(folder, **options)))


def _counts(table: Table) -> tuple[int, int, int]:
    return table.file_count, table.small_file_count, table.compactable_file_count


def test_one_small_file_per_partition_is_nothing_to_compact_and_counts_for_nothing(warehouse):
    table = _delta(warehouse / "one_per_partition", commits=1, partition_by=["id"])

    health = _explained(table)

    assert _counts(table) == (10, 10, 0)
    assert health.reasons == [
        "10 small files, but no partition has 5: nothing to compact",
        f"never maintained (enabled: {DELTA_ACTIONS})",
    ]
    assert health.score == 4  # staleness only: 20 x 10/50 files
    preview = process_preview(table=table, action="rewrite")
    assert preview["groups"] == 0 and preview["notes"][0].startswith(
        "nothing to do: no partition has 5 files"
    )


def test_compactable_small_files_count_and_name_the_rewrite(warehouse):
    table = _delta(warehouse / "compactable", commits=6, partition_by=["region"])

    health = _explained(table)

    assert _counts(table) == (12, 12, 12)
    assert health.reasons == [
        "100% of 12 files are small and compactable: rewrite would fix it",
        f"never maintained (enabled: {DELTA_ACTIONS})",
    ]
    # 40 x 12/12 x 12/20 + 15 x 12/10,000 + 10 x 6/500 + 20 x 12/50
    assert health.score == round(40 * 0.6 + 15 * 0.0012 + 10 * 6 / 500 + 20 * 12 / 50) == 29


def test_a_disabled_rewrite_takes_small_files_out_of_the_score_and_says_so(warehouse):
    table = _delta(warehouse / "disabled", commits=6, partition_by=["region"])
    before = _explained(table).score
    _switch("delta-rewrite", enabled=False)

    health = _explained(table)

    assert health.reasons == [
        "100% of 12 files are small, but rewrite is disabled (delta-rewrite)",
        "never maintained (enabled: checkpoint, purge-deletion-vectors, vacuum)",
    ]
    assert (before, health.score) == (29, round(10 * 6 / 500 + 20 * 12 / 50))
    _switch("delta-rewrite", enabled=True)
    assert _explained(table).score == 29  # the stored score follows the switch back


def test_a_paimon_tables_small_files_count_for_nothing_since_its_compaction_is_declined():
    note = pytest.importorskip("lakewarden_paimon.maintenance").COMPACTION_NOTE
    table = Table.objects.create(
        name="lsm", format="paimon", location="/lake/lsm", file_count=100, small_file_count=100,
        compactable_file_count=100, instant_count=50,
    )  # fmt: skip

    health = _explained(table)

    assert health.reasons == [
        f"100% of 100 files are small, but Lakewarden does not run rewrite on paimon tables: {note}",
        "never maintained (enabled: clean-orphan-files, expire-snapshots)",
    ]
    assert health.score == round(10 * 50 / 500 + 20)  # snapshots (expire-snapshots) and staleness


def test_a_format_no_action_maintains_scores_zero_and_says_why():
    table = Table.objects.create(
        name="hoodie", format="hudi", location="/lake/hoodie", file_count=12_000, small_file_count=9_000,
        compactable_file_count=9_000, instant_count=900,
    )  # fmt: skip

    health = _explained(table)

    assert health.score == 0
    assert health.reasons == [
        "75% of 12,000 files are small, but no enabled action compacts the files of hudi tables",
        "12,000 files: no enabled action compacts the files of hudi tables",
        "900 snapshots kept: no enabled action trims the snapshots of hudi tables",
        "no enabled action maintains tables of this format",
    ]


def test_remedies_name_each_formats_enabled_actions():
    remedies = format_remedies()

    assert (remedies["iceberg"].compact, remedies["iceberg"].trim_snapshots) == (
        "rewrite",
        "expire-snapshots",
    )
    assert (remedies["delta"].compact, remedies["delta"].trim_snapshots) == ("rewrite", "checkpoint")
    assert remedies_of(remedies, "nonesuch").actions == ()
