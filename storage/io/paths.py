"""Local paths from what users and format libraries write: a plain path or a ``file:`` URI.

local_path("/lake/orders")                   # Path('/lake/orders')
local_path("file:///lake/my%20orders")       # Path('/lake/my orders')
local_path("file:/lake/orders")              # Spark and Hadoop spell local URIs so
local_path("s3://bucket/orders")             # PathNotAllowed: not a local location
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse


class PathNotAllowed(ValueError):
    """A location that is not a usable local path: another scheme, a NUL character, outside the
    allowed roots (callers that confine paths raise it too)."""


def is_local(location: str) -> bool:
    """True for a plain path or a ``file:`` URI; False for any other URI (``s3://``...)."""
    text = location.strip()
    return _is_file_uri(text) or "://" not in text


def local_path(location: str, *, percent_decoded: bool = True) -> Path:
    """The local path of a plain path or a ``file:`` URI (``file:///x``, ``file://host/x``,
    ``file:/x``); ``PathNotAllowed`` for other schemes and for NUL characters.

    Surrounding blanks are dropped and ``~`` is expanded. The path of a URI is percent-decoded
    (RFC 8089) unless ``percent_decoded`` is False: pyiceberg's file IO and Spark take the path of
    a ``file:`` URI they wrote literally, so paths read from Iceberg metadata keep their ``%``.
    """
    text = location.strip()
    if _is_file_uri(text) or "://" in text:
        parsed = urlparse(text)
        if parsed.scheme != "file":
            raise PathNotAllowed(f"only local paths and file:// URIs are supported, not {parsed.scheme}://")
        text = unquote(parsed.path) if percent_decoded else parsed.path
    if "\x00" in text:
        raise PathNotAllowed("the path contains a NUL character")
    return Path(text).expanduser()


def _is_file_uri(text: str) -> bool:
    return text[:5].lower() == "file:"
