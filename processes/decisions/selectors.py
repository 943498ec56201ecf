"""A table's maintenance as the Maintenance tab and ``GET /api/v1/tables/{id}/maintenance/`` show
it: per action of its format, whether the scheduler runs it (enabled, manual only, disabled,
declined, and why), when it was last evaluated and is next due, its last decisions with their
reasons, and the settings it runs with (the factory's properties with the table's overrides laid
over them). A few queries per table whatever the history (decisions are bounded per action)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from processes.decisions.log import KEEP
from processes.decisions.models import Decision, DecisionKind
from processes.models import ACTIVE_STATUSES, Process, TableState
from processes.plugin import known_actions
from processes.registry import configured_factories
from processes.runtime import TableRuntime
from processes.scheduler import evaluated_key, is_manual, seen_snapshot_key
from storage.models import Table

#: Decisions that leave the pair due: it is looked at again at the next tick.
WAITS = (DecisionKind.WAITING_SLOT, DecisionKind.WAITING_BUDGET)

ENABLED = "enabled"
MANUAL = "manual-only"
DISABLED = "disabled"
DECLINED = "declined"


@dataclass
class ActionMaintenance:
    action: str
    description: str
    factory: str
    #: ``enabled``, ``manual-only``, ``disabled`` or ``declined``.
    state: str
    note: str = ""
    interval_seconds: int | None = None
    on_new_snapshot: bool = False
    parallelism: int | None = None
    last_evaluated_at: dt.datetime | None = None
    next_evaluation_at: dt.datetime | None = None
    next_evaluation: str = ""
    active_process: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)

    @property
    def last_decision(self) -> Decision | None:
        return self.decisions[0] if self.decisions else None


@dataclass
class TableMaintenance:
    table: Table
    actions: list[ActionMaintenance]
    #: When the scheduler looks at the table again at the latest (its wake time; None: next tick,
    #: or not before a new snapshot when every pair waits for one).
    wake_at: dt.datetime | None
    now: dt.datetime

    @property
    def decided(self) -> bool:
        return any(row.decisions for row in self.actions)


def table_maintenance(
    *, table: Table, history: int = KEEP, now: dt.datetime | None = None
) -> TableMaintenance:
    now = now or dt.datetime.now(dt.UTC)
    states = dict(TableState.objects.filter(table=table).values_list("key", "value"))
    active = dict(Process.objects.filter(table=table, status__in=ACTIVE_STATUSES).values_list("action", "pk"))
    decisions: dict[str, list[Decision]] = {}
    for decision in Decision.objects.filter(table=table).order_by("action", "-id"):
        kept = decisions.setdefault(decision.action, [])
        if len(kept) < history:
            kept.append(decision)
    rows: dict[str, ActionMaintenance] = {}
    factories = configured_factories(include_disabled=True)
    for configured in factories:  # highest priority first: the serving factory wins
        factory = configured.factory
        for action in sorted(factory.supported_actions().get(table.format, set())):
            if action in rows and rows[action].state != DISABLED:
                continue
            row = ActionMaintenance(
                action,
                known_actions().get(action, ""),
                configured.name,
                ENABLED if configured.enabled else DISABLED,
            )
            row.settings = TableRuntime(table, factory.properties).config
            if not configured.enabled:
                row.note = f"factory {configured.name} is disabled (an admin enables it under Plugins)"
            else:
                _schedule(row, factory.trigger_strategy(table.format, action), table, states, now)
                row.active_process = active.get(action)
                if is_manual(table, action):
                    row.state = MANUAL
                    row.note = "the table's manual-actions override leaves it to operators (Run now)"
            rows[action] = row
    for configured in factories:
        if not configured.enabled:
            continue
        for action, reason in configured.factory.declined_actions().get(table.format, {}).items():
            if action not in rows or rows[action].state == DISABLED:
                rows[action] = ActionMaintenance(
                    action, known_actions().get(action, ""), configured.name, DECLINED, note=reason
                )
    for action, row in rows.items():
        row.decisions = decisions.pop(action, [])
        last = row.last_decision
        if row.last_evaluated_at is None and last is not None and last.kind in WAITS:
            # A wait leaves the pair due (its evaluation is not stamped), so "never evaluated"
            # beside "Waiting for a slot" would read as a contradiction.
            row.next_evaluation = f"at the next tick (due, {last.get_kind_display().lower()})"
    for action, kept in sorted(decisions.items()):  # decided once, no factory serves it now
        rows[action] = ActionMaintenance(
            action, known_actions().get(action, ""), "", DISABLED, note="no enabled factory serves it now"
        )
        rows[action].decisions = kept
    order = {ENABLED: 0, MANUAL: 1, DECLINED: 2, DISABLED: 3}
    actions = sorted(rows.values(), key=lambda r: (order[r.state], r.action))
    return TableMaintenance(table, actions, table.scheduler_wake_at, now)


def _schedule(
    row: ActionMaintenance, strategy, table: Table, states: dict[str, Any], now: dt.datetime
) -> None:
    """Last and next evaluation of the pair, by the rule the tick applies (``due.Snapshot._decide``)."""
    row.interval_seconds = int(strategy.interval.total_seconds())
    row.on_new_snapshot = bool(strategy.on_new_snapshot)
    row.parallelism = strategy.parallelism
    evaluated = states.get(evaluated_key(row.action))
    if not isinstance(evaluated, int | float):
        row.next_evaluation = "at the next tick (never evaluated)"
        return
    row.last_evaluated_at = dt.datetime.fromtimestamp(float(evaluated), tz=dt.UTC)
    earliest = row.last_evaluated_at + strategy.interval
    if strategy.on_new_snapshot and states.get(seen_snapshot_key(row.action)) == table.current_instant:
        row.next_evaluation_at = earliest
        row.next_evaluation = f"after the next snapshot, not before {earliest:%Y-%m-%d %H:%M:%S} UTC"
    elif earliest <= now:
        row.next_evaluation = "at the next tick (due)"
    else:
        row.next_evaluation_at = earliest
        row.next_evaluation = f"at {earliest:%Y-%m-%d %H:%M:%S} UTC"
