"""Who may scrape ``/metrics``: a bearer token, an address allow-list, or both (both must hold).
A team's scrape token (issue 32) sees the series of the team's tables only.

Nothing configured is a 403 that says how to turn metrics on: the scrape shows every table's name,
so it is never open by default.

Environment (read by ``console/settings.py`` through ``metrics_token()`` and ``allowed_networks()``):
  LAKEWARDEN_METRICS_TOKEN        a bearer token (at least 16 characters) a scrape must send as
                                  ``Authorization: Bearer <token>``
  LAKEWARDEN_METRICS_ALLOWED_IPS  addresses or networks (``10.0.0.5, 10.1.0.0/16, ::1``) allowed
                                  to scrape, compared with the connection's address (REMOTE_ADDR)
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest

from console.env import env_str

REALM = 'Bearer realm="lakewarden-metrics"'
METRICS_TOKEN_MIN_LENGTH = 16


def metrics_token(name: str = "LAKEWARDEN_METRICS_TOKEN") -> str | None:
    token = env_str(name)
    if token is None:
        return None
    token = token.strip()
    if len(token) < METRICS_TOKEN_MIN_LENGTH or any(c.isspace() for c in token):
        raise ImproperlyConfigured(
            f"{name} must be at least {METRICS_TOKEN_MIN_LENGTH} characters without spaces "
            "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return token


def allowed_networks(name: str = "LAKEWARDEN_METRICS_ALLOWED_IPS") -> list[str]:
    """Normalised networks (``10.0.0.5/32``); a value that is no address or network stops start-up."""
    networks = []
    for part in (env_str(name) or "").replace(",", " ").split():
        try:
            networks.append(str(ipaddress.ip_network(part, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(
                f"{name}: {part!r} is not an IP address or network (use 10.0.0.5 or 10.0.0.0/24)"
            ) from None
    return networks


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    challenge: str = ""


@dataclass(frozen=True)
class Scope:
    """What a scrape may see: every series, or (``team_id``) the series of that team's tables."""

    team_id: int | None = None


def scrape_access(request: HttpRequest, *, team_of: Callable[[str], int | None]) -> Refusal | Scope:
    """What the request may scrape, or the status and reason to refuse it with. ``team_of(token)``
    names the team whose scrape token was sent (console/teams/access.py ``metrics_token_team``;
    tokens are made on the Teams page, in the API and by ``manage.py lakewarden_team NAME
    --metrics-token``): it scrapes that team's tables; the address allow-list holds for it too.
    (This module is read by the settings, before any model may be imported: hence the argument.)"""
    token = settings.LAKEWARDEN_METRICS_TOKEN
    networks = settings.LAKEWARDEN_METRICS_ALLOWED_IPS
    if networks and not address_allowed(request.META.get("REMOTE_ADDR", ""), networks):
        return Refusal(403, "this address may not scrape metrics (LAKEWARDEN_METRICS_ALLOWED_IPS)")
    sent = bearer_token(request)
    if sent is not None and not (token and hmac.compare_digest(sent.encode(), token.encode())):
        team_id = team_of(sent)
        if team_id is not None:
            return Scope(team_id)
    if not token and not networks:
        return Refusal(
            403,
            "metrics are not enabled: set LAKEWARDEN_METRICS_TOKEN (a bearer token) and/or "
            "LAKEWARDEN_METRICS_ALLOWED_IPS (addresses allowed to scrape), or make a team's token",
        )
    if token:
        if sent is None:
            return Refusal(401, "metrics need 'Authorization: Bearer <LAKEWARDEN_METRICS_TOKEN>'", REALM)
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return Refusal(401, "wrong metrics token", f'{REALM}, error="invalid_token"')
    return Scope()


def bearer_token(request: HttpRequest) -> str | None:
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def address_allowed(address: str, networks: list[str]) -> bool:
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return any(ip in ipaddress.ip_network(network) for network in networks)
