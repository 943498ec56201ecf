"""LDAP sign-in against a real OpenLDAP ``slapd`` (Debian's package) started and stopped by the
module: directory groups map to roles, a user in no mapped group is refused, a directory that is
down gives a clear error, and local accounts keep working beside it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from console.roles import user_role
from devtools.seaweedfs import free_port
from tests.security.sso_support.configure import sso_settings_apply
from tests.security.sso_support.slapd import ADMIN_DN, GROUPS, PEOPLE, Slapd, group_dn, slapd_binary

pytestmark = pytest.mark.django_db

LOCAL_PASSWORD = "correct horse battery"  # the users made by tests/conftest.py


@pytest.fixture(scope="module")
def directory(tmp_path_factory):
    if slapd_binary() is None:
        pytest.skip("Debian's slapd is not installed: apt-get install slapd ldap-utils")
    server = Slapd(tmp_path_factory.mktemp("slapd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def ldap_on(directory, settings, monkeypatch):
    sso_settings_apply(
        settings,
        monkeypatch,
        {
            "LAKEWARDEN_LDAP_SERVER_URI": directory.uri,
            "LAKEWARDEN_LDAP_BIND_DN": ADMIN_DN,
            "LAKEWARDEN_LDAP_BIND_PASSWORD": directory.admin_password,
            "LAKEWARDEN_LDAP_USER_SEARCH_BASE": PEOPLE,
            "LAKEWARDEN_LDAP_GROUP_SEARCH_BASE": GROUPS,
            "LAKEWARDEN_LDAP_VIEWER_GROUPS": group_dn("lw-viewers"),
            # DNs are compared case-insensitively, as LDAP does
            "LAKEWARDEN_LDAP_OPERATOR_GROUPS": group_dn("LW-Operators"),
            "LAKEWARDEN_LDAP_ADMIN_GROUPS": f"{group_dn('lw-admins')}; cn=nobody,{GROUPS}",
        },
    )
    return directory


def sign_in(username: str, password: str) -> tuple[Client, object]:
    client = Client(REMOTE_ADDR="10.1.2.3")
    return client, client.post(reverse("login"), {"username": username, "password": password})


def account(username: str):
    return get_user_model().objects.filter(username=username).first()


def role_groups(user) -> set[str]:
    return set(user.groups.filter(name__in=("viewer", "operator", "admin")).values_list("name", flat=True))


@pytest.mark.parametrize(("username", "role"), [("vera", "viewer"), ("otto", "operator"), ("alma", "admin")])
def test_directory_users_sign_in_with_the_role_their_groups_map_to(ldap_on, username, role):
    client, answer = sign_in(username, ldap_on.user_password)

    assert answer.status_code == 302 and answer["Location"] == reverse("console:overview")
    user = account(username)
    assert role_groups(user) == {role}
    assert user_role(user) == role
    assert not user.has_usable_password()  # the password stays in the directory
    assert (user.email, user.first_name, user.last_name) == (
        f"{username}@example.org",
        username.title(),
        "Tester",
    )
    assert client.session["_auth_user_backend"] == "console.sso.ldap_login.LakewardenLDAPBackend"
    assert client.get(reverse("console:overview")).status_code == 200


def test_a_directory_user_in_no_mapped_group_is_refused_and_no_account_is_made(ldap_on):
    client, answer = sign_in("nils", ldap_on.user_password)

    assert answer.status_code == 200
    page = answer.content.decode()
    assert "none of your groups gives access to Lakewarden" in page
    assert "didn't match" not in page
    assert account("nils") is None
    assert "_auth_user_id" not in client.session


def test_a_wrong_directory_password_is_the_usual_mismatch_and_makes_no_account(ldap_on):
    _, answer = sign_in("vera", "not the password")

    assert answer.status_code == 200
    assert "didn't match" in answer.content.decode()
    assert account("vera") is None


def test_a_directory_that_is_down_gives_a_clear_error_while_local_accounts_still_sign_in(
    ldap_on, settings, viewer
):
    settings.AUTH_LDAP_SERVER_URI = f"ldap://127.0.0.1:{free_port()}"  # nothing listens there

    _, answer = sign_in("vera", ldap_on.user_password)

    assert answer.status_code == 200
    page = answer.content.decode()
    assert f"The directory server ({settings.AUTH_LDAP_SERVER_URI}) cannot be reached" in page
    assert "didn't match" not in page
    assert account("vera") is None
    local_client, local = sign_in(viewer.username, LOCAL_PASSWORD)
    assert local.status_code == 302
    assert local_client.session["_auth_user_backend"] == "django.contrib.auth.backends.ModelBackend"


def test_a_group_membership_removed_in_the_directory_is_taken_away_at_the_next_sign_in(ldap_on):
    import ldap

    otto = f"uid=otto,{PEOPLE}"
    admin = ldap.initialize(ldap_on.uri)
    admin.simple_bind_s(ADMIN_DN, ldap_on.admin_password)
    try:
        assert sign_in("otto", ldap_on.user_password)[1].status_code == 302
        assert role_groups(account("otto")) == {"operator"}

        admin.modify_s(group_dn("lw-operators"), [(ldap.MOD_DELETE, "member", [otto.encode()])])
        assert sign_in("otto", ldap_on.user_password)[1].status_code == 302
        assert role_groups(account("otto")) == {"viewer"}

        admin.modify_s(group_dn("lw-viewers"), [(ldap.MOD_DELETE, "member", [otto.encode()])])
        client, answer = sign_in("otto", ldap_on.user_password)
        assert "none of your groups gives access" in answer.content.decode()
        assert role_groups(account("otto")) == set()  # an open session of otto's loses access too
        assert "_auth_user_id" not in client.session
    finally:
        for name in ("lw-operators", "lw-viewers"):
            try:
                admin.modify_s(group_dn(name), [(ldap.MOD_ADD, "member", [otto.encode()])])
            except ldap.TYPE_OR_VALUE_EXISTS:
                pass
        admin.unbind_s()


def test_a_directory_account_cannot_sign_into_a_local_account_of_the_same_name(ldap_on, django_user_model):
    from django.contrib.auth.models import Group

    local = django_user_model.objects.create_user(username="alma", password="local-only-password")
    local.groups.add(Group.objects.get_or_create(name="viewer")[0])

    _, answer = sign_in("alma", ldap_on.user_password)

    assert "A local Lakewarden account named “alma” already exists" in answer.content.decode()
    assert role_groups(local) == {"viewer"}  # the directory's admin group was not applied
    assert sign_in("alma", "local-only-password")[1].status_code == 302
