"""Security plumbing: the Content-Security-Policy header and masking of secrets in log records."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse

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

MASK = "********"

# Key names whose values are secrets: db_password, AWS_SECRET_ACCESS_KEY, client-secret, api_token...
SECRET_KEY_WORDS = (
    r"password|passwd|pwd|secret|token|credential|dsn|api[_-]?key|access[_-]?key|private[_-]?key"
)
_SECRET_KEY = re.compile(rf"(?:{SECRET_KEY_WORDS})", re.IGNORECASE)

# key=value, key: value, "key": "value", 'key': 'value' (dict reprs, JSON, DSNs, query strings).
_KEY_VALUE = re.compile(
    rf"""
    (?P<key>[\w.-]*(?:{SECRET_KEY_WORDS})[\w.-]*)   # a key naming a secret,
    (?<!error)(?<!exception)(?<!warning)            # not an exception class (TokenError: ...)
    (?P<sep>["']?\s*[:=]\s*)                        # its separator, after an optional closing quote
    (?:
        (?P<quote>["'])(?P<quoted>(?:\\.|(?!(?P=quote)).)*)(?P=quote)   # a quoted value
      | (?P<bare>[^\s,;&)}}\]"']+)                                        # or a bare one
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
# scheme://user:password@host: the password part of any URL with credentials.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<password>[^\s/]+)(?=@)", re.IGNORECASE
)
# Authorization headers: "Token abc", "Bearer abc", "Basic abc".
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Token|Bearer|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")


def _mask_key_value(match: re.Match) -> str:
    if match.group("quote") is not None:
        quote = match.group("quote")
        return f"{match.group('key')}{match.group('sep')}{quote}{MASK}{quote}"
    return f"{match.group('key')}{match.group('sep')}{MASK}"


def mask_secrets_in_text(text: str) -> str:
    """``text`` with the values of secret-named keys, URL passwords and auth tokens masked."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}", text)
    text = _KEY_VALUE.sub(_mask_key_value, text)
    return _AUTH_SCHEME.sub(lambda m: f"{m.group('scheme')} {MASK}", text)


class SecretMaskingFilter(logging.Filter):
    """Masks secrets in a record before any handler formats it: the message with its arguments
    merged in, the exception text, and ``extra`` attributes named like secrets.

    Installed on every handler of ``LOGGING`` (see console/settings_security.py); it changes the
    record itself, so handlers after it (on the same logger) see the masked record too.
    """

    _STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        masked = mask_secrets_in_text(message)
        if masked != message or record.args:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_secrets_in_text(record.exc_text)
        for name, value in list(vars(record).items()):
            if name not in self._STANDARD and _SECRET_KEY.search(name) and value is not None:
                setattr(record, name, MASK)
        return True
