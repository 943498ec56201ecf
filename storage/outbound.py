"""HTTP to targets that users configure (alert webhooks, Iceberg REST catalogs): the one way out.

Every request made through ``OutboundAdapter``

- resolves the host once, checks every address it resolves to against a ``Policy`` and connects
  to the checked address (the ``Host`` header, TLS SNI and the certificate check keep the name), so
  a name that resolves elsewhere between the check and the connection (DNS rebinding) reaches
  nothing the policy refuses;
- follows no redirect: a 3xx answer is an error naming the status and the host it points to;
- never lets the remote answer into an error message: a failure names the status, the URL asked
  (without its query or credentials) and what went wrong on our side, not a body or a banner;
- inside a web request (``web_request_bounds``) waits at most ``WEB_CONNECT_SECONDS`` to connect
  and ``WEB_READ_SECONDS`` for each read, whatever longer timeouts the target's settings give;
- ignores ``HTTP(S)_PROXY`` (a proxy would resolve the name itself, defeating the check).

Plain Python (no Django): the caller passes its policy and timeouts.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import socket
import ssl
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import requests
from requests.adapters import HTTPAdapter

#: Inside a web request, no connect waits longer than this, and no read (``web_request_bounds``).
WEB_CONNECT_SECONDS = 3.0
WEB_READ_SECONDS = 5.0
#: At most this much of an error answer is read (and then thrown away: it is never shown).
MAX_ERROR_BODY_BYTES = 64 * 1024

_web_bounds: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "lakewarden_outbound_web_bounds", default=None
)

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class OutboundError(requests.exceptions.RequestException):
    """The target could not be reached or answered something unusable. The message names the
    URL, the status or the failure on our side, and is safe to show: no remote content."""


class TargetRefused(OutboundError):
    """The policy refuses an address the target's name resolves to (retrying cannot help)."""


@dataclass(frozen=True)
class Policy:
    """Which addresses a target may have. ``allow_private`` lets any address through; otherwise
    only public (global) addresses and those inside ``allowed_networks``. ``switch`` names the
    setting that turns private targets on, for the refusal's message."""

    allow_private: bool = True
    allowed_networks: tuple[Network, ...] = ()
    switch: str = ""

    def permits(self, address: Address) -> bool:
        return (
            self.allow_private
            or address.is_global
            or any(
                address.version == network.version and address in network for network in self.allowed_networks
            )
        )


#: Operator-configured targets (REST catalogs): any address, still pinned and without redirects.
TRUSTED = Policy()


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """``10.0.0.0/8``-style networks (a bare address is its own /32 or /128); ValueError names a bad one."""
    networks = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP network (such as 10.1.0.0/16 or 192.0.2.7)") from None
    return tuple(networks)


def resolve(host: str, port: int, policy: Policy) -> str:
    """The address to connect to for ``host``: every address it resolves to must pass ``policy``
    (one refused address refuses the host, as a name may be answered by any of them)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as error:
        raise OutboundError(f"the host {host} does not resolve: {error}") from None
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise OutboundError(f"the host {host} does not resolve")
    for address in addresses:
        ip = ipaddress.ip_address(address.split("%")[0])
        if not policy.permits(ip):
            switch = f" and {policy.switch} is off" if policy.switch else ""
            raise TargetRefused(f"{host} is in a private network ({ip}){switch}")
    return addresses[0]


def where(url: str) -> str:
    """``url`` as an error names it: scheme, host, port and path; no credentials, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


@contextlib.contextmanager
def web_request_bounds(
    connect: float = WEB_CONNECT_SECONDS, read: float = WEB_READ_SECONDS
) -> Iterator[None]:
    """Within this block (a web request), outbound connects and reads wait at most these."""
    token = _web_bounds.set((connect, read))
    try:
        yield
    finally:
        _web_bounds.reset(token)


def bounded(timeout: tuple[float, float]) -> tuple[float, float]:
    """``(connect, read)`` lowered to the web request's bounds when inside one."""
    bounds = _web_bounds.get()
    if bounds is None:
        return timeout
    return (min(timeout[0], bounds[0]), min(timeout[1], bounds[1]))


class OutboundAdapter(HTTPAdapter):
    """A ``requests`` adapter for every http(s) URL of a session (see the module's docstring).
    ``answer`` may be overridden to check or rewrite an answer of status 200-299 or 400+."""

    def __init__(self, *, policy: Policy, timeout: tuple[float, float]) -> None:
        super().__init__()
        self.policy = policy
        self.timeout = timeout

    def get_connection_with_tls_context(self, request, verify, proxies=None, cert=None):
        parts = urlsplit(request.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OutboundError(f"{where(request.url)} is not an http:// or https:// URL with a host")
        address = resolve(parts.hostname, parts.port or _default_port(parts), self.policy)
        host_params, pool_kwargs = self.build_connection_pool_key_attributes(request, verify, cert)
        host_params["host"] = f"[{address}]" if ":" in address else address
        if parts.scheme == "https":
            pool_kwargs["server_hostname"] = parts.hostname
        return self.poolmanager.connection_from_host(**host_params, pool_kwargs=pool_kwargs)

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        parts = urlsplit(request.url)
        request.headers["Host"] = _host_header(parts)
        connect, read = bounded(_pair(timeout) if timeout is not None else self.timeout)
        url = where(request.url)
        try:
            response = super().send(request, stream=True, timeout=(connect, read), verify=verify, cert=cert)
        except OutboundError:
            raise
        except requests.exceptions.RequestException as error:
            raise OutboundError(_failure(error, url, connect, read)) from None
        try:
            if 300 <= response.status_code < 400:
                target = urlsplit(response.headers.get("Location", ""))
                to = f" to {target.scheme}://{target.hostname}" if target.scheme and target.hostname else ""
                raise OutboundError(
                    f"{url} answered HTTP {response.status_code}, a redirect{to}; redirects are not "
                    "followed: configure the URL it points to"
                )
            if response.status_code >= 400:
                body = response.raw.read(MAX_ERROR_BODY_BYTES, decode_content=True) or b""
            elif not stream:
                body = response.raw.read(decode_content=True) or b""
            else:
                return response
        except OutboundError:
            response.close()
            raise
        except Exception as error:  # a reset or a timeout while reading the body
            response.close()
            raise OutboundError(f"the answer broke off: {_failure(error, url, connect, read)}") from None
        response.close()
        response._content = self.answer(response.status_code, url, body)
        response._content_consumed = True
        return response

    def answer(self, status: int, url: str, body: bytes) -> bytes:
        """The body the caller sees for an answer of ``status`` (200-299 or 400+). The default
        drops an error's body (callers look at the status) and keeps a success's."""
        return b"" if status >= 400 else body


def session(*, policy: Policy, timeout: tuple[float, float]) -> requests.Session:
    """A ``requests.Session`` whose every request goes through an ``OutboundAdapter``; it takes no
    proxy, ``.netrc`` or credential from the environment."""
    http = requests.Session()
    http.trust_env = False
    http.max_redirects = 0
    adapter = OutboundAdapter(policy=policy, timeout=timeout)
    http.mount("http://", adapter)
    http.mount("https://", adapter)
    return http


def _default_port(parts: SplitResult) -> int:
    return 443 if parts.scheme == "https" else 80


def _host_header(parts: SplitResult) -> str:
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{parts.port}" if parts.port and parts.port != _default_port(parts) else host


def _pair(timeout) -> tuple[float, float]:
    if isinstance(timeout, tuple):
        return (float(timeout[0]), float(timeout[1]))
    return (float(timeout), float(timeout))


def _failure(error: BaseException, url: str, connect: float, read: float) -> str:
    """What went wrong, in our words: the remote side's bytes (a banner, a reason) are not quoted.
    (The URL is never followed by a colon: ``.../tokens: x`` would read as a secret to mask.)"""
    if isinstance(error, requests.exceptions.ConnectTimeout):
        return f"no connection to {url} within {connect:g} s (timed out)"
    if isinstance(error, requests.exceptions.ReadTimeout):
        return f"no answer from {url} within {read:g} s (timed out)"
    causes = list(_chain(error))
    verify = next((c for c in causes if isinstance(c, ssl.SSLCertVerificationError)), None)
    if verify is not None:
        return f"the TLS certificate of {url} was refused ({verify.verify_message})"
    if any(isinstance(cause, ssl.SSLError) for cause in causes):
        return f"the TLS handshake with {url} failed"
    if any(isinstance(cause, ConnectionRefusedError) for cause in causes):
        return f"Connection refused by {url}"
    if any(isinstance(cause, TimeoutError | socket.timeout) for cause in causes):
        return f"no answer from {url} within {max(connect, read):g} s (timed out)"
    if any(isinstance(cause, ConnectionResetError) for cause in causes):
        return f"the connection to {url} was reset"
    if isinstance(error, requests.exceptions.ConnectionError):
        return f"the connection to {url} failed or the answer was not HTTP"
    return f"the request to {url} failed ({type(error).__name__})"


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and the exceptions urllib3 and requests wrap in args."""
    seen: set[int] = set()
    pending = [error]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        pending.extend(item for item in linked if isinstance(item, BaseException))
