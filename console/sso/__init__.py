"""Single sign-on: OpenID Connect (``oidc_login``, mozilla-django-oidc) and LDAP (``ldap_login``,
django-auth-ldap), each switched on by ``console/sso/config.py``.

Both map the provider's groups to Lakewarden's roles the same way (``accounts``): the user gets the
highest role any of their groups maps to, written into their role groups at every sign-in (so a
role taken away at the provider is taken away here at the next sign-in). A provider account whose
groups map to no role is refused with a message on the login page and no account is made; a
provider account whose name is a local account's (one with a password) is refused too, so a
provider cannot sign into an account it does not own.
"""
