"""Teams and grants (issue 32): who may see and operate which catalog, namespace or table.

A team is a set of users (added by hand, or through SSO groups mapped to the team at each sign-in);
a grant gives a team a role (viewer, operator, owner) on a catalog, a namespace of a catalog (and
every namespace below it) or one table. Admins stay global.

Every surface asks one module, :mod:`console.teams.access`: ``visible(user, queryset)`` filters a
queryset of tables (or of rows that point at a table, such as processes) down to what the user may
see, and ``can(user, action, obj)`` answers one object permission. Changes go through
:mod:`console.teams.services`, which audits each of them.

Enforcement starts once a team exists: an install with no team keeps the global roles alone.
"""
