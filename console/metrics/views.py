"""``/metrics``: the Prometheus text format, for a scraper holding the token or an allowed address."""

from __future__ import annotations

import gzip

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

from console.errorpages import text_error
from console.metrics.access import scrape_refusal
from console.metrics.rows import backlog_family, cache_families, process_families, table_lines
from console.metrics.runtime import BrokerProbe

#: Bodies above this are gzipped for a scraper that accepts it (Prometheus does).
GZIP_ABOVE_BYTES = 64 * 1024


class _Families:
    def __init__(self, families: list) -> None:
        self._families = families

    def collect(self):
        return iter(self._families)


def metrics_text() -> bytes:
    """Every metric, as one text-format body."""
    now = timezone.now()
    probe = BrokerProbe().start()
    families = [*process_families(), backlog_family(now), *cache_families()]
    tables = "".join(table_lines(now)).encode()
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry)
    registry.register(_Families([*families, *probe.families()]))
    return generate_latest(registry) + tables


def metrics(request: HttpRequest) -> HttpResponse:
    if request.method != "GET":  # (Django's own 405 is an empty HTML answer)
        response = text_error(f"{request.method} is not allowed here: metrics answer GET", 405)
        response["Allow"] = "GET"
        return response
    refusal = scrape_refusal(request)
    if refusal is not None:
        response = text_error(refusal.message, refusal.status)
        if refusal.challenge:
            response["WWW-Authenticate"] = refusal.challenge
        return response
    body = metrics_text()
    response = HttpResponse(content_type=CONTENT_TYPE_PLAIN_0_0_4)
    if len(body) > GZIP_ABOVE_BYTES and "gzip" in request.headers.get("Accept-Encoding", ""):
        body = gzip.compress(body, compresslevel=1)
        response["Content-Encoding"] = "gzip"
    response["Vary"] = "Accept-Encoding"
    response["Cache-Control"] = "no-store"
    response.content = body
    return response
