"""Channel and rule changes and the "send test" action, shared by the API, the console page and the
admin. Which team a user may give a channel or rule is the surface's to check (console/teams);
here a team's rule is held to what a team watches: its tables, through its own channels."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction

from processes.alerts.delivery import attempt_delivery, check_channel
from processes.alerts.models import (
    TABLE_KINDS,
    AlertChannel,
    AlertDelivery,
    AlertRule,
    DeliveryEvent,
    DeliveryStatus,
    RuleKind,
)
from storage.errors import Conflict, InvalidInput


def channel_create(
    *,
    name: str,
    kind: str,
    url: str = "",
    recipients: str = "",
    enabled: bool = True,
    team_id: int | None = None,
) -> AlertChannel:
    check_channel(kind, url, recipients)
    try:
        with transaction.atomic():
            return AlertChannel.objects.create(
                name=name, kind=kind, url=url, recipients=recipients, enabled=enabled, team_id=team_id
            )
    except IntegrityError:
        raise Conflict(f"an alert channel named {name!r} exists") from None


CHANNEL_CHANGES = ("name", "kind", "url", "recipients", "enabled")


def channel_update(*, channel: AlertChannel, **changes: Any) -> AlertChannel:
    """Change a channel's ``name``, ``kind``, ``url``, ``recipients`` or ``enabled`` (a channel
    that is off receives nothing, tests aside); its team stays (its rules send to it as the
    team's). Checked as a new channel is; nothing is saved when refused."""
    unknown = sorted(set(changes) - set(CHANNEL_CHANGES))
    if unknown:
        raise InvalidInput(f"a channel's {', '.join(unknown)} cannot be changed", field=unknown[0])
    merged = {key: changes.get(key, getattr(channel, key)) for key in ("kind", "url", "recipients")}
    check_channel(merged["kind"], merged["url"], merged["recipients"])
    try:
        with transaction.atomic():
            AlertChannel.objects.filter(pk=channel.pk).update(**changes)
    except IntegrityError:
        raise Conflict(f"an alert channel named {changes.get('name')!r} exists") from None
    for key, value in changes.items():
        setattr(channel, key, value)
    return channel


def channel_delete(*, channel: AlertChannel) -> None:
    """Delete a channel with its delivery record; a rule that named only it sends to every
    enabled channel (of the rule's team) from then on."""
    channel.delete()


def channel_send_test(*, channel: AlertChannel) -> AlertDelivery:
    """One attempt now (no retry: the person who pressed the button sees the answer), recorded."""
    delivery = AlertDelivery.objects.create(
        channel=channel,
        event=DeliveryEvent.TEST,
        title=f"[Lakewarden] test of channel {channel.name}",
        text="This is a test alert sent from Lakewarden: the channel works.",
    )
    if attempt_delivery(delivery.pk) is not None:
        AlertDelivery.objects.filter(pk=delivery.pk).update(status=DeliveryStatus.FAILED)
    delivery.refresh_from_db()
    return delivery


def rule_check(kind: str, team_id: int | None, channels: list[AlertChannel]) -> None:
    """What a rule must be (the API and the admin both ask): a team's watches tables and sends to
    the team's own channels."""
    if kind not in RuleKind.values:
        raise InvalidInput(
            f"unknown rule kind {kind!r}; kinds are {', '.join(RuleKind.values)}", field="kind"
        )
    if team_id is None:
        return
    if kind not in TABLE_KINDS:
        raise InvalidInput(
            f"a team's rule watches the team's tables: its kind is one of {', '.join(TABLE_KINDS)}",
            field="kind",
        )
    foreign = sorted(channel.name for channel in channels if channel.team_id != team_id)
    if foreign:
        raise InvalidInput(
            f"a team's rule sends to the team's own channels only, not to {', '.join(foreign)}",
            field="channels",
        )


def rule_create(
    *,
    name: str,
    kind: str,
    enabled: bool = True,
    threshold: int = 60,
    minutes: int = 0,
    channels: Iterable[AlertChannel] = (),
    team_id: int | None = None,
) -> AlertRule:
    """A rule; a team's (``team_id``) watches the team's tables and sends to its channels."""
    chosen = list(channels)
    rule_check(kind, team_id, chosen)
    try:
        with transaction.atomic():
            rule = AlertRule.objects.create(
                name=name, kind=kind, enabled=enabled, threshold=threshold, minutes=minutes, team_id=team_id
            )
            rule.channels.set(chosen)
    except IntegrityError:
        raise Conflict(f"an alert rule named {name!r} exists") from None
    return rule


def rule_update(
    *, rule: AlertRule, channels: Iterable[AlertChannel] | None = None, **changes: Any
) -> AlertRule:
    """Change ``enabled``, ``threshold``, ``minutes`` (and the channels, when given); the kind and
    the team stay what they were."""
    unknown = sorted(set(changes) - {"enabled", "threshold", "minutes"})
    if unknown:
        raise InvalidInput(f"a rule's {', '.join(unknown)} cannot be changed", field=unknown[0])
    chosen = list(channels) if channels is not None else list(rule.channels.all())
    rule_check(rule.kind, rule.team_id, chosen)
    with transaction.atomic():
        for key, value in changes.items():
            setattr(rule, key, value)
        rule.save()
        if channels is not None:
            rule.channels.set(chosen)
    return rule


def rule_delete(*, rule: AlertRule) -> None:
    """Delete a rule with its episodes (and their deliveries)."""
    rule.delete()
