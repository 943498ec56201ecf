"""Which resource group a table is in, in one place: explicit assignment first, then a namespace
pattern, then a catalog, then ``default``. Bounded queries whatever the number of tables: the groups
(a handful of rows, one query with their catalogs), then for a batch of tables one query for their
explicit assignments and the fields the rules read.

A table's namespace is its identifier up to the last dot (``sales.eu.orders`` -> ``sales.eu``); a
table without a dotted identifier (a folder under a path root) has the namespace ``""`` and joins a
group by its catalog or by name only. Patterns are globs (``fnmatch``, case-sensitive).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

import numpy as np
from django.db import connection

from processes.groups.models import DEFAULT_GROUP, DEFAULT_GROUP_FIELDS, ResourceGroup, ResourceGroupTable
from processes.id_arrays import locate_sorted
from processes.sql_arrays import int_array
from storage.models import Table


def namespace_of(identifier: str) -> str:
    head, dot, _ = (identifier or "").rpartition(".")
    return head if dot else ""


#: The same namespace in SQL, over the table ``t`` (string functions: a regular expression took
#: 1.7x as long over 100,000 tables, where the scheduler resolves every due table's group).
NAMESPACE_SQL = (
    "CASE WHEN strpos(t.identifier, '.') > 0"
    " THEN left(t.identifier, length(t.identifier) - strpos(reverse(t.identifier), '.')) ELSE '' END"
)


def glob_regex(pattern: str) -> str:
    """A glob as a regular expression Python and Postgres read alike: ``*`` any run of characters,
    ``?`` one, ``[abc]``/``[!abc]`` a set, everything else literal (as ``fnmatchcase`` reads it)."""
    out, i = ["^"], 0
    while i < len(pattern):
        char, i = pattern[i], i + 1
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            body, i = pattern[i:end], end + 1
            negate = body.startswith("!")
            members = "".join(
                f"\\{c}" if not (c.isalnum() or c == "-") else c for c in (body[1:] if negate else body)
            )
            out.append(f"[{'^' if negate else ''}{members}]")
        else:
            out.append(char if char.isalnum() or char == "_" else f"\\{char}")
    out.append("$")
    return "".join(out)


@dataclass
class GroupRules:
    """Every group with what it claims, read once (``load``)."""

    groups: dict[int, ResourceGroup]
    default: ResourceGroup
    by_catalog: dict[int, ResourceGroup]
    patterns: list[tuple[str, ResourceGroup]]

    @classmethod
    def load(cls) -> GroupRules:
        groups = {group.pk: group for group in ResourceGroup.objects.prefetch_related("catalogs")}
        default = next((g for g in groups.values() if g.name == DEFAULT_GROUP), None)
        if default is None:  # the data migration made it; a database restored without it gets it back
            default, _ = ResourceGroup.objects.get_or_create(
                name=DEFAULT_GROUP, defaults=DEFAULT_GROUP_FIELDS
            )
            groups[default.pk] = default
        by_catalog: dict[int, ResourceGroup] = {}
        patterns: list[tuple[str, ResourceGroup]] = []
        for group in sorted(groups.values(), key=lambda g: g.name):
            for catalog in group.catalogs.all():
                by_catalog.setdefault(catalog.pk, group)
            patterns.extend((str(p), group) for p in group.namespace_patterns or [])
        return cls(groups, default, by_catalog, patterns)

    def group_by_rules(self, catalog_id: int | None, identifier: str) -> ResourceGroup:
        """The group a table with no explicit assignment is in."""
        return self.group_by_namespace(catalog_id, namespace_of(identifier))

    def group_by_namespace(self, catalog_id: int | None, namespace: str) -> ResourceGroup:
        for pattern, group in self.patterns:
            if fnmatchcase(namespace, pattern):
                return group
        if catalog_id is not None and catalog_id in self.by_catalog:
            return self.by_catalog[catalog_id]
        return self.default


#: The tables by what decides their group (catalog, namespace, explicit assignment): a row per
#: distinct combination with its tables' ids, so the rules are matched once per combination.
_TABLES_SQL = f"""
SELECT t.catalog_id, {NAMESPACE_SQL}, a.group_id, array_agg(t.id)
FROM {{table}} t LEFT JOIN {{assignment}} a ON a.table_id = t.id
WHERE t.id = ANY(%s::bigint[])
GROUP BY 1, 2, 3
"""


def tables_by_group(table_ids: list[int], rules: GroupRules) -> list[tuple[ResourceGroup, list[int]]]:
    """(group, ids of its tables among ``table_ids``): one query for any number of tables."""
    if not table_ids:
        return []
    sql = _TABLES_SQL.format(table=Table._meta.db_table, assignment=ResourceGroupTable._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(sql, [int_array(table_ids)])
        rows = cursor.fetchall()
    found = []
    for catalog_id, namespace, group_id, ids in rows:
        group = rules.groups.get(group_id) if group_id is not None else None
        found.append((group or rules.group_by_namespace(catalog_id, namespace), ids))
    return found


def assigned_groups(table_ids: np.ndarray) -> np.ndarray:
    """The group each of ``table_ids`` (sorted) is assigned to by name (0: none), from every
    assignment (one query: there are as many as operators made, not one per table)."""
    pairs = np.array(ResourceGroupTable.objects.values_list("table_id", "group_id"), dtype=np.int64).reshape(
        -1, 2
    )
    answer = np.zeros(len(table_ids), dtype=np.int64)
    at, mine = locate_sorted(table_ids, pairs[:, 0])
    answer[at[mine]] = pairs[mine, 1]
    return answer


def namespaces_by_hash(hashes: list[int]) -> dict[int, str]:
    """The namespaces whose ``hashtextextended`` (as the scheduler's awake scan keeps it) is one
    of ``hashes``: one scan of the tables."""
    if not hashes:
        return {}
    sql = (
        f"SELECT DISTINCT ON (h) h, ns FROM (SELECT hashtextextended({NAMESPACE_SQL}, 0) AS h,"
        f" {NAMESPACE_SQL} AS ns FROM {Table._meta.db_table} t) n WHERE h = ANY(%s::bigint[])"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [int_array(hashes)])
        return dict(cursor.fetchall())


def groups_for_tables(
    tables: Iterable[Table | int], rules: GroupRules | None = None
) -> dict[int, ResourceGroup]:
    """table id -> its group, for table rows or ids: one query for any number of tables (the ids
    as one array parameter), besides the groups' own two when ``rules`` is not given. Tables that
    share a catalog and a namespace are matched once."""
    rules = rules or GroupRules.load()
    ids = [item.pk if isinstance(item, Table) else int(item) for item in tables]
    return group_mapping(tables_by_group(ids, rules))


def group_mapping(found: list[tuple[ResourceGroup, list[int]]]) -> dict[int, ResourceGroup]:
    """``tables_by_group``'s answer as table id -> group."""
    answer: dict[int, ResourceGroup] = {}
    for group, members in found:
        answer.update(dict.fromkeys(members, group))
    return answer


def group_of(table: Table) -> ResourceGroup:
    """The one group ``table`` is in."""
    return groups_for_tables([table])[table.pk]


def tables_matching(pattern: str, *, also: str | None = None, limit: int = 3) -> list[str]:
    """Names of up to ``limit`` tables whose namespace matches ``pattern`` (and ``also``)."""
    where = f"({NAMESPACE_SQL}) ~ %s"
    params: list[object] = [glob_regex(pattern)]
    if also is not None:
        where += f" AND ({NAMESPACE_SQL}) ~ %s"
        params.append(glob_regex(also))
    sql = f"SELECT t.name FROM {Table._meta.db_table} t WHERE {where} ORDER BY t.name LIMIT %s"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, limit])
        return [row[0] for row in cursor.fetchall()]


def group_warnings(group: ResourceGroup) -> list[str]:
    """What an operator should know about the group's rules: patterns that match no table."""
    return [
        f"namespace pattern {pattern!r} matches no table (yet)"
        for pattern in group.namespace_patterns or []
        if not tables_matching(str(pattern), limit=1)
    ]
