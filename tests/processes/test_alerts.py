"""Alert rules against a real local HTTP receiver: one failing episode fires exactly one alert and,
once cleared, exactly one resolve; a rule with ``minutes`` waits; a 500-answering endpoint gets
retried with recorded attempts and then a failed status; e-mail through Django's locmem backend.
The beat task's function runs directly (no worker); deliveries are attempted like the task does."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core import mail
from django.utils import timezone

from processes.alerts.delivery import attempt_delivery
from processes.alerts.evaluation import evaluate_alerts
from processes.alerts.models import AlertChannel, AlertDelivery, AlertEpisode, AlertRule
from processes.models import Process, ProcessStatus, ProcessTrigger, ServiceHeartbeat
from storage.models import CachedResult, CachedResultState, StorageBackend, Table
from tests.processes.test_alerts_receiver import closed_port_url, receiver  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def deliver_all(ids: list[int]) -> None:
    """What the delivery task does, without a worker: attempt until sent or failed for good."""
    for delivery_id in ids:
        while attempt_delivery(delivery_id) is not None:
            pass


def tick(now: dt.datetime | None = None) -> list[int]:
    ids = evaluate_alerts(now)
    deliver_all(ids)
    return ids


def make_table(name: str = "orders", **facts) -> Table:
    return Table.objects.create(name=name, format="iceberg", location=f"/lake/{name}", **facts)


def failed(table: Table, *, attempt: int, max_retries: int = 3, retry_of=None, **extra) -> Process:
    return Process.objects.create(
        table=table,
        action="compact",
        factory="test",
        status=ProcessStatus.FAILED,
        trigger=ProcessTrigger.AUTO_RETRY if retry_of else ProcessTrigger.SCHEDULE,
        attempt=attempt,
        max_retries=max_retries,
        retry_of=retry_of,
        failure="disk on fire",
        finished_at=timezone.now(),
        **extra,
    )


@pytest.fixture
def webhook(receiver):
    return AlertChannel.objects.create(name="hook", kind="webhook", url=receiver.url())


def rule(kind: str, channel: AlertChannel, **options) -> AlertRule:
    created = AlertRule.objects.create(name=kind.replace("_", "-"), kind=kind, **options)
    created.channels.add(channel)
    return created


def test_a_failed_process_fires_once_per_episode_and_resolves_once(receiver, webhook):
    rule("process_failed", webhook)
    table = make_table()
    first = failed(table, attempt=1)
    assert tick() == []  # a retry will follow: not yet an alert
    last = failed(table, attempt=4, retry_of=first)
    tick()
    tick()  # still failing: no second alert for the same episode
    assert [body["event"] for body in receiver.bodies()] == ["opened"]
    opened = receiver.bodies()[0]
    assert opened["subject"] == f"process:{table.pk}:compact"
    assert opened["rule"] == "process-failed" and opened["kind"] == "process_failed"
    assert f"process #{last.pk}" in opened["text"] and "disk on fire" in opened["text"]
    assert receiver.requests[0]["type"] == "application/json"

    Process.objects.create(
        table=table,
        action="compact",
        factory="test",
        status=ProcessStatus.SUCCESS,
        finished_at=timezone.now(),
    )
    tick()
    tick()
    assert [body["event"] for body in receiver.bodies()] == ["opened", "resolved"]
    assert receiver.bodies()[1]["text"].startswith("resolved: ")
    episode = AlertEpisode.objects.get()
    assert episode.fired_at is not None and episode.resolved_at is not None
    assert list(AlertDelivery.objects.order_by("id").values_list("event", "status", "attempts")) == [
        ("opened", "sent", 1),
        ("resolved", "sent", 1),
    ]


def test_a_process_marked_not_retryable_alerts_on_its_first_attempt(receiver, webhook):
    rule("process_failed", webhook)
    failed(make_table(), attempt=1, summary={"retryable": False})
    tick()
    assert [body["event"] for body in receiver.bodies()] == ["opened"]


def test_health_below_par_alerts_only_after_the_minutes_and_resolves(receiver, webhook):
    rule("table_health", webhook, threshold=60, minutes=10)
    table = make_table(file_count=1000, small_file_count=1000, compactable_file_count=1000, instant_count=600)
    start = timezone.now()
    assert tick(start) == []  # seen, not yet long enough
    assert AlertEpisode.objects.get().fired_at is None
    assert tick(start + dt.timedelta(minutes=9)) == []
    tick(start + dt.timedelta(minutes=10))
    tick(start + dt.timedelta(minutes=11))
    assert [body["event"] for body in receiver.bodies()] == ["opened"]
    assert receiver.bodies()[0]["subject"] == f"table:{table.pk}"
    assert (
        "100% of 1,000 files are small and compactable: rewrite would fix it" in receiver.bodies()[0]["text"]
    )

    Table.objects.filter(pk=table.pk).update(
        small_file_count=0, instant_count=1, last_maintenance_at=timezone.now()
    )
    tick(start + dt.timedelta(minutes=12))
    assert [body["event"] for body in receiver.bodies()] == ["opened", "resolved"]


def test_a_short_episode_that_never_fired_resolves_silently(receiver, webhook):
    rule("table_health", webhook, threshold=60, minutes=10)
    table = make_table(file_count=1000, small_file_count=1000, compactable_file_count=1000, instant_count=600)
    tick()
    Table.objects.filter(pk=table.pk).update(small_file_count=0)
    tick()
    assert receiver.requests == []
    assert AlertEpisode.objects.get().resolved_at is not None


def test_a_silent_beat_alerts_and_resolves_when_it_ticks_again(receiver, webhook):
    rule("service_silent", webhook)
    ServiceHeartbeat.objects.update_or_create(
        name="beat", defaults={"last_seen": timezone.now() - dt.timedelta(hours=1)}
    )
    tick()
    beat = [body for body in receiver.bodies() if body["subject"] == "service:beat"]
    assert [body["event"] for body in beat] == ["opened"]
    assert "beat scheduler is silent" in beat[0]["text"]
    ServiceHeartbeat.objects.filter(name="beat").update(last_seen=timezone.now())
    tick()
    beat = [body for body in receiver.bodies() if body["subject"] == "service:beat"]
    assert [body["event"] for body in beat] == ["opened", "resolved"]


def test_a_storage_over_quota_alerts(receiver, webhook):
    rule("storage_quota", webhook)
    backend = StorageBackend.objects.create(name="results", type="local", quota_bytes=1000)
    for size, state in ((800, CachedResultState.READY), (300, CachedResultState.READY), (9000, "INVALID")):
        CachedResult.objects.create(
            fingerprint=f"f{size}", backend=backend, name="r", sql="select 1", size_bytes=size, state=state
        )
    tick()
    assert [(body["event"], body["subject"]) for body in receiver.bodies()] == [("opened", "storage:results")]
    assert "holds 1,100 bytes, over its quota of 1,000" in receiver.bodies()[0]["text"]


def test_a_500_endpoint_is_retried_with_backoff_then_failed(receiver, webhook, settings):
    settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS = 3
    settings.LAKEWARDEN_ALERT_BACKOFF_SECONDS = 7
    receiver.status = 500
    rule("process_failed", webhook)
    failed(make_table(), attempt=4)
    [delivery_id] = evaluate_alerts()
    countdowns = [attempt_delivery(delivery_id) for _ in range(3)]
    assert countdowns == [7, 14, None]
    assert attempt_delivery(delivery_id) is None  # failed for good: not tried again
    delivery = AlertDelivery.objects.get(pk=delivery_id)
    assert (delivery.status, delivery.attempts) == ("failed", 3)
    assert "500" in delivery.last_error
    assert len(receiver.requests) == 3


def test_an_unreachable_endpoint_is_a_failed_delivery_not_an_exception(closed_port_url, settings):
    settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS = 2
    channel = AlertChannel.objects.create(name="gone", kind="webhook", url=closed_port_url)
    rule("process_failed", channel)
    failed(make_table(), attempt=4)
    tick()
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 2)
    assert "OutboundError" in delivery.last_error and "refused" in delivery.last_error.lower()


def test_a_private_target_is_refused_at_send_time_when_the_switch_is_off(receiver, webhook, settings):
    rule("process_failed", webhook)
    failed(make_table(), attempt=4)
    settings.LAKEWARDEN_ALERT_ALLOW_PRIVATE = False
    tick()
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 1)  # no retry: it cannot succeed
    assert "private network" in delivery.last_error
    assert receiver.requests == []


def test_email_and_slack_channels(receiver, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    mailbox = AlertChannel.objects.create(
        name="ops-mail", kind="email", recipients="ops@example.org, b@example.org"
    )
    slack = AlertChannel.objects.create(name="slack", kind="slack", url=receiver.url("/slack"))
    AlertRule.objects.create(name="failures", kind="process_failed")  # no channel chosen: all enabled
    AlertChannel.objects.create(name="off", kind="webhook", url=receiver.url("/off"), enabled=False)
    failed(make_table("events"), attempt=4)
    tick()
    assert len(mail.outbox) == 1
    assert mail.outbox[0].to == ["ops@example.org", "b@example.org"]
    assert mail.outbox[0].subject == f"[Lakewarden FIRING] failures: process:{Table.objects.get().pk}:compact"
    assert "compact on events failed" in mail.outbox[0].body
    assert [request["path"] for request in receiver.requests] == ["/slack"]
    [text] = receiver.bodies()[0].values()
    assert text.startswith("*[Lakewarden FIRING] failures:") and "compact on events failed" in text
    assert AlertDelivery.objects.filter(status="sent").count() == 2
    assert {d.channel for d in AlertDelivery.objects.all()} == {mailbox, slack}


@pytest.fixture
def eager_celery():
    """Tasks run in-process when sent (countdowns ignored): the beat task's whole chain, no worker."""
    from console.celery import app

    before = app.conf.task_always_eager
    app.conf.task_always_eager = True
    yield app
    app.conf.task_always_eager = before


def test_the_beat_task_sends_and_retries_through_the_delivery_task(receiver, webhook, settings, eager_celery):
    from processes.alerts.tasks import evaluate_alerts_task

    settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS = 3
    receiver.status = 502
    rule("process_failed", webhook)
    failed(make_table(), attempt=4)
    evaluate_alerts_task()
    delivery = AlertDelivery.objects.get()
    assert (delivery.status, delivery.attempts) == ("failed", 3)
    assert len(receiver.requests) == 3
    evaluate_alerts_task()  # same episode: nothing new
    assert AlertDelivery.objects.count() == 1 and len(receiver.requests) == 3
