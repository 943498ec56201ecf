"""Resource groups (issue 31): which group a table is in, the rules a group must keep, and the
budgets the scheduler and manual runs respect, also when two of them admit at once (threads on
the real Postgres, each with its own connection)."""

from __future__ import annotations

import datetime as dt
import threading
from fnmatch import fnmatchcase

import numpy as np
import pytest
from django.db import connection
from django.utils import timezone

from processes.groups import services
from processes.groups.budget import BudgetExhausted, usage
from processes.groups.membership import (
    NAMESPACE_SQL,
    glob_regex,
    group_of,
    groups_for_tables,
    namespace_of,
    tables_matching,
)
from processes.groups.models import DEFAULT_GROUP, ResourceGroup
from processes.models import PluginConfig, Process, ProcessStatus, ProcessTrigger
from processes.registry import configured_factories
from processes.scheduler import schedule_tick
from processes.services import process_create, process_queue
from storage.errors import Conflict, InvalidInput
from storage.models import Catalog, Table

pytestmark = pytest.mark.django_db


def _tables(names: list[str], *, catalog: Catalog | None = None) -> list[Table]:
    return Table.objects.bulk_create(
        Table(
            name=name.rsplit(".", 1)[-1] + f"-{i}",
            identifier=name,
            catalog=catalog,
            format="delta",
            location=f"/lake/{catalog.name if catalog else 'x'}/{name}",
            file_count=10,
            current_instant="1",
        )
        for i, name in enumerate(names)
    )


def _catalog(name: str) -> Catalog:
    return Catalog.objects.create(name=name, kind="path_root", properties={"root": f"/lake/{name}"})


def _configure(**properties) -> None:
    configured_factories()
    PluginConfig.objects.exclude(name="test-touch").update(enabled=False)
    PluginConfig.objects.filter(name="test-touch").update(
        properties={"parallelism": 10, "interval": 1, **properties}
    )


# --- membership -----------------------------------------------------------------------------------


def test_a_table_is_in_its_explicit_group_then_a_pattern_group_then_a_catalog_group_then_default():
    sales = _catalog("sales")
    ops = _catalog("ops")
    by_catalog = services.resource_group_create(name="by-catalog", catalogs=[sales, ops])
    by_pattern = services.resource_group_create(name="by-pattern", namespace_patterns=["sales.eu*"])
    tables = _tables(["sales.eu.orders", "sales.us.orders", "ops.jobs", "misc.other"], catalog=sales)
    loose = _tables(["plain"])[0]
    by_name = services.resource_group_create(name="by-name", tables=[tables[2]])

    answer = groups_for_tables([t.pk for t in tables] + [loose.pk])

    assert {pk: group.name for pk, group in answer.items()} == {
        tables[0].pk: by_pattern.name,  # sales.eu matches sales.eu*: the pattern beats the catalog
        tables[1].pk: by_catalog.name,  # sales.us: no pattern, its catalog
        tables[2].pk: by_name.name,  # assigned by name: beats its catalog
        tables[3].pk: by_catalog.name,
        loose.pk: DEFAULT_GROUP,  # no catalog, no dotted identifier
    }
    assert group_of(tables[0]).name == "by-pattern"


def test_the_tick_resolves_from_its_awake_scan_the_groups_the_membership_query_resolves():
    """The scheduler resolves due tables' groups from the awake scan's columns (catalog, explicit
    assignment, a hash of the namespace), not by the membership query: the same answer."""
    from processes.due import Snapshot
    from processes.groups.tick import TickGroups

    sales, ops = _catalog("sales"), _catalog("ops")
    services.resource_group_create(name="by-catalog", catalogs=[sales])
    services.resource_group_create(name="by-pattern", namespace_patterns=["sales.eu*", "ops.x?"])
    names = [
        "sales.eu.orders",
        "sales.eu2.a",
        "sales.us.orders",
        "ops.xy.t",
        "ops.xyz.t",
        "misc.other",
        "été.t",
    ]
    tables = (
        _tables(names, catalog=sales) + _tables(["ops.xy.u", "ops.jobs"], catalog=ops) + _tables(["plain"])
    )
    services.resource_group_create(name="by-name", tables=[tables[2], tables[7]])
    ids = sorted(t.pk for t in tables)
    now = timezone.now()

    resolved = TickGroups(now).resolve_awake(Snapshot(now), np.array(ids))

    expected = {pk: group.name for pk, group in groups_for_tables(ids).items()}
    assert {pk: resolved[pk].name for pk in ids} == expected
    assert [expected[t.pk] for t in tables] == [
        "by-pattern", "by-pattern", "by-name", "by-pattern", "by-catalog", "by-catalog", "by-catalog",
        "by-name", DEFAULT_GROUP, DEFAULT_GROUP,
    ]  # fmt: skip
    assert resolved.get(max(ids) + 1) is None


def test_a_pattern_group_made_after_the_ticks_scan_still_gets_its_tables():
    """The awake scan hashes namespaces only when some group has patterns: a pattern group made
    between the scan and the groups' rules is resolved by the membership query instead."""
    from processes.due import Snapshot
    from processes.groups.tick import TickGroups

    tables = _tables(["late.a", "early.b"])
    now = timezone.now()
    snapshot = Snapshot(now)
    services.resource_group_create(name="late", namespace_patterns=["late"])

    resolved = TickGroups(now).resolve_awake(snapshot, np.array(sorted(t.pk for t in tables)))

    assert not snapshot.namespaces_hashed
    assert {t.identifier: resolved[t.pk].name for t in tables} == {"late.a": "late", "early.b": DEFAULT_GROUP}


def test_a_table_deleted_since_the_scan_is_in_no_other_tables_group(test_plugin):
    """The fallback's membership query leaves out a table deleted since the awake scan: it gets the
    default group (never a neighbour's), and a tick that ranks it skips it without failing."""
    from processes.due import Snapshot
    from processes.groups.tick import TickGroups

    _configure()
    tables = _tables(["late.a", "late.gone", "late.c"])
    now = timezone.now()
    snapshot = Snapshot(now)
    services.resource_group_create(name="late", namespace_patterns=["late"])
    gone = tables[1].pk
    Table.objects.filter(pk=gone).delete()
    groups = TickGroups(now)

    resolved = groups.resolve_awake(snapshot, np.array(sorted(t.pk for t in tables)))

    assert {pk: resolved[pk].name for pk in sorted(t.pk for t in tables)} == {
        tables[0].pk: "late", gone: DEFAULT_GROUP, tables[2].pk: "late",
    }  # fmt: skip
    assert groups.group_pks(np.array([gone])).tolist() == [resolved[gone].pk]
    report = schedule_tick()  # the live tables are asked; nothing fails
    assert report.errors == {} and len(report.triggered) == 2


def test_a_missing_default_group_comes_back_with_the_budgets_the_migration_gave_it():
    from processes.groups.membership import GroupRules

    made = ResourceGroup.objects.get(name=DEFAULT_GROUP)  # by migration 0012
    as_made = (made.description, made.max_concurrency, made.compute_budget_seconds)
    assert as_made == ("Every table no other group claims", 20, 72_000)
    made.delete()  # a database restored without it, or flushed by a test

    rules = GroupRules.load()

    again = ResourceGroup.objects.get(name=DEFAULT_GROUP)
    assert rules.default.pk == again.pk
    assert (again.description, again.max_concurrency, again.compute_budget_seconds) == as_made


def test_resolving_groups_takes_the_same_few_queries_for_any_number_of_tables(django_assert_max_num_queries):
    services.resource_group_create(name="eu", namespace_patterns=["eu"])
    ids = [t.pk for t in _tables([f"{'eu' if i % 2 else 'us'}.t{i}" for i in range(500)])]

    with django_assert_max_num_queries(3):  # the groups, their catalogs, the tables with their assignments
        answer = groups_for_tables(ids)

    assert sum(1 for group in answer.values() if group.name == "eu") == 250


@pytest.mark.parametrize(
    "pattern",
    ["sales.*", "sales*", "s?les.eu", "[rs]ales.*", "[!r]ales.eu", "sales.e[a-z]", "a.b", "x+y", "*"],
)
def test_a_glob_matches_in_postgres_exactly_what_fnmatch_matches(pattern):
    namespaces = ["sales.eu", "sales", "rales.eu", "sales.e1", "a.b", "axb", "x+y", "xxy", ""]
    _tables([f"{ns}.t" if ns else "t" for ns in namespaces])

    in_postgres = set(tables_matching(pattern, limit=100))

    expected = {f"t-{i}" for i, ns in enumerate(namespaces) if fnmatchcase(ns, pattern)}
    assert in_postgres == expected, glob_regex(pattern)


def test_the_namespace_postgres_derives_is_the_one_python_derives():
    identifiers = ["sales.eu.orders", "orders", "", "a..b", ".lead", "trail.", "été.ünï.t", "x.y"]
    tables = _tables(identifiers)

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT t.id, {NAMESPACE_SQL} FROM {Table._meta.db_table} t WHERE t.id = ANY(%s)",
            [[t.pk for t in tables]],
        )
        in_postgres = dict(cursor.fetchall())

    expected = {t.pk: namespace_of(name) for t, name in zip(tables, identifiers, strict=True)}
    assert in_postgres == expected
    assert in_postgres[tables[0].pk] == "sales.eu" and in_postgres[tables[3].pk] == "a."
    assert in_postgres[tables[6].pk] == "été.ünï" and in_postgres[tables[1].pk] == ""


# --- the rules a group keeps ---------------------------------------------------------------------


@pytest.mark.parametrize("field", ["max_concurrency", "compute_budget_seconds"])
@pytest.mark.parametrize("value", [0, -5])
def test_a_budget_of_zero_or_less_is_refused_naming_the_field(field, value):
    with pytest.raises(InvalidInput) as refused:
        services.resource_group_create(name="g", **{field: value})

    assert refused.value.field == field
    assert refused.value.message.startswith(f"{field} must be at least 1 (got {value})")
    assert not ResourceGroup.objects.filter(name="g").exists()


def test_two_groups_claiming_one_catalog_are_refused_naming_both():
    sales = _catalog("sales")
    services.resource_group_create(name="first", catalogs=[sales])

    with pytest.raises(InvalidInput) as refused:
        services.resource_group_create(name="second", catalogs=[sales])

    assert refused.value.message == (
        "catalog sales is already claimed by resource group first; a table is in one group: remove it "
        "there first or assign tables of it to second by name"
    )
    assert not ResourceGroup.objects.filter(name="second").exists()


def test_overlapping_namespace_patterns_are_refused_naming_both_groups_and_a_table():
    _tables(["sales.eu.orders"])
    services.resource_group_create(name="first", namespace_patterns=["sales.*"])

    with pytest.raises(InvalidInput) as refused:
        services.resource_group_create(name="second", namespace_patterns=["*.eu"])

    assert refused.value.message == (
        "namespace pattern '*.eu' of second and 'sales.*' of resource group first claim the same "
        "tables (both match table(s) orders-0); narrow one of them"
    )
    with pytest.raises(InvalidInput, match="claim the same tables \\(the same pattern\\)"):
        services.resource_group_create(name="third", namespace_patterns=["sales.*"])


def test_a_table_assigned_to_one_group_is_refused_to_another_naming_both():
    table = _tables(["a.b"])[0]
    services.resource_group_create(name="first", tables=[table])

    with pytest.raises(InvalidInput) as refused:
        services.resource_group_create(name="second", tables=[table])

    assert refused.value.message == (
        "table b-0 is already assigned to resource group first; unassign it there before assigning it to second"
    )


def test_a_pattern_that_matches_nothing_is_kept_with_a_warning():
    from processes.groups.capacity import group_warnings

    group = services.resource_group_create(name="later", namespace_patterns=["nothing.yet"])

    assert group_warnings(group) == ["namespace pattern 'nothing.yet' matches no table (yet)"]
    _tables(["nothing.yet.t"])
    assert group_warnings(group) == []


def test_the_default_group_exists_and_cannot_be_deleted_renamed_or_given_rules():
    default = ResourceGroup.objects.get(name=DEFAULT_GROUP)

    with pytest.raises(Conflict, match="the default group cannot be deleted"):
        services.resource_group_delete(group=default)
    with pytest.raises(InvalidInput, match="cannot be renamed"):
        services.resource_group_update(group=default, name="other")
    with pytest.raises(InvalidInput, match="no rules of its own"):
        services.resource_group_update(group=default, namespace_patterns=["x"])
    assert ResourceGroup.objects.get(pk=default.pk).name == DEFAULT_GROUP


def test_a_group_needs_a_queue_of_its_own(settings):
    services.resource_group_create(name="a", queue="maintenance.a")

    with pytest.raises(InvalidInput, match="queue maintenance.a is already resource group a's"):
        services.resource_group_create(name="b", queue="maintenance.a")
    with pytest.raises(InvalidInput, match="is the default group's queue"):
        services.resource_group_create(name="c", queue=settings.LAKEWARDEN_HEAVY_QUEUE)
    with pytest.raises(InvalidInput, match="is the light queue"):
        services.resource_group_create(name="d", queue=settings.CELERY_TASK_DEFAULT_QUEUE)
    assert ResourceGroup.objects.get(name="a").effective_queue == "maintenance.a"
    assert services.resource_group_create(name="e").effective_queue == f"{settings.LAKEWARDEN_HEAVY_QUEUE}.e"


def test_a_group_with_active_processes_is_not_deleted(test_plugin):
    _configure()
    table = _tables(["team.t"])[0]
    group = services.resource_group_create(name="team", tables=[table])
    process_create(table=table, action="touch")

    with pytest.raises(Conflict, match="resource group team has 1 active process"):
        services.resource_group_delete(group=group)


# --- budgets -------------------------------------------------------------------------------------


def test_the_scheduler_starts_no_more_than_the_concurrency_budget_and_says_what_it_held(test_plugin):
    _configure()
    tables = _tables(["small.a", "small.b", "small.c", "other.d"])
    small = services.resource_group_create(name="small", namespace_patterns=["small"], max_concurrency=1)

    report = schedule_tick()

    assert report.held == {"small": 2}
    created = {p.table_id: p.resource_group.name for p in Process.objects.select_related("resource_group")}
    assert created == {tables[0].pk: "small", tables[3].pk: DEFAULT_GROUP}
    small.refresh_from_db()
    assert small.held["by_action"] == {"touch": 2} and small.held["count"] == 2
    assert small.held["reason"] == (
        "resource group small is at its concurrency budget (1 of 1 processes active); it takes more as they finish"
    )
    # The held tables stay due: once the slot frees, the next tick takes the longest waiting (never
    # evaluated: b before c) and holds the rest again (c, and a, due again after its interval).
    Process.objects.filter(resource_group=small).update(
        status=ProcessStatus.SUCCESS, finished_at=timezone.now()
    )
    later = schedule_tick(now=timezone.now() + dt.timedelta(seconds=2))
    assert [Process.objects.get(pk=pk).table_id for pk in later.triggered] == [tables[1].pk]
    assert later.held == {"small": 2}


def test_a_process_is_sent_to_its_groups_queue(test_plugin, settings):
    _configure()
    table = _tables(["q.t"])[0]
    services.resource_group_create(name="q", namespace_patterns=["q"], queue="lw-test.q")

    process = process_create(table=table, action="touch")

    assert process.resource_group.name == "q"
    assert process_queue(process) == "lw-test.q"
    other = process_create(table=_tables(["unclaimed.t"])[0], action="touch")
    assert process_queue(other) == settings.LAKEWARDEN_HEAVY_QUEUE


def test_worker_seconds_count_only_the_part_of_each_run_inside_the_rolling_hour(test_plugin):
    _configure()
    table = _tables(["c.t"])[0]
    group = services.resource_group_create(name="c", namespace_patterns=["c"])
    now = timezone.now()
    rows = [
        (
            now - dt.timedelta(minutes=90),
            now - dt.timedelta(minutes=30),
            ProcessStatus.SUCCESS,
        ),  # 1800 s inside
        (now - dt.timedelta(minutes=20), now - dt.timedelta(minutes=10), ProcessStatus.FAILED),  # 600 s
        (now - dt.timedelta(minutes=150), now - dt.timedelta(minutes=70), ProcessStatus.SUCCESS),  # outside
        (now - dt.timedelta(minutes=5), None, ProcessStatus.RUNNING),  # 300 s so far
    ]
    Process.objects.bulk_create(
        Process(
            table=table,
            action=f"a{i}",
            factory="test-touch",
            status=status,
            started_at=start,
            finished_at=end,
            resource_group=group,
        )
        for i, (start, end, status) in enumerate(rows)
    )

    used = usage([group.pk], now=now)[group.pk]

    assert (used.active, round(used.seconds)) == (1, 2700)


def test_the_compute_budget_holds_back_scheduled_and_manual_runs(test_plugin):
    _configure()
    tables = _tables(["c.a", "c.b"])
    group = services.resource_group_create(name="c", namespace_patterns=["c"], compute_budget_seconds=600)
    now = timezone.now()
    Process.objects.create(
        table=tables[0],
        action="touch",
        factory="test-touch",
        status=ProcessStatus.SUCCESS,
        started_at=now - dt.timedelta(minutes=20),
        finished_at=now - dt.timedelta(minutes=10),
        resource_group=group,
    )

    report = schedule_tick()
    with pytest.raises(BudgetExhausted) as refused:
        process_create(table=tables[1], action="touch")

    assert report.triggered == [] and report.held == {"c": 2}
    assert refused.value.message == (
        "resource group c used 600 of its 600 worker-seconds in the last hour and the next run is expected "
        "to take 600; it takes more as older runs leave the rolling hour"
    )
    assert refused.value.status_code == 409
    assert Process.objects.filter(status=ProcessStatus.PENDING).count() == 0


def test_a_manual_run_into_a_full_group_is_a_conflict_and_an_automatic_retry_takes_the_failed_runs_slot(
    test_plugin,
):
    from processes.services import process_fail, transition

    _configure()
    tables = _tables(["f.a", "f.b"])
    services.resource_group_create(name="f", namespace_patterns=["f"], max_concurrency=1)
    first = process_create(table=tables[0], action="touch")

    with pytest.raises(BudgetExhausted, match="resource group f is at its concurrency budget \\(1 of 1"):
        process_create(table=tables[1], action="touch")
    transition(first, ProcessStatus.RUNNING, started_at=timezone.now())
    process_fail(process=first, reason="boom")

    retry = Process.objects.get(retry_of=first)
    assert (retry.trigger, retry.status, retry.resource_group.name) == (
        ProcessTrigger.AUTO_RETRY,
        "PENDING",
        "f",
    )


# --- concurrency: real Postgres, one connection per thread -----------------------------------------


def _at_once(count: int, work) -> list:
    barrier = threading.Barrier(count)
    results: list = [None] * count

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except Exception as error:  # noqa: BLE001 - the test reads what each thread met
            results[i] = error
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.django_db(transaction=True)
def test_manual_runs_at_once_never_exceed_the_concurrency_budget(test_plugin):
    _configure()
    tables = _tables([f"race.t{i}" for i in range(8)])
    group = services.resource_group_create(name="race", namespace_patterns=["race"], max_concurrency=3)

    results = _at_once(8, lambda i: process_create(table=tables[i], action="touch"))

    created = [r for r in results if isinstance(r, Process)]
    refused = [r for r in results if isinstance(r, BudgetExhausted)]
    assert (len(created), len(refused)) == (3, 5), results
    assert Process.objects.filter(resource_group=group, status__in=("PENDING", "RUNNING")).count() == 3


@pytest.mark.django_db(transaction=True)
def test_two_ticks_and_manual_runs_at_once_never_exceed_the_concurrency_budget(test_plugin):
    _configure()
    tables = _tables([f"race.t{i}" for i in range(12)])
    group = services.resource_group_create(name="race", namespace_patterns=["race"], max_concurrency=4)

    def work(i: int):
        if i < 2:
            return schedule_tick()
        return process_create(table=tables[11 - i], action="touch")

    results = _at_once(6, work)

    active = Process.objects.filter(resource_group=group, status="PENDING").count()
    assert active == 4, results
    ticks = [r for r in results[:2]]
    assert all(not isinstance(r, Exception) for r in ticks), ticks
    manual = results[2:]
    assert all(isinstance(r, Process | BudgetExhausted) for r in manual), manual
