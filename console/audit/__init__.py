"""The audit trail: an append-only row per operator or admin action (issue 16).

Who (user id and a username snapshot), when, from where (client address, user agent), what (an
action name such as ``process.kill``), on what (model, id, label), the outcome (HTTP status) and
details (the request's fields and the before/after of changed settings, secrets masked).

Rows come from ``AuditMiddleware`` (every state-changing request by a signed-in user to the console,
the API and the admin) and from signal handlers (logins, failed logins, role changes, changes to
catalogs, tables' overrides, storages and plugin configurations). Inside a request, what the signals
see is added to the request's one row; outside a request (a shell, a management command) each change
is a row of its own.
"""
