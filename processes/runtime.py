"""TableRuntime: what a factory sees of a table, one kind for every format."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from processes.models import TERMINAL_STATUSES, Process, TableState
from processes.plugin import StateKey, TableProcess
from storage.io import StoreOptions, is_object_store
from storage.io.guard import PathGuard
from storage.models import Table
from storage.paths import table_guard
from storage.services import table_open, table_store_options
from storage.spec import SpecTable


class TableRuntime:
    """A registered table as a factory sees it: identity, merged configuration, typed state.

    ``config`` is the factory's properties with the table's own properties laid over them (a table
    property with the same name as a factory property overrides it for that table only).
    """

    def __init__(
        self,
        table: Table,
        factory_properties: dict[str, Any] | None = None,
        states: dict[str, Any] | None = None,
    ) -> None:
        self.table = table
        factory_properties = dict(factory_properties or {})
        overrides = {k: v for k, v in (table.properties or {}).items() if k in factory_properties}
        self.config: dict[str, Any] = {**factory_properties, **overrides}
        self._states = states
        self._spec_table: SpecTable | None = None
        self._guard: PathGuard | None = None
        #: Why ``trigger`` returned None (``nothing_to_do``/``decline``), shown with the decision.
        self.reason: str | None = None
        self.declined = False

    def nothing_to_do(self, reason: str) -> TableProcess | None:
        """Say why there is nothing to do on this table now; ``trigger`` returns the result::

            return runtime.nothing_to_do("no partition has 5 files under 16777216 bytes")

        The scheduler keeps the reason with its decision (Maintenance tab, API). A factory that
        returns None without it still works: its decision reads "the factory found nothing to do"."""
        self.reason = reason
        self.declined = False
        return None

    def decline(self, reason: str) -> TableProcess | None:
        """Say that this table's format (or this table) does not take the action, and why (e.g. a
        primary-key table compacted by its own writers); ``trigger`` returns the result."""
        self.reason = reason
        self.declined = True
        return None

    @property
    def table_id(self) -> int:
        return self.table.pk

    @property
    def format(self) -> str:
        return self.table.format

    @property
    def identifier(self) -> str:
        return self.table.identifier or self.table.location

    @property
    def location(self) -> str:
        return self.table.location

    @property
    def current_instant(self) -> str:
        return self.table.current_instant

    def store_options(self) -> StoreOptions | None:
        """The credentials reaching the table's object store (its catalog's, its root's or the
        environment's); None for a local table."""
        if not is_object_store(self.location):
            return None
        return table_store_options(self.table)

    def guard(self) -> PathGuard:
        """What a process of this table may delete, move or write (``storage.io.guard``): inside
        the table's location and the allowed roots, not in another registered table, not through
        a symlink. Built once per runtime."""
        if self._guard is None:
            self._guard = table_guard(self.table)
        return self._guard

    def finished_processes(self, ids: Iterable[int]) -> set[int]:
        """Those of ``ids`` that are processes of this table which have ended (whatever the
        outcome). An id this database does not know (another installation's?) is not among them."""
        return set(
            Process.objects.filter(
                table=self.table, pk__in=list(ids), status__in=TERMINAL_STATUSES
            ).values_list("pk", flat=True)
        )

    def load(self) -> SpecTable:
        """The table through the spec API (opened once per runtime)."""
        if self._spec_table is None:
            self._spec_table = table_open(self.table)
        return self._spec_table

    def get_state(self, key: StateKey | str) -> Any:
        name, default = (key.name, key.default) if isinstance(key, StateKey) else (key, None)
        if self._states is None:
            self._states = dict(TableState.objects.filter(table=self.table).values_list("key", "value"))
        value = self._states.get(name, default)
        if isinstance(key, StateKey) and value is not None and key.type in (int, float, str, bool):
            value = key.type(value)
        return value

    def set_state(self, key: StateKey | str, value: Any) -> None:
        name = key.name if isinstance(key, StateKey) else key
        TableState.objects.update_or_create(table=self.table, key=name, defaults={"value": value})
        if self._states is not None:
            self._states[name] = value
