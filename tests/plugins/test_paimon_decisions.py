"""A Paimon table (written by pypaimon) on the Maintenance tab and in the scheduler's decisions
(issue 31 item 3): compaction is declined with the plugin's reason, and expiry that finds nothing
past the retention rules says so."""

from __future__ import annotations

import pytest

from processes.decisions import Decision, DecisionKind
from processes.models import PluginConfig, Process
from processes.registry import configured_factories
from processes.scheduler import schedule_tick
from tests.plugins._paimon_tables import write_primary_key_table
from tests.plugins.test_paimon_plugin import installed  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


def test_a_paimon_tables_maintenance_says_compaction_is_declined_and_expiry_has_nothing_to_do(
    installed,  # noqa: F811
    warehouse,
    viewer,
    api_as,
    client_as,
):
    from lakewarden_paimon.maintenance import COMPACTION_NOTE

    from storage.services import table_register

    configured_factories()
    PluginConfig.objects.exclude(name="paimon-expire-snapshots").update(enabled=False)
    table = table_register(location=write_primary_key_table(str(warehouse)))

    schedule_tick()

    decision = Decision.objects.get(table=table, action="expire-snapshots")
    assert decision.kind == DecisionKind.NOTHING_TO_DO
    assert decision.reason == "nothing to do: no snapshot is past the retention rules"
    assert Process.objects.count() == 0

    PluginConfig.objects.filter(name="paimon-clean-orphan-files").update(enabled=True)  # declines rewrite
    actions = {
        a["action"]: a
        for a in api_as(viewer).get(f"/api/v1/tables/{table.pk}/maintenance/").json()["actions"]
    }
    assert (actions["rewrite"]["state"], actions["rewrite"]["note"]) == ("declined", COMPACTION_NOTE)
    assert actions["expire-snapshots"]["decisions"][0]["reason"] == decision.reason
    html = client_as(viewer).get(f"/tables/{table.pk}/maintenance/").content.decode()
    row = html[html.index('id="action-rewrite"') :]
    assert "declined" in row[: row.index("</tr>")]
