"""``/metrics``: the Prometheus text format, for a scraper holding the token or an allowed address."""

from __future__ import annotations

import functools
import gzip

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.multiprocess import MultiProcessCollector

from console.errorpages import text_error
from console.metrics.access import Refusal, scrape_access
from console.metrics.groups import group_families
from console.metrics.http import samples_folder
from console.metrics.rows import backlog_family, cache_families, process_families, table_lines
from console.metrics.runtime import BrokerProbe
from console.teams.access import metrics_token_team, team_tables

#: Bodies above this are gzipped for a scraper that accepts it (Prometheus does).
GZIP_ABOVE_BYTES = 64 * 1024


class _Families:
    def __init__(self, families: list) -> None:
        self._families = families

    def collect(self):
        return iter(self._families)


def team_metrics_text(team_id: int) -> bytes:
    """What a team's scrape token sees: the per-table series of the team's tables, nothing else
    (the process, backlog, cache, group and broker families count every team's work)."""
    return "".join(table_lines(timezone.now(), team_tables(team_id))).encode()


def metrics_text() -> bytes:
    """Every metric, as one text-format body."""
    now = timezone.now()
    probe = BrokerProbe().start()
    families = [*process_families(), backlog_family(now), *cache_families(), *group_families()]
    tables = "".join(table_lines(now)).encode()
    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=samples_folder())
    registry.register(_Families([*families, *probe.families()]))
    return generate_latest(registry) + tables


def _get_only(view):
    """``require_GET`` with a plain-text 405 (Django's own is an empty HTML answer); like
    Django's decorator it keeps the methods it allows in ``request_method_list``."""
    request_method_list = ["GET"]

    @functools.wraps(view)
    def inner(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.method not in request_method_list:
            response = text_error(f"{request.method} is not allowed here: metrics answer GET", 405)
            response["Allow"] = ", ".join(request_method_list)
            return response
        return view(request, *args, **kwargs)

    return inner


@_get_only
def metrics(request: HttpRequest) -> HttpResponse:
    scope = scrape_access(request, team_of=metrics_token_team)
    if isinstance(scope, Refusal):
        response = text_error(scope.message, scope.status)
        if scope.challenge:
            response["WWW-Authenticate"] = scope.challenge
        return response
    body = metrics_text() if scope.team_id is None else team_metrics_text(scope.team_id)
    response = HttpResponse(content_type=CONTENT_TYPE_PLAIN_0_0_4)
    if len(body) > GZIP_ABOVE_BYTES and "gzip" in request.headers.get("Accept-Encoding", ""):
        body = gzip.compress(body, compresslevel=1)
        response["Content-Encoding"] = "gzip"
    response["Vary"] = "Accept-Encoding"
    response["Cache-Control"] = "no-store"
    response.content = body
    return response
