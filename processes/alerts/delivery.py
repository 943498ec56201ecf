"""Sending one delivery: a webhook's JSON body, a Slack-compatible ``{"text": ...}``, an e-mail
through Django's mail settings. Every attempt is recorded on the row; a failure is a row status
(retried with backoff up to ``LAKEWARDEN_ALERT_MAX_ATTEMPTS``), never an exception.

Webhooks go out through ``storage.outbound``: the name is resolved once per attempt, checked
(``LAKEWARDEN_ALERT_ALLOW_PRIVATE``, ``LAKEWARDEN_ALERT_ALLOWED_NETWORKS``) and the checked
address is the one connected to; a redirect is a failed attempt, never followed."""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from processes.alerts.models import AlertChannel, AlertDelivery, ChannelKind, DeliveryStatus
from storage import outbound
from storage.errors import InvalidInput


def webhook_policy() -> outbound.Policy:
    """The addresses a webhook may have: any, or only public ones and the allowed networks."""
    return outbound.Policy(
        allow_private=settings.LAKEWARDEN_ALERT_ALLOW_PRIVATE,
        allowed_networks=settings.LAKEWARDEN_ALERT_ALLOWED_NETWORKS,
        switch="LAKEWARDEN_ALERT_ALLOW_PRIVATE",
    )


def check_url(url: str) -> None:
    """An http(s) URL with a host whose addresses the webhook policy allows."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput("the URL must be http:// or https:// with a host", field="url")
    if settings.LAKEWARDEN_ALERT_ALLOW_PRIVATE:
        return
    try:
        outbound.resolve(parts.hostname, parts.port or 443, webhook_policy())
    except outbound.OutboundError as error:
        raise InvalidInput(str(error), field="url") from None


def check_channel(kind: str, url: str, recipients: str) -> None:
    """What a channel needs before it is saved (the API and the admin both call this)."""
    # ``str`` of a choice is its value (mypy, without Django's types, would take it for a tuple).
    if kind in (str(ChannelKind.WEBHOOK), str(ChannelKind.SLACK)):
        check_url(url)
    elif kind == str(ChannelKind.EMAIL):
        if not [address for address in recipients.split(",") if address.strip()]:
            raise InvalidInput("an e-mail channel needs at least one recipient", field="recipients")
    else:
        raise InvalidInput(f"unknown channel kind {kind!r}", field="kind")


def body(delivery: AlertDelivery) -> dict:
    if delivery.channel.kind == ChannelKind.SLACK:
        return {"text": f"*{delivery.title}*\n{delivery.text}"}
    episode = delivery.episode
    return {
        "event": delivery.event,
        "title": delivery.title,
        "text": delivery.text,
        "rule": episode.rule.name if episode else None,
        "kind": episode.rule.kind if episode else None,
        "subject": episode.subject if episode else None,
        "first_seen_at": episode.first_seen_at.isoformat() if episode else None,
        "sent_at": timezone.now().isoformat(),
    }


def send(delivery: AlertDelivery) -> None:
    """One attempt; raises on any failure (the caller records it)."""
    channel: AlertChannel = delivery.channel
    if channel.kind == ChannelKind.EMAIL:
        send_mail(delivery.title, delivery.text, None, channel.recipient_list, fail_silently=False)
        return
    timeout = float(settings.LAKEWARDEN_ALERT_TIMEOUT_SECONDS)
    with outbound.session(policy=webhook_policy(), timeout=(timeout, timeout)) as http:
        response = http.post(
            channel.url,
            json=body(delivery),
            headers={"User-Agent": "lakewarden-alerts"},
            allow_redirects=False,
        )
    if not 200 <= response.status_code < 300:
        raise outbound.OutboundError(f"{outbound.where(channel.url)} answered HTTP {response.status_code}")


def attempt_delivery(delivery_id: int) -> int | None:
    """Try a pending delivery once and record it. Returns the countdown (seconds) before the next
    attempt when it should be retried, else None (sent, failed for good, or not pending)."""
    delivery = (
        AlertDelivery.objects.select_related("channel", "episode__rule")
        .filter(pk=delivery_id, status=DeliveryStatus.PENDING)
        .first()
    )
    if delivery is None:
        return None
    delivery.attempts += 1
    delivery.last_attempt_at = timezone.now()
    try:
        send(delivery)
    except Exception as error:  # noqa: BLE001 - any failure is a recorded status, never a crash
        delivery.last_error = f"{type(error).__name__}: {error}"[:2000]
        retry = delivery.attempts < settings.LAKEWARDEN_ALERT_MAX_ATTEMPTS and not isinstance(
            error, InvalidInput | outbound.TargetRefused
        )
        delivery.status = DeliveryStatus.PENDING if retry else DeliveryStatus.FAILED
        delivery.save(update_fields=["attempts", "last_attempt_at", "last_error", "status"])
        return settings.LAKEWARDEN_ALERT_BACKOFF_SECONDS * 2 ** (delivery.attempts - 1) if retry else None
    delivery.status = DeliveryStatus.SENT
    delivery.last_error = ""
    delivery.save(update_fields=["attempts", "last_attempt_at", "last_error", "status"])
    return None
