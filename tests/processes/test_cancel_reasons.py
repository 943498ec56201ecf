"""What a cancelled or killed process says (issue 29, item 22): one clean line, never the error the
cancel interrupted (a Spark job's 40-line Java stack trace stays in the worker's log), and a kill
whose cancel took effect says that it did."""

from __future__ import annotations

import threading

import pytest

from processes import services
from processes.executor import run_process
from processes.models import Process, ProcessStatus
from tests.processes.test_executor import _reload, _wait_for, delta_table  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)

JAVA_TRACE = (
    "py4j.protocol.Py4JJavaError: An error occurred while calling o123.collectToPython.\n"
    + "\n".join(
        f"\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:{n})"
        for n in range(40)
    )
)


def test_a_cancel_that_interrupts_a_spark_job_reads_as_one_line_without_the_stack_trace(
    test_plugin, delta_table, monkeypatch, caplog
):
    from lakewarden_test_plugin import TouchProcess

    def interrupted(self, context):
        # What a cancelled Spark job does: the cancel is requested, the action raises Java's error.
        Process.objects.filter(pk=context.process_id).update(cancel_requested=True)
        raise RuntimeError(JAVA_TRACE)

    monkeypatch.setattr(TouchProcess, "run", interrupted)
    process = services.process_create(table=delta_table, action="touch")

    assert run_process(process.pk) == ProcessStatus.CANCELED

    process = _reload(process)
    assert process.failure == "cancelled by an operator"
    assert "DAGScheduler" in caplog.text  # the detail is kept in the log
    assert not Process.objects.filter(retry_of=process).exists()


def test_a_kill_whose_cancel_took_effect_says_so(test_plugin, delta_table, settings):
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 1
    process = services.process_create(table=delta_table, action="touch", params={"seconds": 30})
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(status=run_process(process.pk)))
    runner.start()
    _wait_for(lambda: _reload(process).status == ProcessStatus.RUNNING and process.progress_done > 0)

    services.process_kill(process=_reload(process), grace_seconds=120)
    runner.join(timeout=15)

    process = _reload(process)
    assert outcome["status"] == process.status == ProcessStatus.CANCELED
    assert process.failure == (
        "killed by an operator: the kill's cancel took effect within the grace period (no task terminated)"
    )


def test_a_plain_cancel_still_reads_cancelled_by_an_operator(test_plugin, delta_table, settings):
    settings.LAKEWARDEN_HEARTBEAT_SECONDS = 1
    process = services.process_create(table=delta_table, action="touch", params={"seconds": 30})
    runner = threading.Thread(target=lambda: run_process(process.pk))
    runner.start()
    _wait_for(lambda: _reload(process).status == ProcessStatus.RUNNING and process.progress_done > 0)

    services.process_cancel(process=_reload(process))
    runner.join(timeout=15)

    assert _reload(process).failure == "cancelled by an operator"
