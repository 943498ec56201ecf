"""Per resource group and action: what its finished processes spent and gained since the history
began (issue 31 item 6), as counters a scraper turns into rates (``rate(...[1d])`` is the
console's per-day report). One aggregate query (``processes.groups.report``)."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily

from processes.groups.models import ResourceGroup
from processes.groups.report import BENEFITS, COSTS, totals_by_group_action

PREFIX = "lakewarden_resource_group_"
#: (field of the report, metric name after the prefix, help)
FAMILIES = (
    ("runs", "runs", "Finished processes of the group"),
    ("failed", "failed_runs", "Finished processes of the group that did not succeed"),
    *((key, key, f"Cost: {what} of the group's finished processes") for key, what in COSTS),
    *(
        (
            key,
            key,
            f"Benefit: {what} by the group's successful processes (the table's facts before minus after)",
        )
        for key, what, _ in BENEFITS
    ),
)


def group_families(tables=None) -> list[CounterMetricFamily]:
    """The counters, labelled ``group`` and ``action`` (``tables``: only those tables' processes)."""
    names = dict(ResourceGroup.objects.values_list("pk", "name"))
    families = {
        field: CounterMetricFamily(f"{PREFIX}{name}", help_text, labels=["group", "action"])
        for field, name, help_text in FAMILIES
    }
    for (group_id, action), values in sorted(totals_by_group_action(tables=tables).items()):
        name = names.get(group_id)
        if name is None:
            continue
        for field, family in families.items():
            family.add_metric([name, action], values[field])
    return list(families.values())
