"""Alert rules evaluated on the beat tick (light queue): each rule names its subjects in trouble now;
an episode opens per (rule, subject), fires once when the condition has held ``minutes``, and
resolves (with a resolve message when it had fired) once the subject is out of trouble. Deliveries
are rows sent by ``processes.alerts.tasks.deliver_alert_task`` after the tick's transaction commits;
the tick itself is ``processes.alerts.tasks.evaluate_alerts_task``. The health ranking and the
liveness the rules read are processes/health.py's, as the console's overview shows them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, OuterRef, Q, Sum
from django.utils import timezone

from processes.alerts.models import (
    AlertChannel,
    AlertDelivery,
    AlertEpisode,
    AlertRule,
    DeliveryEvent,
    DeliveryStatus,
    RuleKind,
)
from processes.groups.capacity import groups_without_workers, recent_workers
from processes.health import liveness, tables_by_health
from processes.models import Process, ProcessStatus
from storage.access import tables_of_team
from storage.models import CachedResultState, StorageBackend

#: How far back the process rule looks for the last finished run of each (table, action).
PROCESS_LOOKBACK = dt.timedelta(days=7)


def failed_processes(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    """(table, action) pairs whose last finished run FAILED with no retry to follow: its retry
    budget is spent (attempt - 1 >= max_retries) or its summary says ``"retryable": false``."""
    retried = Process.objects.filter(retry_of=OuterRef("pk"))
    finished = Process.objects.filter(
        status__in=(ProcessStatus.SUCCESS, ProcessStatus.FAILED), finished_at__gte=now - PROCESS_LOOKBACK
    )
    if rule.team_id is not None:
        finished = finished.filter(table__in=tables_of_team(rule.team_id).values("pk"))
    latest = (
        finished.order_by("table_id", "action", "-finished_at", "-id")
        .distinct("table_id", "action")
        .select_related("table")
        .annotate(retried=Exists(retried))
    )
    found = {}
    for process in latest:
        if process.status != ProcessStatus.FAILED or process.retried:
            continue
        spent = (
            process.attempt - 1 >= process.max_retries or (process.summary or {}).get("retryable") is False
        )
        if spent:
            found[f"process:{process.table_id}:{process.action}"] = (
                f"{process.action} on {process.table.name} failed (process #{process.pk}, attempt "
                f"{process.attempt}, no retry left): {process.failure[:500]}"
            )
    return found


def unhealthy_tables(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    found = {}
    tables = tables_of_team(rule.team_id) if rule.team_id is not None else None
    for health in tables_by_health(limit=None, tables=tables):
        if health.score < rule.threshold:
            break  # unhealthiest first
        reasons = "; ".join(health.reasons) or "no reason given"
        found[f"table:{health.table.pk}"] = (
            f"table {health.table.name} has health score {health.score} (threshold {rule.threshold}): {reasons}"
        )
    return found


def silent_services(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    alive = liveness()
    found = {}
    if not alive["beat_alive"]:
        seen = alive["beat"].last_seen.isoformat() if alive["beat"] else "never"
        found["service:beat"] = f"the beat scheduler is silent (last seen {seen})"
    if not alive["workers"].get("ok"):
        found["service:workers"] = f"no Celery worker answers: {alive['workers'].get('detail', '')}"
    else:  # some answer: is every resource group's queue consumed by one of them?
        for name, message in groups_without_workers(recent_workers()).items():
            found[f"service:group:{name}"] = message
    return found


def storages_over_quota(rule: AlertRule, now: dt.datetime) -> dict[str, str]:
    kept = Sum("results__size_bytes", filter=Q(results__state=CachedResultState.READY))
    found = {}
    for name, quota, used in (
        StorageBackend.objects.filter(quota_bytes__gt=0)
        .annotate(used=kept)
        .values_list("name", "quota_bytes", "used")
    ):
        if (used or 0) > quota:
            found[f"storage:{name}"] = (
                f"result storage {name} holds {used:,} bytes, over its quota of {quota:,}"
            )
    return found


#: The evaluator of each rule kind, keyed by the kind's value (``str`` of a choice is its value;
#: mypy, without Django's types, would take a labelled choice for its (value, label) tuple).
EVALUATORS: dict[str, Callable[[AlertRule, dt.datetime], dict[str, str]]] = {
    str(RuleKind.PROCESS_FAILED): failed_processes,
    str(RuleKind.TABLE_HEALTH): unhealthy_tables,
    str(RuleKind.SERVICE_SILENT): silent_services,
    str(RuleKind.STORAGE_QUOTA): storages_over_quota,
}


def subject_table_id(subject: str) -> int | None:
    """The table an episode's subject is about (``table:8``, ``process:8:rewrite``), else None."""
    kind, _, rest = subject.partition(":")
    pk = rest.partition(":")[0]
    return int(pk) if kind in ("table", "process") and pk.isdigit() else None


def channels_for(rule: AlertRule, subject: str) -> list[AlertChannel]:
    """The enabled channels an episode of ``rule`` on ``subject`` goes to: the rule's own, else
    every channel (of the rule's team, for a team's rule); a team's channel only when the subject
    is a table the team's grants cover (a team hears of its tables only, whoever's rule fired)."""
    chosen = list(rule.channels.filter(enabled=True))
    if not chosen:
        every = AlertChannel.objects.filter(enabled=True)
        chosen = list(every.filter(team_id=rule.team_id) if rule.team_id is not None else every)
    table_id = subject_table_id(subject)
    teams = {channel.team_id for channel in chosen if channel.team_id is not None}
    hearing = {
        team_id
        for team_id in teams
        if table_id is not None and tables_of_team(team_id).filter(pk=table_id).exists()
    }
    return [channel for channel in chosen if channel.team_id is None or channel.team_id in hearing]


def _deliveries(rule: AlertRule, episode: AlertEpisode, event: str) -> list[int]:
    channels = channels_for(rule, episode.subject)
    verb = "FIRING" if event == DeliveryEvent.OPENED else "RESOLVED"
    title = f"[Lakewarden {verb}] {rule.name}: {episode.subject}"
    text = episode.message if event == DeliveryEvent.OPENED else f"resolved: {episode.message}"
    rows = AlertDelivery.objects.bulk_create(
        AlertDelivery(channel=channel, episode=episode, event=event, title=title, text=text)
        for channel in channels
    )
    return [row.pk for row in rows]


def evaluate_rule(rule: AlertRule, now: dt.datetime) -> list[int]:
    """Open, fire and resolve the rule's episodes; the ids of the deliveries to send."""
    in_trouble = EVALUATORS[rule.kind](rule, now)
    open_episodes = {e.subject: e for e in AlertEpisode.objects.filter(rule=rule, resolved_at__isnull=True)}
    to_send: list[int] = []
    for subject, message in in_trouble.items():
        episode = open_episodes.get(subject)
        if episode is None:
            episode = AlertEpisode.objects.create(
                rule=rule, subject=subject, message=message, first_seen_at=now
            )
        if episode.fired_at is None and now - episode.first_seen_at >= dt.timedelta(minutes=rule.minutes):
            episode.fired_at, episode.message = now, message
            episode.save(update_fields=["fired_at", "message"])
            to_send += _deliveries(rule, episode, DeliveryEvent.OPENED)
    for subject, episode in open_episodes.items():
        if subject not in in_trouble:
            episode.resolved_at = now
            episode.save(update_fields=["resolved_at"])
            if episode.fired_at is not None:
                to_send += _deliveries(rule, episode, DeliveryEvent.RESOLVED)
    return to_send


def stalled_deliveries(now: dt.datetime) -> list[int]:
    """Pending deliveries no task holds any more (a broker that was down, a lost task): older than
    the longest backoff plus a minute."""
    longest = settings.LAKEWARDEN_ALERT_BACKOFF_SECONDS * 2**settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS + 60
    since = now - dt.timedelta(seconds=longest)
    pending = AlertDelivery.objects.filter(status=DeliveryStatus.PENDING)
    stale = pending.filter(
        Q(last_attempt_at__lt=since) | Q(last_attempt_at__isnull=True, created_at__lt=since)
    )
    return list(stale.values_list("pk", flat=True)[:500])


def evaluate_alerts(now: dt.datetime | None = None) -> list[int]:
    """One tick over every enabled rule; returns the deliveries to send (the task sends them)."""
    now = now or timezone.now()
    to_send = stalled_deliveries(now)
    for rule in AlertRule.objects.filter(enabled=True).prefetch_related("channels"):
        with transaction.atomic():
            to_send += evaluate_rule(rule, now)
    return to_send
