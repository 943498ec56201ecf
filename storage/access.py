"""Which tables a user may read, as asked by the domain layers (the query planner, the worker, the
cached results): the rule itself belongs to the surfaces (console/teams/access.py), which register
it here at start-up (``table_access_register`` in the teams app's ``ready``), so storage and
processes ask it without importing console.

Without a registered rule, or for no user (work the system submits itself: the bench, a script),
every table is readable, as before teams existed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from django.db.models import BooleanField, CharField, F, Func, QuerySet, Subquery
from django.db.models.functions import Cast

from storage.models import Table

#: ``rule(user)``: None when the user may read every table, else the tables they may read.
AccessRule = Callable[[Any], "QuerySet[Table] | None"]
_rule: list[AccessRule] = []


def table_access_register(rule: AccessRule) -> None:
    """Install the rule (once; installing it again replaces it, as a reloaded app does)."""
    _rule[:] = [rule]


def tables_readable(user) -> QuerySet[Table] | None:
    """None when ``user`` may read every table (or no rule is registered, or no user is given:
    the system's own work), else the tables they may read."""
    if user is None or not _rule:
        return None
    return _rule[0](user)


#: ``rule(team_id)``: the tables a team's grants cover.
TeamRule = Callable[[int], "QuerySet[Table]"]
_team_rule: list[TeamRule] = []


def team_tables_register(rule: TeamRule) -> None:
    """Install the rule naming a team's tables (the teams app's ``ready``, as for the users')."""
    _team_rule[:] = [rule]


def tables_of_team(team_id: int) -> QuerySet[Table]:
    """The tables team ``team_id``'s grants cover (what its alert rules watch and its channels may
    hear of); none without a registered rule."""
    if not _team_rule:
        return Table.objects.none()
    return _team_rule[0](team_id)


def table_ids_refused(readable: QuerySet[Table] | None, table_ids: Iterable[int]) -> set[int]:
    """The ids of ``table_ids`` outside ``readable`` (none when ``readable`` is None: everything)."""
    wanted = {int(pk) for pk in table_ids}
    if readable is None or not wanted:
        return set()
    return wanted - set(readable.filter(pk__in=wanted).values_list("pk", flat=True))


class _SourcesWithin(Func):
    """True when every key of a ``source_snapshots`` column (table ids as text) is among the ids a
    subquery lists: one ``NOT EXISTS`` over ``jsonb_object_keys``, however many tables there are."""

    output_field = BooleanField()

    def as_sql(self, compiler, connection, **extra_context):
        sources, sources_params = compiler.compile(self.source_expressions[0])
        ids, ids_params = compiler.compile(self.source_expressions[1])
        sql = (
            f"NOT EXISTS (SELECT 1 FROM jsonb_object_keys({sources}) AS source(id) "
            f"WHERE source.id NOT IN {ids})"
        )
        return sql, (*sources_params, *ids_params)


def cached_results_readable(queryset: QuerySet, readable: QuerySet[Table] | None) -> QuerySet:
    """``queryset`` (of cached results) without those with a source outside ``readable`` (None:
    every table): a result computed from a table is shown only to those who may read it, and one
    whose source table was deleted (no longer among the readable) to no restricted user. One
    condition in SQL: no query of its own, whatever the number of tables."""
    if readable is None:
        return queryset
    ids = readable.order_by().annotate(id_text=Cast("pk", CharField())).values("id_text")
    return queryset.filter(_SourcesWithin(F("source_snapshots"), Subquery(ids)))
