"""``{% sso_login_buttons next %}``: the "Sign in with ..." button, only while OpenID Connect is on."""

from __future__ import annotations

from urllib.parse import urlencode

from django import template
from django.conf import settings
from django.urls import reverse
from django.utils.html import format_html

from console.sso.oidc_login import provider_name

register = template.Library()


@register.simple_tag
def sso_login_buttons(next_url: str = "") -> str:
    if not getattr(settings, "LAKEWARDEN_OIDC_ENABLED", False):
        return ""
    href = reverse("oidc_authentication_init") + (f"?{urlencode({'next': next_url})}" if next_url else "")
    return format_html(
        '<p class="sso"><a class="button primary" href="{}">Sign in with {}</a></p>', href, provider_name()
    )
