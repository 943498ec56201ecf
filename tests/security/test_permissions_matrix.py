"""Every URL × every kind of visitor × every method the view answers, generated from the URL
configuration: a new endpoint without a rule in ``RULES`` fails here until someone decides who may
use it.

Expectations per kind of endpoint:
  console pages   anonymous -> 302 to the login page; no role -> 403; a role below the rule's -> 403
  API             anonymous -> 401/403; no role -> 403; a role below the rule's -> 403 (JSON)
  admin site      anonymous -> 302 to the login page; no role -> 403; viewer, operator -> 302 to the
                  admin's own login page ("not authorised"); admin -> 200
  public          everyone gets the page (login, logout, health)
An allowed role gets 200 for a GET and anything but 401/403 (and no 5xx) for a write. Refused writes
are sent a valid body and an invalid one: both must get 403 (the role is checked before the input)
and change nothing.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from console.roles import ADMIN, OPERATOR, VIEWER

ANYONE = "anyone"
VISITORS = (None, "none", VIEWER, OPERATOR, ADMIN)  # None: anonymous; "none": logged in, no role
RANK = {None: -2, "none": -1, VIEWER: 0, OPERATOR: 1, ADMIN: 2}
#: No login opens it: /metrics takes a bearer token or an allowed address (none set in this run).
NOBODY = "nobody"
RANK[NOBODY] = 99
ALL_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

CONSOLE, API, ADMIN_SITE, PUBLIC = "console", "api", "admin", "public"


@dataclass(frozen=True)
class Rule:
    """Who may use an endpoint: ``methods`` maps each method the view answers to the lowest role
    allowed (or ANYONE). ``obj`` names the fixture object whose pk fills ``pk``; ``variants`` are
    extra path arguments, each tried in turn; ``body(lake)`` is a valid body for writes."""

    kind: str
    methods: dict[str, str]
    obj: str | None = None
    variants: tuple[dict, ...] = ({},)
    body: Callable | None = None
    query: str = ""  # a query string a valid GET needs (``key=1&column=id``)


def _read(kind: str = CONSOLE, obj: str | None = None) -> Rule:
    return Rule(kind, {"GET": VIEWER}, obj)


RULES: dict[str, Rule] = {
    # --- console pages ---------------------------------------------------------------------------
    "console:overview": _read(),
    "console:liveness": _read(),  # the overview's polled worker/beat fragment
    "console:catalog-list": _read(),
    "console:catalog-create": Rule(
        CONSOLE,
        {"POST": ADMIN},
        body=lambda lake: {
            "name": "matrix-root",
            "kind": "path_root",
            "p:path_root:root": str(lake.warehouse),
        },
    ),
    "console:catalog-detail": _read(obj="catalog"),
    "console:catalog-sync": Rule(CONSOLE, {"POST": ADMIN}, obj="catalog", body=lambda lake: {}),
    # Catalog changes (issue 34): admins edit, delete and test; viewers and operators read.
    "console:catalog-edit": Rule(
        CONSOLE,
        {"GET": ADMIN, "POST": ADMIN},
        obj="catalog",
        body=lambda lake: {"p:path_root:root": str(lake.warehouse)},
    ),
    "console:catalog-delete": Rule(CONSOLE, {"POST": ADMIN}, obj="catalog", body=lambda lake: {}),
    "console:catalog-test": Rule(CONSOLE, {"POST": ADMIN}, obj="catalog", body=lambda lake: {}),
    "console:table-list": _read(),
    "console:table-register": Rule(
        CONSOLE, {"POST": ADMIN}, body=lambda lake: {"location": str(lake.unregistered), "format": ""}
    ),
    "console:table-detail": _read(obj="table"),
    "console:table-refresh": Rule(CONSOLE, {"POST": ADMIN}, obj="table", body=lambda lake: {}),
    # A table's overrides (issue 34): everyone reads them, admins change them.
    "console:table-overrides": Rule(
        CONSOLE,
        {"GET": VIEWER, "POST": ADMIN},
        obj="table",
        body=lambda lake: {"p:override:manual-actions": "touch"},
    ),
    "console:table-snapshots": _read(obj="table"),
    "console:table-files": _read(obj="table"),
    "console:table-splits": _read(obj="table"),
    "console:table-partitions": _read(obj="table"),
    "console:table-changes": _read(obj="table"),
    "console:table-processes": _read(obj="table"),
    "console:table-maintenance": _read(obj="table"),
    "console:table-records": _read(obj="table"),
    "console:table-process-run": Rule(
        CONSOLE, {"POST": OPERATOR}, obj="table", body=lambda lake: {"action": "touch", "params": "{}"}
    ),
    "console:table-process-preview": Rule(
        CONSOLE, {"POST": OPERATOR}, obj="table", body=lambda lake: {"action": "touch", "params": "{}"}
    ),
    # Trash (issue 14): a process's trash card for anyone, its restore for operators.
    "console:process-trash": _read(obj="process"),
    "console:process-trash-restore": Rule(CONSOLE, {"POST": OPERATOR}, obj="process", body=lambda lake: {}),
    "console:process-list": _read(),
    "console:process-detail": _read(obj="process"),
    "console:process-act": Rule(
        CONSOLE,
        {"POST": OPERATOR},
        obj="process",
        variants=({"verb": "cancel"}, {"verb": "kill"}, {"verb": "retry"}),
        body=lambda lake: {},
    ),
    "console:workbench": _read(),
    "console:query-run": Rule(CONSOLE, {"POST": OPERATOR}, body=lambda lake: {"sql": "select 1"}),
    "console:query-detail": _read(obj="query"),
    "console:query-export": Rule(
        CONSOLE, {"GET": VIEWER}, obj="query", variants=({"fmt": "csv"}, {"fmt": "parquet"})
    ),
    "console:workbench-tables": _read(),
    "console:workbench-columns": _read(obj="table"),
    "console:query-cancel": Rule(CONSOLE, {"POST": OPERATOR}, obj="query", body=lambda lake: {}),
    "console:cached-result-list": _read(),
    "console:cached-result-act": Rule(
        CONSOLE,
        {"POST": OPERATOR},
        obj="cached_result",
        variants=({"verb": "invalidate"}, {"verb": "drop"}),
        body=lambda lake: {},
    ),
    "console:storage-list": _read(),
    "console:storage-create": Rule(
        CONSOLE,
        {"POST": ADMIN},
        body=lambda lake: {"name": "matrix-store", "type": "filesystem", "config": "{}"},
    ),
    "console:storage-edit": Rule(
        CONSOLE,
        {"GET": ADMIN, "POST": ADMIN},
        obj="storage",
        body=lambda lake: {"p:storage:quota": "1", "u:storage:quota": "GiB"},
    ),
    "console:storage-test": Rule(CONSOLE, {"POST": ADMIN}, obj="storage", body=lambda lake: {}),
    "console:storage-delete": Rule(CONSOLE, {"POST": ADMIN}, obj="storage", body=lambda lake: {}),
    # The audit trail (console/audit): operators and admins read it; viewers get 403.
    "console:audit": Rule(CONSOLE, {"GET": OPERATOR}),
    # Alerts (issue 16): admins; under teams, operators of a team too (tests/teams/test_alerts.py).
    "console:alerts": Rule(CONSOLE, {"GET": ADMIN}),
    "console:alert-channel-test": Rule(CONSOLE, {"POST": ADMIN}, obj="alert_channel", body=lambda lake: {}),
    "console:alert-channel-toggle": Rule(CONSOLE, {"POST": ADMIN}, obj="alert_channel", body=lambda lake: {}),
    "console:alert-rule-toggle": Rule(CONSOLE, {"POST": ADMIN}, obj="alert_rule", body=lambda lake: {}),
    # Issue 32: the channel and rule forms (a team's operators too: tests/teams/test_alert_console.py).
    "console:alert-channel-create": Rule(
        CONSOLE,
        {"GET": ADMIN, "POST": ADMIN},
        body=lambda lake: {"name": "matrix-new", "kind": "webhook", "url": "http://example.org/hook"},
    ),
    "console:alert-channel-edit": Rule(
        CONSOLE,
        {"GET": ADMIN, "POST": ADMIN},
        obj="alert_channel",
        body=lambda lake: {"name": "matrix-edit", "kind": "email", "recipients": "ops@example.org"},
    ),
    "console:alert-channel-delete": Rule(CONSOLE, {"POST": ADMIN}, obj="alert_channel", body=lambda lake: {}),
    "console:alert-rule-create": Rule(
        CONSOLE,
        {"GET": ADMIN, "POST": ADMIN},
        body=lambda lake: {"name": "matrix-new", "kind": "process_failed", "threshold": 60, "minutes": 0},
    ),
    "console:alert-rule-edit": Rule(
        CONSOLE,
        {"GET": ADMIN, "POST": ADMIN},
        obj="alert_rule",
        body=lambda lake: {"threshold": 70, "minutes": 0},
    ),
    "console:alert-rule-delete": Rule(CONSOLE, {"POST": ADMIN}, obj="alert_rule", body=lambda lake: {}),
    # Resource groups (issue 31): the capacity page, operators and admins.
    "console:capacity": Rule(CONSOLE, {"GET": OPERATOR}),
    "console:resource-group-create": Rule(
        CONSOLE, {"POST": ADMIN}, body=lambda lake: {"name": "matrix-page", "max_concurrency": "2"}
    ),
    "console:resource-group-update": Rule(
        CONSOLE, {"POST": ADMIN}, obj="resource_group", body=lambda lake: {"max_concurrency": "3"}
    ),
    # Teams (issue 32): everyone reads the page (their own teams); admins and team owners (operators)
    # change them: an operator who owns no team gets 404 for a team they are not in.
    "console:team-list": _read(),
    "console:team-member-add": Rule(
        CONSOLE, {"POST": OPERATOR}, obj="team", body=lambda lake: {"username": "nobody-here"}
    ),
    "console:team-member-remove": Rule(
        CONSOLE, {"POST": OPERATOR}, obj="team", variants=({"member_pk": 2**31 - 1},), body=lambda lake: {}
    ),
    "console:team-grant-add": Rule(
        CONSOLE, {"POST": OPERATOR}, obj="team", body=lambda lake: {"role": "viewer", "table": lake.table.pk}
    ),
    "console:team-grant-remove": Rule(
        CONSOLE, {"POST": OPERATOR}, obj="team", variants=({"grant_pk": 2**31 - 1},), body=lambda lake: {}
    ),
    # A team's /metrics scrape token (issue 32): admins and the team's owners make one.
    "console:team-metrics-token": Rule(CONSOLE, {"POST": OPERATOR}, obj="team", body=lambda lake: {}),
    # --- public ----------------------------------------------------------------------------------
    "healthz": Rule(PUBLIC, {"GET": ANYONE}),
    "favicon": Rule(PUBLIC, {"GET": ANYONE}),
    "login": Rule(
        # Django's form views answer PUT as they answer POST.
        PUBLIC,
        {"GET": ANYONE, "POST": ANYONE, "PUT": ANYONE},
        body=lambda lake: {"username": "x", "password": "wrong"},
    ),
    "logout": Rule(PUBLIC, {"POST": ANYONE}, body=lambda lake: {}),
    # OpenID Connect sign-in (console/sso): public, and 404 while OIDC is off, as in this run.
    "oidc_authentication_init": Rule(PUBLIC, {"GET": ANYONE}),
    "oidc_authentication_callback": Rule(PUBLIC, {"GET": ANYONE}),
    # Prometheus metrics: refused (401/403) to every login; tests/console/test_metrics.py covers the token.
    "metrics": Rule(API, {"GET": NOBODY}),
    # --- API -------------------------------------------------------------------------------------
    "api-root": _read(API),
    "api-schema": _read(API),
    "api-docs": _read(API),
    "catalog-list": Rule(
        API,
        {"GET": VIEWER, "POST": ADMIN},
        body=lambda lake: {
            "name": "api-root",
            "kind": "path_root",
            "properties": {"root": str(lake.warehouse)},
        },
    ),
    "catalog-detail": Rule(
        API,
        {"GET": VIEWER, "PATCH": ADMIN, "DELETE": ADMIN},
        obj="catalog",
        body=lambda lake: {"properties": {"root": str(lake.warehouse)}},
    ),
    "catalog-sync": Rule(API, {"POST": ADMIN}, obj="catalog", body=lambda lake: {}),
    "table-list": Rule(
        API, {"GET": VIEWER, "POST": ADMIN}, body=lambda lake: {"location": str(lake.unregistered)}
    ),
    "table-detail": _read(API, "table"),
    "table-refresh": Rule(API, {"POST": ADMIN}, obj="table", body=lambda lake: {}),
    "table-snapshots": _read(API, "table"),
    "table-files": _read(API, "table"),
    "table-splits": _read(API, "table"),
    "table-partitions": _read(API, "table"),
    "table-changes": _read(API, "table"),
    "table-maintenance": _read(API, "table"),
    "table-record-list": Rule(API, {"GET": VIEWER, "POST": VIEWER}, obj="table", query="key=1&column=id"),
    "process-list": Rule(
        API,
        {"GET": VIEWER, "POST": OPERATOR},
        body=lambda lake: {"table": lake.table.pk, "action": "touch", "params": {}},
    ),
    "process-detail": _read(API, "process"),
    "process-cancel": Rule(API, {"POST": OPERATOR}, obj="process", body=lambda lake: {}),
    "process-kill": Rule(API, {"POST": OPERATOR}, obj="process", body=lambda lake: {"grace_seconds": 0}),
    "process-retry": Rule(API, {"POST": OPERATOR}, obj="process", body=lambda lake: {}),
    "process-trash": _read(API, "process"),
    "process-restore": Rule(API, {"POST": OPERATOR}, obj="process", body=lambda lake: {}),
    "trash-list": _read(API),
    "table-process-preview": Rule(
        API, {"POST": OPERATOR}, obj="table", body=lambda lake: {"action": "touch", "params": {}}
    ),
    "plugin-list": _read(API),
    "storage-list": Rule(
        API,
        {"GET": VIEWER, "POST": ADMIN},
        body=lambda lake: {"name": "api-store", "type": "filesystem", "config": {}},
    ),
    "storage-detail": Rule(
        API,
        {"GET": VIEWER, "PATCH": ADMIN, "DELETE": ADMIN},
        obj="storage",
        body=lambda lake: {"quota_bytes": 10**9},
    ),
    "storage-test": Rule(API, {"POST": ADMIN}, obj="storage", body=lambda lake: {}),
    # Teams and grants (issue 32): admins only, reads too.
    "team-list": Rule(API, {"GET": ADMIN, "POST": ADMIN}, body=lambda lake: {"name": "matrix-new"}),
    "team-detail": Rule(
        API,
        {"GET": ADMIN, "PATCH": ADMIN, "DELETE": ADMIN},
        obj="team",
        body=lambda lake: {"description": "x"},
    ),
    "grant-list": Rule(
        API,
        {"GET": ADMIN, "POST": ADMIN},
        body=lambda lake: {"team": lake.team.name, "role": "operator", "table": lake.table.pk},
    ),
    "team-metrics-token": Rule(API, {"POST": ADMIN, "DELETE": ADMIN}, obj="team", body=lambda lake: {}),
    "grant-detail": Rule(API, {"GET": ADMIN, "DELETE": ADMIN}, obj="grant"),
    "query-list": Rule(API, {"GET": VIEWER, "POST": OPERATOR}, body=lambda lake: {"sql": "select 1"}),
    "query-detail": _read(API, "query"),
    "query-cancel": Rule(API, {"POST": OPERATOR}, obj="query", body=lambda lake: {}),
    "cached-result-list": _read(API),
    "cached-result-detail": Rule(
        API, {"GET": VIEWER, "DELETE": OPERATOR}, obj="cached_result", body=lambda lake: {}
    ),
    "cached-result-invalidate": Rule(API, {"POST": OPERATOR}, obj="cached_result", body=lambda lake: {}),
    "audit-list": Rule(API, {"GET": OPERATOR}),
    "alert-channel-list": Rule(
        API,
        {"GET": ADMIN, "POST": ADMIN},
        body=lambda lake: {"name": "matrix-new", "kind": "webhook", "url": "http://example.org/hook"},
    ),
    "alert-channel-detail": Rule(
        API,
        {"GET": ADMIN, "PATCH": ADMIN, "DELETE": ADMIN},
        obj="alert_channel",
        body=lambda lake: {"enabled": False},
    ),
    "alert-channel-test": Rule(API, {"POST": ADMIN}, obj="alert_channel", body=lambda lake: {}),
    # Alert rules (issue 32): admins; under teams, operators of a team too (tests/teams/test_alerts.py).
    "alert-rule-list": Rule(
        API, {"GET": ADMIN, "POST": ADMIN}, body=lambda lake: {"name": "matrix-new", "kind": "process_failed"}
    ),
    "alert-rule-detail": Rule(
        API,
        {"GET": ADMIN, "PATCH": ADMIN, "DELETE": ADMIN},
        obj="alert_rule",
        body=lambda lake: {"threshold": 70},
    ),
    "alert-delivery-list": Rule(API, {"GET": ADMIN}),
    # Issue 32: episodes, read only (a team's operators: theirs and their tables').
    "alert-episode-list": Rule(API, {"GET": ADMIN}),
    # Resource groups (issue 31): operators read, admins write.
    "resource-group-list": Rule(
        API, {"GET": OPERATOR, "POST": ADMIN}, body=lambda lake: {"name": "matrix-new", "max_concurrency": 2}
    ),
    "resource-group-detail": Rule(
        API,
        {"GET": OPERATOR, "PATCH": ADMIN, "DELETE": ADMIN},
        obj="resource_group",
        body=lambda lake: {"max_concurrency": 3},
    ),
    # A group's cost and benefit per day (issue 31 item 6): operators read it.
    "resource-group-report": Rule(API, {"GET": OPERATOR}, obj="resource_group"),
}


# --- the URL configuration, walked ----------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    name: str
    route: str
    params: tuple[str, ...]
    methods: frozenset[str]
    admin_rule: Rule | None = field(default=None, compare=False)  # admin site pages bring their rule


def _declared_methods(view) -> frozenset[str]:
    """The methods a view answers: DRF viewset actions, a class-based view's handlers, or the
    list a function view gives ``require_http_methods`` (require_GET, require_POST)."""
    actions = getattr(view, "actions", None)
    if actions:
        return frozenset(method.upper() for method in actions)
    view_class = getattr(view, "view_class", None) or getattr(view, "cls", None)
    if view_class is not None:
        return frozenset(
            m.upper()
            for m in view_class.http_method_names
            if m.upper() in ALL_METHODS and hasattr(view_class, m)
        )
    func = view
    while func is not None:
        try:
            closure = inspect.getclosurevars(func).nonlocals
        except TypeError:
            break
        if "request_method_list" in closure:
            return frozenset(closure["request_method_list"]) & frozenset(ALL_METHODS)
        func = getattr(func, "__wrapped__", None)
    return frozenset(ALL_METHODS)  # an undecorated function view answers every method


def _admin_endpoints(route: str) -> Iterator[Endpoint]:
    """The admin site: its index and one change list per registered model (the site opens for the
    admin role only, so every page of it shares that rule)."""
    rule = Rule(ADMIN_SITE, {"GET": ADMIN})
    yield Endpoint("admin:index", route, (), frozenset({"GET"}), rule)
    for model in admin.site._registry:
        name = f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"
        yield Endpoint(name, route, (), frozenset({"GET"}), rule)


def walk(patterns, prefix: str = "", namespace: str | None = None, params=()) -> Iterator[Endpoint]:
    for entry in patterns:
        here = params + tuple(entry.pattern.regex.groupindex)
        if isinstance(entry, URLResolver):
            if entry.namespace == "admin":
                yield from _admin_endpoints(prefix + str(entry.pattern))
                continue
            inner = ":".join(n for n in (namespace, entry.namespace) if n) or None
            yield from walk(entry.url_patterns, prefix + str(entry.pattern), inner, here)
        elif isinstance(entry, URLPattern):
            name = f"{namespace}:{entry.name}" if namespace and entry.name else entry.name
            yield Endpoint(
                name or f"<unnamed {prefix}{entry.pattern}>",
                prefix + str(entry.pattern),
                here,
                _declared_methods(entry.callback),
            )


def endpoints() -> list[Endpoint]:
    """One endpoint per route name (DRF's ``.json`` suffix twins share their route's name)."""
    chosen: dict[str, Endpoint] = {}
    for endpoint in walk(get_resolver().url_patterns):
        current = chosen.get(endpoint.name)
        if current is None or len(endpoint.params) < len(current.params):
            chosen[endpoint.name] = endpoint
    return sorted(chosen.values(), key=lambda e: e.name)


ENDPOINTS = endpoints()


def rule_for(endpoint: Endpoint) -> Rule | None:
    return endpoint.admin_rule or RULES.get(endpoint.name)


# --- the matrix -------------------------------------------------------------------------------------


def test_every_endpoint_has_a_permission_rule():
    missing = [f"  {e.name}  ({e.route})" for e in ENDPOINTS if rule_for(e) is None]
    assert not missing, (
        "These URLs have no permission rule. Add one per URL to RULES in "
        "tests/security/test_permissions_matrix.py, saying which role may use each method:\n"
        + "\n".join(missing)
    )


def test_every_rule_names_an_existing_endpoint():
    names = {e.name for e in ENDPOINTS}
    stale = sorted(set(RULES) - names)
    assert not stale, f"RULES names URLs that no longer exist (remove or rename them): {stale}"


def _login(user) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def _state() -> tuple:
    """What a refused request must not change."""
    from processes.models import Process
    from storage.models import Catalog, Table

    state = (
        sorted(Catalog.objects.values_list("name", "last_synced_at")),
        sorted(Table.objects.values_list("location", "refreshed_at")),
        sorted(Process.objects.values_list("id", "status")),
    )
    try:
        from processes.models import Query
        from storage.models import CachedResult, StorageBackend
    except ImportError:
        return state
    return state + (
        sorted(StorageBackend.objects.values_list("name", "quota_bytes", "last_test_at")),
        sorted(CachedResult.objects.values_list("id", "state")),
        sorted(Query.objects.values_list("id", "status")),
    )


def _send(client: Client, kind: str, method: str, url: str, body: dict | None):
    if method == "GET":
        return client.get(url)
    if kind == API:
        return client.generic(method, url, json.dumps(body or {}), content_type="application/json")
    if method == "POST":
        return client.post(url, body or {})
    return client.generic(method, url)


def _refusal_problem(kind: str, visitor, response) -> str | None:
    status, location = response.status_code, response.get("Location", "")
    if visitor is None and kind in (CONSOLE, ADMIN_SITE):
        ok = status == 302 and location.startswith(reverse("login"))
        return None if ok else f"expected a redirect to the login page, got {status} {location}"
    if visitor is None and kind == API:
        return None if status in (401, 403) else f"expected 401/403, got {status}"
    if kind == ADMIN_SITE and visitor != "none":
        ok = status == 302 and location.startswith(reverse("admin:login"))
        return None if ok else f"expected a redirect to the admin login, got {status} {location}"
    return None if status == 403 else f"expected 403, got {status}"


def _allowed_problem(method: str, response, rule: Rule, endpoint: Endpoint) -> str | None:
    status = response.status_code
    if endpoint.name == "healthz":  # 503 is its answer while a dependency is down
        return None if status in (200, 503) else f"expected 200 or 503, got {status}"
    if endpoint.name.startswith("oidc_"):  # tests/security/test_sso_oidc.py covers them switched on
        return None if status == 404 else f"expected 404 while OIDC is off, got {status}"
    if endpoint.name == "process-trash" and status == 404:  # the fixture process trashed nothing
        said = response.json().get("error", "")
        return None if "trash" in said else f"expected a 404 saying there is no trash, got {said!r}"
    if status >= 500 or status in (401, 403):
        return f"expected to be allowed, got {status}"
    if method == "GET" and status != 200:
        return f"expected 200, got {status}"
    return None


def _url(endpoint: Endpoint, rule: Rule, lake, variant: dict) -> str:
    kwargs = dict(variant)
    for param in endpoint.params:
        if param not in kwargs:
            obj = getattr(lake, rule.obj or "", None)
            assert obj is not None, f"{endpoint.name}: no fixture object for <{param}>; set obj= in its rule"
            kwargs[param] = obj.pk
    url = reverse(endpoint.name, kwargs=kwargs)
    return f"{url}?{rule.query}" if rule.query else url


@pytest.fixture
def no_waiting_for_workers(monkeypatch):
    """Testing a storage waits for a worker's answer (up to minutes): answer at once instead."""
    try:
        from processes import queries as services
    except ImportError:
        return
    monkeypatch.setattr(services, "storage_backend_test_on_worker", lambda backend, **kw: (True, "tested"))


# Endpoints whose code does not follow its rule yet: strict, so the fix turns them red until the
# entry is removed here.
KNOWN_BUGS: dict[str, str] = {}


def _cases():
    for endpoint in ENDPOINTS:
        marks = (
            [pytest.mark.xfail(reason=KNOWN_BUGS[endpoint.name], strict=True)]
            if endpoint.name in KNOWN_BUGS
            else []
        )
        yield pytest.param(endpoint, id=endpoint.name, marks=marks)


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", list(_cases()))
def test_each_visitor_gets_what_their_role_allows(endpoint, lake, users, no_waiting_for_workers):
    rule = rule_for(endpoint)
    if rule is None:
        pytest.fail(
            f"No permission rule for {endpoint.name} ({endpoint.route}): add one to RULES in "
            "tests/security/test_permissions_matrix.py saying which role may use each method."
        )
    assert set(rule.methods) == set(endpoint.methods), (
        f"{endpoint.name}: the view answers {sorted(endpoint.methods)} but its rule lists "
        f"{sorted(rule.methods)}; make them agree (decorate function views with require_GET/require_POST)."
    )
    problems = []
    clients = {visitor: _login(users[visitor]) for visitor in VISITORS}
    for variant in rule.variants:
        url = _url(endpoint, rule, lake, variant)
        # Reads first, for every visitor; then each write (a DELETE must not hide the object from a read).
        for method, lowest in sorted(rule.methods.items(), key=lambda item: item[0] != "GET"):
            for visitor in VISITORS:
                label = f"{method} {url} as {visitor or 'anonymous'}"
                body = rule.body(lake) if rule.body and method != "GET" else None
                allowed = lowest == ANYONE or (
                    visitor not in (None, "none") and RANK[visitor] >= RANK[lowest]
                )
                if allowed:
                    response = _send(clients[visitor], rule.kind, method, url, body)
                    problem = _allowed_problem(method, response, rule, endpoint)
                    if problem:
                        problems.append(f"{label}: {problem}")
                    continue
                before = _state()
                bodies = [body] if method == "GET" else [body, {"unexpected": "x" * 3000}]
                for sent in bodies:
                    response = _send(clients[visitor], rule.kind, method, url, sent)
                    problem = _refusal_problem(rule.kind, visitor, response)
                    if problem:
                        problems.append(f"{label}: {problem}")
                if _state() != before:
                    problems.append(f"{label}: refused, yet the request changed something")
    # Methods the view does not answer: the admin role gets 405, never the page.
    if rule.kind in (CONSOLE, API, PUBLIC):
        url = _url(endpoint, rule, lake, rule.variants[0])
        client = _login(users[ADMIN])  # a fresh one: the admin's own may have logged out above
        for method in sorted(set(ALL_METHODS) - set(rule.methods)):
            status = _send(client, rule.kind, method, url, {}).status_code
            if status != 405:
                problems.append(
                    f"{method} {url} as admin: the view does not answer {method}, expected 405, got {status}"
                )
    assert not problems, "\n".join(problems)


# --- buttons a role cannot use are not shown -----------------------------------------------------


def _page(client_as, user, url: str) -> str:
    response = client_as(user).get(url)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_only_admins_see_the_register_form_on_the_tables_page(lake, users, client_as):
    url = reverse("console:table-list")
    register = reverse("console:table-register")

    for role in (VIEWER, OPERATOR):
        assert register not in _page(client_as, users[role], url), role
    assert register in _page(client_as, users[ADMIN], url)


@pytest.mark.django_db
def test_only_admins_see_sync_on_a_catalog_and_refresh_on_a_table(lake, users, client_as):
    sync = reverse("console:catalog-sync", args=[lake.catalog.pk])
    refresh = reverse("console:table-refresh", args=[lake.table.pk])
    catalog_page = reverse("console:catalog-detail", args=[lake.catalog.pk])
    table_page = reverse("console:table-detail", args=[lake.table.pk])

    for role in (VIEWER, OPERATOR):
        assert sync not in _page(client_as, users[role], catalog_page), role
        assert refresh not in _page(client_as, users[role], table_page), role
    assert sync in _page(client_as, users[ADMIN], catalog_page)
    assert refresh in _page(client_as, users[ADMIN], table_page)


@pytest.mark.django_db
def test_viewers_see_no_cancel_kill_or_retry_and_operators_do(lake, users, client_as):
    from processes.models import Process, ProcessStatus

    pending = reverse("console:process-detail", args=[lake.process.pk])
    act = {
        verb: reverse("console:process-act", args=[lake.process.pk, verb])
        for verb in ("cancel", "kill", "retry")
    }

    viewer_page = _page(client_as, users[VIEWER], pending)
    assert not any(url in viewer_page for url in act.values())
    operator_page = _page(client_as, users[OPERATOR], pending)
    assert act["cancel"] in operator_page and act["kill"] in operator_page
    assert ">Cancel<" in operator_page and ">Kill<" in operator_page

    Process.objects.filter(pk=lake.process.pk).update(status=ProcessStatus.FAILED)
    assert act["retry"] not in _page(client_as, users[VIEWER], pending)
    assert act["retry"] in _page(client_as, users[OPERATOR], pending)


@pytest.mark.django_db
def test_viewers_do_not_see_the_run_now_form_of_a_table(lake, users, client_as):
    run = reverse("console:table-process-run", args=[lake.table.pk])
    page = reverse("console:table-processes", args=[lake.table.pk])

    assert run not in _page(client_as, users[VIEWER], page)
    assert run in _page(client_as, users[OPERATOR], page)
