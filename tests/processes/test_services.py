"""Process life through the services: create, cancel, kill, retry, with every illegal move refused."""

from __future__ import annotations

import pytest

from processes import services
from processes.models import Process, ProcessStatus, ProcessTrigger
from processes.registry import PluginConflict, configured_factories, coordinators
from storage import services as console_services
from storage.errors import Conflict, InvalidInput
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def delta_table(warehouse):
    return console_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=3)))


def test_a_third_party_factory_is_discovered_through_its_entry_points(test_plugin):
    names = {c.name for c in configured_factories(include_disabled=True)}

    assert {"test-touch", "test-touch-twin"} <= names
    assert coordinators()[("delta", "touch")].name == "test-touch"


def test_two_enabled_factories_claiming_one_pair_is_an_error_naming_both(test_plugin):
    from processes.models import PluginConfig

    configured_factories()  # creates the configuration rows
    PluginConfig.objects.filter(name="test-touch-twin").update(enabled=True)

    with pytest.raises(PluginConflict, match="'test-touch'.*'test-touch-twin'.*touch"):
        coordinators()


def test_creating_a_process_stores_it_pending_with_the_factory_and_params(test_plugin, delta_table, operator):
    process = services.process_create(table=delta_table, action="touch", params={"seconds": 1}, user=operator)

    assert process.status == ProcessStatus.PENDING
    assert process.factory == "test-touch"
    assert process.params == {"seconds": 1}
    assert process.trigger == ProcessTrigger.MANUAL
    assert process.requested_by == operator


def test_an_action_the_format_does_not_offer_is_refused_naming_what_is_offered(test_plugin, delta_table):
    with pytest.raises(InvalidInput, match="'compact-everything'.*available: .*touch") as refused:
        services.process_create(table=delta_table, action="compact-everything")
    assert refused.value.field == "action"
    assert Process.objects.count() == 0


def test_params_failing_the_factory_schema_are_refused_with_the_param_named(test_plugin, delta_table):
    with pytest.raises(InvalidInput, match="seconds") as refused:
        services.process_create(table=delta_table, action="touch", params={"seconds": -5})
    assert refused.value.field == "params"
    with pytest.raises(InvalidInput, match="Additional properties"):
        services.process_create(table=delta_table, action="touch", params={"bogus": 1})
    assert Process.objects.count() == 0


def test_a_second_active_process_for_the_same_table_and_action_is_a_conflict(test_plugin, delta_table):
    first = services.process_create(table=delta_table, action="touch")

    with pytest.raises(Conflict, match=f"#{first.pk} is PENDING"):
        services.process_create(table=delta_table, action="touch")
    assert Process.objects.count() == 1


def test_cancelling_a_pending_process_cancels_it_at_once(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")

    process = services.process_cancel(process=process)

    assert process.status == ProcessStatus.CANCELED
    assert process.finished_at is not None


def test_cancelling_a_running_process_asks_it_to_stop(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.RUNNING)
    process.refresh_from_db()

    process = services.process_cancel(process=process)

    assert process.status == ProcessStatus.CANCELING
    assert process.cancel_requested is True


@pytest.mark.parametrize("status", [ProcessStatus.SUCCESS, ProcessStatus.FAILED, ProcessStatus.KILLED])
def test_cancelling_a_finished_process_is_a_conflict_that_says_why(test_plugin, delta_table, status):
    process = services.process_create(table=delta_table, action="touch")
    Process.objects.filter(pk=process.pk).update(status=status)
    process.refresh_from_db()

    with pytest.raises(
        Conflict, match=f"process {process.pk} is {status}; only RUNNING or PENDING can be cancelled"
    ):
        services.process_cancel(process=process)
    process.refresh_from_db()
    assert process.status == status


def test_killing_a_finished_process_is_a_conflict(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.SUCCESS)
    process.refresh_from_db()

    with pytest.raises(Conflict, match="is SUCCESS"):
        services.process_kill(process=process)


def test_killing_a_running_process_marks_it_canceling_with_a_deadline(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.RUNNING)
    process.refresh_from_db()

    process = services.process_kill(process=process, grace_seconds=30)

    assert process.status == ProcessStatus.CANCELING
    assert process.cancel_requested and process.kill_deadline is not None


def test_enforcing_a_kill_records_killed_and_cleans_staging(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.CANCELING, cancel_requested=True)
    staging = services.staging_dir(process)
    staging.mkdir(parents=True)
    (staging / "part-0.parquet").write_bytes(b"half written")

    process = services.process_enforce_kill(process_id=process.pk)

    assert process.status == ProcessStatus.KILLED
    assert not staging.exists()


def test_retrying_a_successful_process_is_a_conflict(test_plugin, delta_table):
    process = services.process_create(table=delta_table, action="touch")
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.SUCCESS)
    process.refresh_from_db()

    with pytest.raises(Conflict, match="only FAILED, CANCELED or KILLED"):
        services.process_retry(process=process)
    assert Process.objects.count() == 1


def test_retrying_a_failed_process_creates_a_linked_attempt(test_plugin, delta_table, operator):
    process = services.process_create(table=delta_table, action="touch", params={"seconds": 2})
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.FAILED)
    process.refresh_from_db()

    retry = services.process_retry(process=process, user=operator)

    assert retry.retry_of == process
    assert retry.attempt == 2
    assert retry.params == {"seconds": 2}
    assert retry.trigger == ProcessTrigger.RETRY
    assert [p.pk for p in retry.attempts_chain()] == [process.pk, retry.pk]
    with pytest.raises(Conflict, match=f"already retried as #{retry.pk}"):
        services.process_retry(process=process)


def test_a_failure_retries_automatically_with_backoff_until_the_budget_is_spent(
    test_plugin, delta_table, settings
):
    settings.LAKEWARDEN_RETRY_BACKOFF_SECONDS = 10
    process = services.process_create(table=delta_table, action="touch")
    process.max_retries = 2
    process.save()
    chain = [process]
    for _ in range(3):
        Process.objects.filter(pk=chain[-1].pk).update(status=ProcessStatus.RUNNING)
        chain[-1].refresh_from_db()
        services.process_fail(process=chain[-1], reason="boom")
        newest = Process.objects.order_by("-pk").first()
        if newest.pk != chain[-1].pk:
            chain.append(newest)

    assert [p.attempt for p in chain] == [1, 2, 3]
    assert all(p.trigger == ProcessTrigger.AUTO_RETRY for p in chain[1:])
    backoffs = [(p.not_before - p.created_at).total_seconds() for p in chain[1:]]
    assert 9 <= backoffs[0] <= 11 and 19 <= backoffs[1] <= 21
    assert (
        Process.objects.filter(status=ProcessStatus.FAILED).count() == 3
    )  # the third failure spent the budget
