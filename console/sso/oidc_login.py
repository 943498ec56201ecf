"""OpenID Connect sign-in through mozilla-django-oidc (authorization code flow with PKCE).

``oidc_authenticate`` sends the browser to the provider; ``oidc_callback`` takes the code back,
and the backend exchanges it, verifies the ID token (signature, nonce, audience, issuer), reads the
user's claims and maps their groups to a role. Every failure (a state this browser did not start,
a nonce or signature that does not verify, a provider that cannot be reached, a user with no role)
ends on the login page with the reason, and no account is made. Both views answer 404 while OIDC
is off.
"""

from __future__ import annotations

import logging

import jwt
import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, user_login_failed
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_GET
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from console.sso.accounts import SsoLoginRefused, role_for_groups, sso_account_check, user_role_set
from console.teams.services import sso_teams_set

logger = logging.getLogger(__name__)


def provider_name() -> str:
    return getattr(settings, "LAKEWARDEN_OIDC_PROVIDER_NAME", "single sign-on")


def _require_oidc() -> None:
    if not getattr(settings, "LAKEWARDEN_OIDC_ENABLED", False):
        raise Http404("OpenID Connect sign-in is not configured")


class LakewardenOIDCBackend(OIDCAuthenticationBackend):
    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        if "nonce" in kwargs:  # the ID token (a signed userinfo answer carries no nonce)
            audience = payload.get("aud")
            audiences = audience if isinstance(audience, list) else [audience]
            if self.OIDC_RP_CLIENT_ID not in audiences:
                raise SuspiciousOperation("the ID token was issued to another client (aud)")
            issuer = getattr(settings, "LAKEWARDEN_OIDC_ISSUER", None)
            if issuer and payload.get("iss") != issuer:
                raise SuspiciousOperation(f"the ID token comes from another issuer ({payload.get('iss')})")
        return payload

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SsoLoginRefused(
                "Single sign-on failed: the provider described another user than the ID token's."
            )
        claims = {**payload, **userinfo}
        username_claim = getattr(settings, "LAKEWARDEN_OIDC_USERNAME_CLAIM", "preferred_username")
        username = str(claims.get(username_claim) or "").strip()
        if not username or len(username) > 150:
            raise SsoLoginRefused(
                f"Single sign-on failed: the provider sent no usable “{username_claim}” claim."
            )
        groups = claims.get(getattr(settings, "LAKEWARDEN_OIDC_GROUPS_CLAIM", "groups")) or []
        groups = [groups] if isinstance(groups, str) else [str(g) for g in groups]
        role = role_for_groups(groups, getattr(settings, "LAKEWARDEN_OIDC_ROLE_GROUPS", {}))
        user = sso_account_check(username=username, role=role, provider=provider_name())
        if user is None:
            user = get_user_model()(username=username)
            user.set_unusable_password()
        user.email = claims.get("email") or user.email
        user.first_name = (claims.get("given_name") or user.first_name)[:150]
        user.last_name = (claims.get("family_name") or user.last_name)[:150]
        user.save()
        user_role_set(user=user, role=role)
        sso_teams_set(user=user, groups=groups)  # the teams the groups map to (console/teams)
        return user


@require_GET
def oidc_authenticate(request: HttpRequest) -> HttpResponse:
    """The "Sign in with ..." button: redirect to the provider (state, nonce, PKCE kept in the session)."""
    _require_oidc()
    return OIDCAuthenticationRequestView.as_view()(request)


@require_GET
def oidc_callback(request: HttpRequest) -> HttpResponse:
    _require_oidc()
    return _CallbackView.as_view()(request)


class _CallbackView(OIDCAuthenticationCallbackView):
    def get(self, request):
        state = request.GET.get("state")
        if "code" in request.GET and state not in request.session.get("oidc_states", {}):
            return self.refuse(
                "Single sign-on failed: this answer does not belong to a sign-in started from this "
                "browser (unknown, reused or expired state). Start again from the login page."
            )
        try:
            return super().get(request)
        except SsoLoginRefused as refusal:
            return self.refuse(refusal.messages[0])
        except (SuspiciousOperation, jwt.InvalidTokenError) as error:
            return self.refuse(
                f"Single sign-on failed: the provider's ID token could not be verified ({error})."
            )
        except (requests.RequestException, ValueError) as error:
            logger.warning("OpenID provider call failed: %s", error)
            return self.refuse(
                f"Single sign-on failed: {provider_name()} could not be reached or refused the sign-in. Try again later."
            )

    def login_failure(self):
        error = self.request.GET.get("error")
        if error:
            return self.refuse(
                f"Single sign-on was refused or cancelled at {provider_name()} ({error[:80]})."
            )
        return self.refuse("Single sign-on failed: the account is disabled or the sign-in did not complete.")

    def refuse(self, message: str) -> HttpResponse:
        logger.warning(
            "OpenID Connect sign-in refused from %s: %s", self.request.META.get("REMOTE_ADDR"), message
        )
        user_login_failed.send(sender=__name__, credentials={"provider": "oidc"}, request=self.request)
        messages.error(self.request, message)
        return redirect(settings.LOGIN_URL)
