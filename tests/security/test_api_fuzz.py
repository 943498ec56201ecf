"""schemathesis against the running API (pytest-django's live server), as a viewer, an operator and an admin,
with a token: every operation of the OpenAPI schema served at /api/schema/, with requests that fit
the schema and requests that do not. Checks: no 5xx, every response (errors included) matches the
schema, and every response with a body is JSON (never an HTML error page).

Bounded: a few examples per operation and generation mode, derandomized, no shrinking. Writes only
enqueue work on the tests' private broker. (schemathesis' own pytest integration does not run on
pytest 9 yet, so operations are driven here with their Hypothesis strategies.)
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance
from schemathesis.transport.requests import ManagedCookiesSession

from console.roles import ADMIN, OPERATOR, VIEWER

pytestmark = pytest.mark.django_db(transaction=True)

JSON = {"Accept": "application/vnd.oai.openapi+json"}

# 30 per operation: about 25 s per role on a 2-core machine. LAKEWARDEN_FUZZ_EXAMPLES=200 for a
# deeper hunt (minutes) than the suite's bounded run.
EXAMPLES_PER_OPERATION = int(os.environ.get("LAKEWARDEN_FUZZ_EXAMPLES", "30"))


@schemathesis.check
def json_answers(ctx, response, case) -> None:
    """Every answer with a body is JSON: errors too, never the console's HTML pages."""
    values = [v for k, v in response.headers.items() if k.lower() == "content-type"]
    content_type = (values[0][0] if isinstance(values[0], list) else values[0]) if values else ""
    if response.content and not content_type.startswith("application/json"):
        raise AssertionError(
            f"{response.status_code} answered as {content_type or 'no content type'}, not JSON"
        )


CHECKS = [not_a_server_error, response_schema_conformance, json_answers]
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES_PER_OPERATION,
    deadline=None,
    database=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)


@pytest.fixture
def no_waiting_for_workers(monkeypatch):
    """Testing a storage waits for a worker's answer; there is no worker in this test."""
    try:
        from processes import queries as services
    except ImportError:
        return
    monkeypatch.setattr(services, "storage_backend_test_on_worker", lambda backend, **kw: (True, "tested"))


def _real_ids(lake) -> dict[str, int]:
    """Collection (``/api/v1/<collection>/{id}/``) -> the id of a real object in it."""
    objects = {
        "catalogs": lake.catalog,
        "tables": lake.table,
        "processes": lake.process,
        "storages": lake.storage,
        "queries": lake.query,
        "cached-results": lake.cached_result,
    }
    return {name: obj.pk for name, obj in objects.items() if obj is not None}


def _strategy(operation, real_ids: dict[str, int]):
    """Valid and invalid requests; for paths with an id, half of them aimed at a real object."""
    strategies = [operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    collection = operation.path.split("/")[3]
    if "{id}" in operation.path and collection in real_ids:
        real = {"id": real_ids[collection]}
        strategies += [operation.as_strategy(GenerationMode.POSITIVE, path_parameters=real)] * 2
    return st.one_of(strategies)


# The viewer first (it cannot change what the others' writes would change), then the operator (runs
# processes and queries, no settings), then the admin, then an operator whose team's grant covers
# the lake's table only (console/teams: the catalog and anything else are hidden from it).
TEAM_OPERATOR = "team operator"
ROLES = (VIEWER, OPERATOR, ADMIN, TEAM_OPERATOR)


def _with_teams(lake, users) -> dict:
    """Teams on for the run: the viewer and the operator in a team granted the lake's catalog and
    table (so they reach what they reached without teams), and a team operator (operator role, a
    team with an operator grant on the lake's table alone)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    from console.teams.models import Grant, Team, TeamMember

    everyone = Team.objects.create(name="fuzz-everyone")
    Grant.objects.create(team=everyone, role="operator", catalog=lake.catalog)
    Grant.objects.create(team=everyone, role="operator", table=lake.table)
    for role in (VIEWER, OPERATOR):
        TeamMember.objects.create(team=everyone, user=users[role])
    member = get_user_model().objects.create_user(username="team-operator", password="correct horse battery")
    member.groups.add(Group.objects.get_or_create(name=OPERATOR)[0])
    narrow = Team.objects.create(name="fuzz-narrow")
    Grant.objects.create(team=narrow, role="operator", table=lake.table)
    TeamMember.objects.create(team=narrow, user=member)
    return {**users, TEAM_OPERATOR: member}


def _generate_and_call(strategy, call, cases: list) -> None:
    """Appends to ``cases`` what Hypothesis generates from ``strategy`` (bounded, derandomized),
    each sent with ``call`` as it is made; a failure ends the generation, as in a run of its own."""

    @FUZZ_SETTINGS
    @given(case=strategy)
    def fuzz(case):
        cases.append(case)
        call(case)

    fuzz()


def _fuzz_every_operation(schema, strategy_for, callers: dict) -> tuple[int, dict[str, list[str]]]:
    """Each operation's cases are generated once and sent as every role, the first role as they
    are made (the viewer: a read-only role sees the lake as the fixture made it), the others
    replaying the same cases after (what their own derandomized run would generate). Returns the
    operation count and the failures per role."""
    failures: dict[str, list[str]] = {role: [] for role in callers}
    first, *others = callers
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        cases: list = []
        try:
            _generate_and_call(strategy_for(operation), callers[first], cases)
        except (Exception, BaseExceptionGroup) as error:  # one operation's failures must not hide the others'
            failures[first].append(f"--- {operation.label} as {first} ---\n{error}")
        for role in others:
            for case in cases:
                try:
                    callers[role](case)
                except (Exception, BaseExceptionGroup) as error:
                    failures[role].append(f"--- {operation.label} as {role} ---\n{error}")
                    break  # the first failure per operation, as a run of its own reports it
    return operations, failures


class _SizedBodySession(ManagedCookiesSession):
    """requests sends an empty body (an empty form: ``key=[]``) chunked, as ``0\\r\\n\\r\\n``;
    the live server (Django's development server) reads no chunked body, so the ``0`` was left on the
    kept-alive connection, taken for the next request and answered with http.server's HTML error
    page, which the next case read as its own answer (BadStatusLine, a failure of this harness, not
    of the API; gunicorn reads chunked bodies). An empty body goes with ``Content-Length: 0``."""

    def prepare_request(self, request):
        prepared = super().prepare_request(request)
        if prepared.body in ("", b"") and "Content-Length" not in prepared.headers:
            prepared.headers["Content-Length"] = "0"
        return prepared


@pytest.fixture
def keep_alive_without_delays(live_server, monkeypatch):
    """The live server answers with several small writes (status line, headers, body); on a kept-alive
    connection Nagle's algorithm holds each after the first until the client's delayed ACK (~40 ms a
    request). A server with TCP_NODELAY, like production servers, for this test only."""
    server = live_server.thread.httpd
    handler = type("NoDelayHandler", (server.RequestHandlerClass,), {"disable_nagle_algorithm": True})
    monkeypatch.setattr(server, "RequestHandlerClass", handler)


@pytest.fixture
def fuzz_report(live_server, keep_alive_without_delays, lake, users, no_waiting_for_workers):
    """One bounded run of every operation as each role of ``ROLES``, each with a token:
    (operation count, failures per role, seconds taken per role's share)."""
    import requests
    from rest_framework.authtoken.models import Token

    users = _with_teams(lake, users)
    headers = {
        role: {"Authorization": f"Token {Token.objects.create(user=users[role]).key}"} for role in ROLES
    }
    documents = {
        role: requests.get(
            f"{live_server.url}/api/schema/", headers={**headers[role], **JSON}, timeout=30
        ).json()
        for role in ROLES
    }
    assert all(documents[role] == documents[VIEWER] for role in ROLES), (
        "the roles see different schemas: fuzz them separately"
    )
    schema = schemathesis.openapi.from_url(
        f"{live_server.url}/api/schema/", headers={**headers[VIEWER], **JSON}
    )
    schema.config.update(base_url=live_server.url)
    real_ids = _real_ids(lake)
    # One keep-alive session per role: without one, every case opens a new session, so a new TCP
    # connection, a new live-server thread and a new database connection (about half the cost of a
    # request). schemathesis drops a ManagedCookiesSession's cookies after each call, so every case
    # is still sent on its own, as with a fresh session.
    sessions = {role: _SizedBodySession() for role in ROLES}
    callers = {
        role: (
            lambda case, h=headers[role], s=sessions[role]: case.call_and_validate(
                session=s, headers=h, checks=CHECKS
            )
        )
        for role in ROLES
    }
    try:
        # Bounded by EXAMPLES_PER_OPERATION cases per operation (not by a wall-clock budget, which
        # a loaded machine would break); the suite's durations report shows what it costs.
        return _fuzz_every_operation(schema, lambda op: _strategy(op, real_ids), callers)
    finally:
        for session in sessions.values():
            session.close()


def test_the_api_answers_every_request_without_a_server_error_and_as_documented(fuzz_report):
    """As the viewer, the operator, the admin and a team's operator (one generation of cases, sent
    as each role)."""
    operations, failures = fuzz_report

    assert operations >= 20, f"the schema lists only {operations} operations"
    for role in ROLES:
        assert not failures[role], f"{len(failures[role])} of {operations} operations failed as {role}:\n" + (
            "\n".join(failures[role])
        )


def test_the_schema_needs_a_role(live_server, client, no_role_user, viewer):
    """Anonymous visitors and users without a role do not get the schema."""
    import requests
    from rest_framework.authtoken.models import Token

    url = f"{live_server.url}/api/schema/"
    anonymous = requests.get(url, timeout=10)
    no_role = requests.get(
        url, headers={"Authorization": f"Token {Token.objects.create(user=no_role_user).key}"}, timeout=10
    )
    allowed = requests.get(
        url, headers={"Authorization": f"Token {Token.objects.create(user=viewer).key}"}, timeout=10
    )

    assert anonymous.status_code in (401, 403)
    assert no_role.status_code == 403
    assert allowed.status_code == 200


def test_the_schema_documents_the_error_body_on_every_operation(live_server, viewer):
    import requests
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=viewer).key
    document = requests.get(
        f"{live_server.url}/api/schema/", headers={"Authorization": f"Token {token}", **JSON}, timeout=10
    ).json()

    assert set(document["components"]["schemas"]["Error"]["required"]) == {"error", "field"}
    missing = []
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            expected = (
                {"401", "403"}
                | ({"404"} if "{" in path else set())
                | ({"400", "413"} if "requestBody" in operation else set())
            )
            for status in expected:
                schema_ref = (
                    responses.get(status, {}).get("content", {}).get("application/json", {}).get("schema")
                )
                if schema_ref != {"$ref": "#/components/schemas/Error"}:
                    missing.append(f"{method.upper()} {path} {status}")
    assert not missing, missing
