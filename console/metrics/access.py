"""Who may scrape ``/metrics``: a bearer token, an address allow-list, or both (both must hold).

Nothing configured is a 403 that says how to turn metrics on: the scrape shows every table's name,
so it is never open by default.
"""

from __future__ import annotations

import hmac
import ipaddress
from dataclasses import dataclass

from django.conf import settings
from django.http import HttpRequest

REALM = 'Bearer realm="lakewarden-metrics"'


@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    challenge: str = ""


def scrape_refusal(request: HttpRequest) -> Refusal | None:
    """None when the request may scrape; otherwise the status and the reason to answer with."""
    token = settings.LAKEWARDEN_METRICS_TOKEN
    networks = settings.LAKEWARDEN_METRICS_ALLOWED_IPS
    if not token and not networks:
        return Refusal(
            403,
            "metrics are not enabled: set LAKEWARDEN_METRICS_TOKEN (a bearer token) and/or "
            "LAKEWARDEN_METRICS_ALLOWED_IPS (addresses allowed to scrape)",
        )
    if networks and not address_allowed(request.META.get("REMOTE_ADDR", ""), networks):
        return Refusal(403, "this address may not scrape metrics (LAKEWARDEN_METRICS_ALLOWED_IPS)")
    if token:
        sent = bearer_token(request)
        if sent is None:
            return Refusal(401, "metrics need 'Authorization: Bearer <LAKEWARDEN_METRICS_TOKEN>'", REALM)
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return Refusal(401, "wrong metrics token", f'{REALM}, error="invalid_token"')
    return None


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
