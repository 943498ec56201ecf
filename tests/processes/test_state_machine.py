"""The process state machine: one table of allowed transitions, looked up by every change."""

from __future__ import annotations

import pytest

from processes import services
from processes.models import TERMINAL_STATUSES, TRANSITIONS, Process, ProcessStatus, statuses_leading_to
from storage import services as storage_services
from storage.errors import Conflict
from tests.console.tables import write_delta_table

pytestmark = pytest.mark.django_db


@pytest.fixture
def process(test_plugin, warehouse):
    table = storage_services.table_register(location=str(write_delta_table(warehouse / "orders", commits=2)))
    return services.process_create(table=table, action="touch")


def test_the_table_names_every_status_and_terminal_statuses_lead_nowhere():
    assert set(TRANSITIONS) == set(ProcessStatus.values)
    for status in TERMINAL_STATUSES:
        assert TRANSITIONS[status] == frozenset()
    assert set(statuses_leading_to(ProcessStatus.SUCCESS)) == {ProcessStatus.RUNNING, ProcessStatus.CANCELING}
    assert statuses_leading_to(ProcessStatus.PENDING) == (ProcessStatus.RUNNING,)


@pytest.mark.parametrize("terminal", sorted(TERMINAL_STATUSES))
@pytest.mark.parametrize("target", sorted(ProcessStatus.values))
def test_a_finished_process_never_changes_status(process, terminal, target):
    Process.objects.filter(pk=process.pk).update(status=terminal)

    with pytest.raises(Conflict, match=f"process {process.pk} is {terminal}; only .* can become {target}"):
        services.transition(process, target)
    assert Process.objects.get(pk=process.pk).status == terminal


def test_a_pending_process_cannot_succeed_without_running(process):
    with pytest.raises(Conflict, match="is PENDING; only RUNNING or CANCELING can become SUCCESS"):
        services.transition(process, ProcessStatus.SUCCESS)
    assert Process.objects.get(pk=process.pk).status == ProcessStatus.PENDING


def test_the_status_the_caller_saw_narrows_the_update(process):
    """A cancel that saw PENDING must not cancel a process a worker claimed meanwhile."""
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.RUNNING)

    with pytest.raises(Conflict, match="is RUNNING"):
        services.transition(process, ProcessStatus.CANCELED, current=ProcessStatus.PENDING)
    assert Process.objects.get(pk=process.pk).status == ProcessStatus.RUNNING


def test_a_terminal_transition_records_when_it_finished(process):
    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.RUNNING)

    done = services.transition(process, ProcessStatus.SUCCESS)

    assert done.status == ProcessStatus.SUCCESS and done.finished_at is not None


def test_stale_staging_of_finished_processes_is_swept_and_active_staging_kept(process):
    from processes.services import STAGING_FOLDER, clean_stale_staging, staging_dir

    old = Process.objects.create(
        table=process.table, action="other", factory="x", status=ProcessStatus.FAILED
    )
    for owner in (process, old):
        folder = staging_dir(owner)
        folder.mkdir(parents=True)
        (folder / "part-0.parquet").write_bytes(b"staged")
    unknown = staging_dir(process).parent / "process-999999"
    unknown.mkdir()

    removed = clean_stale_staging(process.table)

    assert removed == [str(staging_dir(old))]
    assert not staging_dir(old).exists()
    assert (staging_dir(process) / "part-0.parquet").read_bytes() == b"staged"
    assert unknown.exists()  # not this database's process: left alone
    unknown.rmdir()

    Process.objects.filter(pk=process.pk).update(status=ProcessStatus.KILLED)
    clean_stale_staging(process.table)
    assert not (staging_dir(process).parent.parent / STAGING_FOLDER).exists()
