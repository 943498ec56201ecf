"""What is secret, and how it is masked: the one place that decides (plain Python, no Django).

Used wherever configuration or text is shown or logged: catalog properties and process-factory
properties in the API and console, storage configurations, error messages of storages, and the log
filter. A key is secret by name (``is_secret_key``): known credential keys of pyiceberg, deltalake /
object_store, Hudi and Kerberos, and name patterns (password, secret, token, credential, api key,
private key, SAS, keytab, Authorization...). Identifiers stay visible: ``s3.access-key-id``,
``client_id``, ``adls.account-name``, ``token-endpoint``, ``oauth2-server-uri``, ``warehouse``,
``uri`` (only the password inside a URL is masked, wherever it appears).

    mask_mapping({"uri": "postgresql://cat:pw@db/c", "token": "abc"})
    == {"uri": "postgresql://cat:********@db/c", "token": "********"}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "********"

# --- which keys are secret ----------------------------------------------------------------------------

# A word of a key containing one of these is secret: PGPASSWORD, db_password, clientSecret, tokens...
_SECRET_ROOTS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "keytab",
    "apikey",
    "privatekey",
)
# Whole words that are secret on their own.
_SECRET_WORDS = frozenset({"pwd", "sas", "dsn", "cookie", "authorization", "accesskey", "signature"})
# Two words that together name a secret: private-key, api_key, account-key (adls, azure), access_key
# (object_store's Azure account-key alias; ambiguous ``fs.s3a.access.key`` style keys are masked too),
# connection-string (Azure: carries the account key), sse-customer-key...
_SECRET_PAIRS = frozenset(
    {
        ("private", "key"),
        ("api", "key"),
        ("access", "key"),
        ("account", "key"),
        ("master", "key"),
        ("customer", "key"),
        ("encryption", "key"),
        ("shared", "key"),
        ("signing", "key"),
        ("connection", "string"),
    }
)
# A secret word followed by one of these names something about the secret, not the secret itself:
# token-endpoint, gcs.oauth2.token-expires-at, credentials-provider, password-file, secret-name...
_NOT_SECRET_NEXT = frozenset(
    {
        "endpoint",
        "uri",
        "url",
        "server",
        "expires",
        "expiry",
        "expiration",
        "type",
        "file",
        "path",
        "dir",
        "location",
        "ttl",
        "lifetime",
        "refresh",
        "exchange",
        "provider",
        "scope",
        "audience",
        "enabled",
        "name",
        "policy",
        "length",
    }
)
# After a pair: access-key-id, kms-key-id, private_key_id are identifiers.
_NOT_SECRET_AFTER_PAIR = _NOT_SECRET_NEXT | {"id"}
# Exception class names (TokenError, PasswordResetWarning) are not keys of secrets.
_NOT_SECRET_LAST = frozenset({"error", "exception", "warning"})

_SEPARATORS = re.compile(r"[^A-Za-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def _words(key: str) -> list[str]:
    words: list[str] = []
    for chunk in _SEPARATORS.split(key):
        words.extend(part.lower() for part in _CAMEL.split(chunk) if part)
    return words


def is_secret_key(key: str, *, secret_keys: Iterable[str] = ()) -> bool:
    """True when values under ``key`` are secrets (``secret_keys``: names a plugin declares secret).

    By name: ``password``/``passwd``/``pwd``/``passphrase``, ``secret``, ``token``, ``credential``,
    ``keytab``, ``dsn``, ``sas``, ``cookie``, ``authorization`` (``header.Authorization``), a last
    word ``auth`` (``basic_auth``), and the pairs private key, api key, access key (but not access
    key *id*), account key, master key, customer key, encryption key, connection string. A secret word
    followed by a qualifier (``token-endpoint``, ``token-expires-at``, ``password-file``) names
    something about the secret and is not masked.
    """
    if not isinstance(key, str) or not key:
        return False
    if key.lower() in {k.lower() for k in secret_keys}:
        return True
    words = _words(key)
    if not words or words[-1] in _NOT_SECRET_LAST:
        return False
    for index, word in enumerate(words):
        following = words[index + 1] if index + 1 < len(words) else None
        if following in _NOT_SECRET_NEXT:
            continue
        if word in _SECRET_WORDS or any(root in word for root in _SECRET_ROOTS):
            return True
        if word.endswith("accesskey") or word.endswith("accountkey"):
            return True
        if following is not None and (word, following) in _SECRET_PAIRS:
            after = words[index + 2] if index + 2 < len(words) else None
            if after not in _NOT_SECRET_AFTER_PAIR:
                return True
    return words[-1] == "auth"


# --- URLs and DSNs --------------------------------------------------------------------------------------

# scheme://user:password@host (the password may hold '@' and ':'); any URL in any text.
_URL_PASSWORD = re.compile(
    r"(?P<head>\b[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<password>[^\s/]+)(?=@)", re.IGNORECASE
)
# ?password=...&token=...: query parameters of a URL whose names are secret (or SAS signatures).
_QUERY_PARAM = re.compile(r"(?P<head>[?&;](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&;#\s'\"]*)")
_QUERY_SECRET_NAMES = frozenset({"sig", "x-amz-signature", "x-amz-security-token", "x-goog-signature"})
# libpq keyword DSN: ``host=db user=lake password=secret`` or ``password='se cret'``.
_KEYWORD_PASSWORD = re.compile(
    r"(?<![\w?&;.\-])(?P<head>(?:password|passwd|pwd)\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^\s'][^\s]*)",
    re.IGNORECASE,
)


def mask_url(text: str) -> str:
    """``text`` with every URL or DSN password masked: ``scheme://user:secret@host``, secret query
    parameters (``?password=``, ``&token=``, SAS ``sig=``) and libpq ``password=...`` keywords;
    the rest (user, host, port, database) unchanged, so one still sees where it points."""
    if not isinstance(text, str) or not text:
        return text
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}", text)
    if "=" in text:
        text = _QUERY_PARAM.sub(_mask_query_param, text)
        text = _KEYWORD_PASSWORD.sub(lambda m: f"{m.group('head')}{MASK}", text)
    return text


def _mask_query_param(match: re.Match) -> str:
    name = match.group("name")
    if match.group("value") and (name.lower() in _QUERY_SECRET_NAMES or is_secret_key(name)):
        return f"{match.group('head')}{MASK}"
    return match.group(0)


# --- values and mappings ----------------------------------------------------------------------------


def mask_value(key: str, value: Any, *, secret_keys: Iterable[str] = ()) -> Any:
    """``value`` safe to show under ``key``.

    A secret key's value is masked whole, except a URL or DSN, which keeps everything but its
    password (an empty string and None stay as they are, so a form shows "not set"). Any other
    string has the passwords of URLs inside it masked. Mappings and lists are masked recursively;
    under a secret key every leaf is masked.
    """
    secret_keys = tuple(secret_keys)
    return _mask(key, value, secret_keys, is_secret_key(key, secret_keys=secret_keys))


def _mask(key: str, value: Any, secret_keys: tuple[str, ...], secret: bool) -> Any:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return {
            k: _mask(str(k), v, secret_keys, secret or is_secret_key(str(k), secret_keys=secret_keys))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_mask(key, item, secret_keys, secret) for item in value]
    if isinstance(value, str):
        masked = mask_url(value)
        if secret and masked == value:
            return MASK if value else value
        return masked
    return MASK if secret else value


def mask_mapping(mapping: Mapping[str, Any] | None, *, secret_keys: Iterable[str] = ()) -> dict[str, Any]:
    """A copy of ``mapping`` safe to show: secret keys masked (see ``mask_value``), URL passwords in
    every other value masked, nested mappings and lists too."""
    secret_keys = tuple(secret_keys)
    return {
        key: mask_value(str(key), value, secret_keys=secret_keys) for key, value in (mapping or {}).items()
    }


def merge_secrets(
    old: Mapping[str, Any] | None, new: Mapping[str, Any] | None, *, secret_keys: Iterable[str] = ()
) -> dict[str, Any]:
    """What an edit form means (secrets are write-only fields): ``new``, where a secret key sent
    blank (``""`` or None) or as the mask keeps its ``old`` value, and any value sent back exactly as
    it was shown (a URL with its password masked) keeps the stored one. Keys missing from ``new``
    are dropped, as before."""
    old = old or {}
    secret_keys = tuple(secret_keys)
    merged: dict[str, Any] = {}
    for key, value in (new or {}).items():
        if key not in old:
            merged[key] = value
            continue
        stored = old[key]
        if isinstance(value, Mapping) and isinstance(stored, Mapping):
            merged[key] = merge_secrets(stored, value, secret_keys=secret_keys)
        elif is_secret_key(str(key), secret_keys=secret_keys) and (value is None or value in ("", MASK)):
            merged[key] = stored
        elif value != stored and value == mask_value(str(key), stored, secret_keys=secret_keys):
            merged[key] = stored
        else:
            merged[key] = value
    return merged


# --- free text (logs, error messages) --------------------------------------------------------------

_TEXT_KEY_ROOTS = (
    r"password|passwd|passphrase|pwd|secret|token|credential|keytab|dsn|cookie|authorization|auth"
    r"|api[_-]?key|access[_-]?key|private[_-]?key|account[_-]?key|sas[_-]?key|connection[_-]?string"
)
# key=value, key: value, "key": "value", 'key': 'value' (dict reprs, JSON, DSNs, query strings,
# headers). The key is then judged by is_secret_key.
_KEY_VALUE = re.compile(
    rf"""
    (?P<key>[\w.-]*(?:{_TEXT_KEY_ROOTS})[\w.-]*)
    (?P<sep>["']?\s*[:=]\s*)
    (?P<scheme>(?:Bearer|Basic|Token|Digest|Negotiate)\s+)?
    (?:
        (?P<quote>["'])(?P<quoted>(?:\\.|(?!(?P=quote)).)*)(?P=quote)
      | (?P<bare>[^\s,;&)}}\]"']+)
    )
    """,
    re.IGNORECASE | re.VERBOSE,
)
# Authorization header values: "Token abc", "Bearer abc", "Basic abc".
_AUTH_SCHEME = re.compile(r"\b(?P<scheme>Token|Bearer|Basic)\s+(?P<value>[A-Za-z0-9._~+/=-]{8,})")


def _mask_key_value(match: re.Match) -> str:
    scheme = match.group("scheme") or ""
    if match.group("quote") is not None:
        quote = match.group("quote")
        return f"{match.group('key')}{match.group('sep')}{scheme}{quote}{MASK}{quote}"
    return f"{match.group('key')}{match.group('sep')}{scheme}{MASK}"


def mask_text(text: str, secrets: Iterable[Any] = ()) -> str:
    """``text`` (a log line, an error message) with secrets masked: the values of secret-named keys
    (``password=x``, ``"token": "x"``, ``Authorization: Bearer x``), URL and DSN passwords, auth
    header tokens, and every occurrence of the given ``secrets`` (known secret values, e.g. a
    storage's configured password; a URL among them has its password masked too)."""
    if not isinstance(text, str) or not text:
        return text
    text = mask_url(text)
    known: set[str] = set()
    for secret in secrets:
        if secret is None or secret == "":
            continue
        secret = str(secret)
        known.add(secret)
        for password in _URL_PASSWORD.finditer(secret):
            known.add(password.group("password"))
        for keyword in _KEYWORD_PASSWORD.finditer(secret):  # a libpq DSN's password
            value = keyword.group("value")
            known.add(value[1:-1] if value.startswith("'") else value)
    for secret in sorted(known, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _mask_key_values(text)
    return _AUTH_SCHEME.sub(lambda m: f"{m.group('scheme')} {MASK}", text)


def _mask_key_values(text: str) -> str:
    # Not re.sub: after a key that is not secret (TokenError: ...) the scan resumes right after the
    # key, so a secret inside what looked like its value is still found.
    parts: list[str] = []
    position = 0
    while (match := _KEY_VALUE.search(text, position)) is not None:
        if is_secret_key(match.group("key")):
            parts.append(text[position : match.start()] + _mask_key_value(match))
            position = match.end()
        else:
            parts.append(text[position : match.end("key")])
            position = match.end("key")
    parts.append(text[position:])
    return "".join(parts)


__all__ = [
    "MASK",
    "is_secret_key",
    "mask_mapping",
    "mask_text",
    "mask_url",
    "mask_value",
    "merge_secrets",
]
