"""Security plumbing: the Content-Security-Policy header and masking of secrets in log records."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from storage.secrets import MASK, is_secret_key, mask_text

# --- Content-Security-Policy ----------------------------------------------------------------------

DEFAULT_CSP = {
    "default-src": "'self'",
    # No inline scripts anywhere in the console: htmx and lakewarden.js are files under /static/.
    "script-src": "'self'",
    # Bars and charts size themselves with style attributes, and htmx adds its indicator styles.
    "style-src": "'self' 'unsafe-inline'",
    "img-src": "'self' data:",
    "font-src": "'self'",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "form-action": "'self'",
    "frame-ancestors": "'none'",
}


def csp_header_value(policy: dict[str, str]) -> str:
    return "; ".join(f"{directive} {sources}".strip() for directive, sources in policy.items())


class ContentSecurityPolicyMiddleware:
    """Sets ``Content-Security-Policy`` on every response that has none yet.

    ``LAKEWARDEN_CSP`` (a directive -> sources dict) replaces the default policy;
    ``LAKEWARDEN_CSP_OVERRIDES`` maps a path prefix to directives that replace the policy's for
    that prefix only (the Swagger UI page initialises itself with an inline script).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        policy = dict(getattr(settings, "LAKEWARDEN_CSP", DEFAULT_CSP))
        self.default = csp_header_value(policy)
        self.overrides = [
            (prefix, csp_header_value({**policy, **directives}))
            for prefix, directives in getattr(settings, "LAKEWARDEN_CSP_OVERRIDES", {}).items()
        ]
        self.report_only = getattr(settings, "LAKEWARDEN_CSP_REPORT_ONLY", False)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        header = "Content-Security-Policy-Report-Only" if self.report_only else "Content-Security-Policy"
        if header not in response:
            value = self.default
            for prefix, override in self.overrides:
                if request.path.startswith(prefix):
                    value = override
                    break
            response[header] = value
        return response


# --- secrets in logs ------------------------------------------------------------------------------


class SecretMaskingFilter(logging.Filter):
    """Masks secrets in a record before any handler formats it: the message with its arguments
    merged in, the exception text, and ``extra`` attributes named like secrets.

    Installed on every handler of ``LOGGING`` (see LOGGING in console/settings.py); it changes the
    record itself, so handlers after it (on the same logger) see the masked record too.
    """

    _STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        masked = mask_text(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_text(record.exc_text)
        for name, value in list(vars(record).items()):
            if name not in self._STANDARD and is_secret_key(name) and value is not None:
                setattr(record, name, MASK)
        return True
