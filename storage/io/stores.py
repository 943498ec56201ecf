"""Object stores: where a location lives and how to reach it, with its credentials.

A location is a local path, a ``file:`` URI, or an object-store URI (``s3://bucket/key``, and
``gs://``/``abfss://`` where pyarrow reaches them). Credentials travel as ``StoreOptions``: built
from a catalog's or root's ``s3.*`` properties (the names pyiceberg uses), over the environment
(``LAKEWARDEN_S3_*``, then the standard ``AWS_*`` variables). Each library gets them in its own
dialect (pyarrow.fs, pyiceberg FileIO properties, deltalake storage options); nothing here talks
HTTP itself. ``repr`` and ``masked()`` never show a secret.

    options = StoreOptions.from_properties({"s3.endpoint": "http://127.0.0.1:8333", ...})
    fs, path = filesystem("s3://lake/orders", options)      # (S3FileSystem, "lake/orders")
    normalise("s3://lake//orders/../x")                      # PathNotAllowed: ".." in the key
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from storage.io.paths import PathNotAllowed, is_local, local_path

#: Object-store schemes Lakewarden reaches (s3a/s3n are Hadoop's spellings of s3).
OBJECT_SCHEMES = frozenset({"s3", "s3a", "s3n", "gs", "gcs", "abfs", "abfss"})
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})

#: ``s3.*`` property -> StoreOptions field (pyiceberg's names; ``path-style-access`` is Java's).
_PROPERTY_FIELDS = {
    "s3.endpoint": "endpoint",
    "s3.access-key-id": "access_key",
    "s3.secret-access-key": "secret_key",
    "s3.session-token": "session_token",
    "s3.region": "region",
    "s3.path-style-access": "path_style",
    "s3.connect-timeout": "connect_timeout",
    "s3.request-timeout": "request_timeout",
}
#: Environment variables per field, first found wins (Lakewarden's, then the AWS SDK's).
_ENVIRONMENT = {
    "endpoint": ("LAKEWARDEN_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"),
    "access_key": ("LAKEWARDEN_S3_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
    "secret_key": ("LAKEWARDEN_S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
    "session_token": ("LAKEWARDEN_S3_SESSION_TOKEN", "AWS_SESSION_TOKEN"),
    "region": ("LAKEWARDEN_S3_REGION", "AWS_REGION", "AWS_DEFAULT_REGION"),
    "path_style": ("LAKEWARDEN_S3_PATH_STYLE",),
    "connect_timeout": ("LAKEWARDEN_S3_CONNECT_TIMEOUT",),
    "request_timeout": ("LAKEWARDEN_S3_REQUEST_TIMEOUT",),
}
_SECRET_FIELDS = frozenset({"secret_key", "session_token"})
_TRUE = frozenset({"1", "true", "yes", "on"})


class StoreError(OSError):
    """An object store refused or could not be reached; the message names the location and the
    store's own error, never a secret."""


#: object_store_config's names as deltalake's storage options spell them (the rest as they are)
_DELTA_NAMES = {
    "endpoint": "AWS_ENDPOINT_URL",
    "access_key_id": "AWS_ACCESS_KEY_ID",
    "secret_access_key": "AWS_SECRET_ACCESS_KEY",
    "session_token": "AWS_SESSION_TOKEN",
    "region": "AWS_REGION",
    "virtual_hosted_style_request": "AWS_VIRTUAL_HOSTED_STYLE_REQUEST",
    "allow_http": "AWS_ALLOW_HTTP",
}


@dataclass(frozen=True)
class StoreOptions:
    """How to reach an object store. Empty fields mean "the library's default"."""

    endpoint: str = ""
    access_key: str = ""
    secret_key: str = ""
    session_token: str = ""
    region: str = ""
    path_style: bool = True
    connect_timeout: float = 5.0
    request_timeout: float = 30.0

    # -- building --------------------------------------------------------------------------

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StoreOptions:
        environ = os.environ if environ is None else environ
        values: dict[str, str] = {}
        for name, variables in _ENVIRONMENT.items():
            for variable in variables:
                if environ.get(variable):
                    values[name] = environ[variable]
                    break
        return cls()._with(values)

    @classmethod
    def from_properties(
        cls, properties: Mapping[str, object] | None, environ: Mapping[str, str] | None = None
    ) -> StoreOptions:
        """``s3.*`` properties (a catalog's or a root's) over the environment's defaults."""
        values = {
            _PROPERTY_FIELDS[key]: str(value)
            for key, value in (properties or {}).items()
            if key in _PROPERTY_FIELDS and value not in (None, "")
        }
        return cls.from_env(environ)._with(values)

    def _with(self, values: Mapping[str, str]) -> StoreOptions:
        changes: dict[str, Any] = {}
        for name, text in values.items():
            if name == "path_style":
                changes[name] = str(text).strip().lower() in _TRUE
            elif name in ("connect_timeout", "request_timeout"):
                try:
                    changes[name] = float(text)
                except ValueError:
                    raise ValueError(
                        f"{name.replace('_', '-')} must be a number of seconds, not {text!r}"
                    ) from None
            else:
                changes[name] = str(text).strip()
        return replace(self, **changes)

    # -- each library's dialect ---------------------------------------------------------------

    def properties(self) -> dict[str, str]:
        """pyiceberg FileIO properties (``s3.*``); the secret is in them: do not log."""
        props = {
            "s3.endpoint": self.endpoint,
            "s3.access-key-id": self.access_key,
            "s3.secret-access-key": self.secret_key,
            "s3.session-token": self.session_token,
            "s3.region": self.region,
            "s3.connect-timeout": str(self.connect_timeout),
            "s3.request-timeout": str(self.request_timeout),
        }
        if not self.path_style:
            props["s3.force-virtual-addressing"] = "true"
        return {key: value for key, value in props.items() if value}

    def endpoint_url(self) -> str:
        """The endpoint as a URL, https when it is written without a scheme (as ``s3_filesystem``
        reads it); "" for the library's default."""
        if not self.endpoint or "://" in self.endpoint:
            return self.endpoint
        return f"https://{self.endpoint}"

    def object_store_config(self) -> dict[str, str]:
        """object_store's settings (the Rust client of deltalake, hudi-rs and obstore), in its own
        lower-case names: the store's (credentials, region, endpoint, addressing) and the client's
        (``allow_http`` for an http endpoint, the timeouts); unset ones left out. The secret is in
        them: do not log."""
        endpoint = self.endpoint_url()
        config = {
            "endpoint": endpoint,
            "access_key_id": self.access_key,
            "secret_access_key": self.secret_key,
            "session_token": self.session_token,
            "region": self.region,
            "virtual_hosted_style_request": "false" if self.path_style else "true",
            "allow_http": "true" if endpoint.startswith("http://") else "",
            "timeout": f"{int(self.request_timeout)}s",
            "connect_timeout": f"{int(self.connect_timeout)}s",
        }
        return {key: value for key, value in config.items() if value}

    def delta_options(self) -> dict[str, str]:
        """deltalake storage options: ``object_store_config`` in deltalake's AWS_* spelling, the
        region defaulting to us-east-1, the instance metadata service off when keys are given.
        ``conditional_put`` is set explicitly (it is deltalake 1.x's default too): each commit
        creates ``_delta_log/NNN.json`` with ``If-None-Match: *``, so a store refuses (412) a
        second writer's commit of the same version instead of letting it overwrite the first; the
        store must honour it (AWS S3, MinIO, SeaweedFS, R2 do) for two writers to be safe."""
        options = {"conditional_put": "etag", "AWS_REGION": "us-east-1"}
        for key, value in self.object_store_config().items():
            options[_DELTA_NAMES.get(key, key)] = value
        if self.access_key:
            options["AWS_EC2_METADATA_DISABLED"] = "true"
        return options

    def hudi_options(self) -> dict[str, str]:
        """hudi-rs (object_store) storage options: the same keys, lower-case."""
        return {key.lower(): value for key, value in self.delta_options().items() if key.isupper()}

    def s3_filesystem(self) -> pafs.S3FileSystem:
        kwargs: dict[str, object] = {
            "connect_timeout": self.connect_timeout,
            "request_timeout": self.request_timeout,
            "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=3),
            "force_virtual_addressing": not self.path_style,
        }
        if self.access_key:
            kwargs["access_key"] = self.access_key
            kwargs["secret_key"] = self.secret_key
            if self.session_token:
                kwargs["session_token"] = self.session_token
        if self.region:
            kwargs["region"] = self.region
        if self.endpoint:
            parsed = urlparse(self.endpoint_url())
            kwargs["endpoint_override"] = parsed.netloc + parsed.path.rstrip("/")
            kwargs["scheme"] = parsed.scheme or "https"
        return pafs.S3FileSystem(**kwargs)

    # -- carrying and showing ---------------------------------------------------------------

    def to_json(self) -> str:
        """For Spark task options (Spark redacts option values whose key names a secret)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> StoreOptions:
        data = json.loads(text) if text else {}
        names = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in names})

    def masked(self) -> dict[str, object]:
        return {
            key: ("********" if key in _SECRET_FIELDS and value else value)
            for key, value in asdict(self).items()
        }

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{key}={value!r}" for key, value in self.masked().items() if value not in ("", None)
        )
        return f"StoreOptions({shown})"

    __str__ = __repr__


# -- locations -------------------------------------------------------------------------------


def scheme(location: str) -> str:
    """``s3``, ``gs``... for an object-store URI; ``""`` for a local path or ``file:`` URI."""
    if is_local(location):
        return ""
    return location.split("://", 1)[0].lower()


def is_object_store(location: str) -> bool:
    return scheme(location) in OBJECT_SCHEMES


def normalise(location: str) -> str:
    """The canonical URI of an object-store location: lower-case scheme (``s3a`` -> ``s3``), no
    trailing slash; ``PathNotAllowed`` for keys that play tricks (``..`` or ``.`` segments, empty
    segments, percent-encoded slashes or dots, backslashes, NUL) or for an unknown scheme.

    Local locations are returned as their absolute path (no symlink resolution here)."""
    text = location.strip()
    if "\x00" in text:
        raise PathNotAllowed("the location contains a NUL character")
    if is_local(text):
        return os.path.abspath(local_path(text))
    parsed = urlparse(text)
    found = parsed.scheme.lower()
    if found not in OBJECT_SCHEMES:
        raise PathNotAllowed(
            f"{found}:// locations are not supported (use a local path, s3://, gs:// or abfss://)"
        )
    bucket = parsed.netloc
    if not bucket or "@" in bucket and found in S3_SCHEMES:
        raise PathNotAllowed(f"{location} names no bucket")
    key = parsed.path
    if parsed.query or parsed.fragment or parsed.params:
        raise PathNotAllowed(f"{location}: an object key may not carry ?, # or ; parts")
    lowered = key.lower()
    if "\\" in key or "%2f" in lowered or "%2e" in lowered or "%5c" in lowered or "%00" in lowered:
        raise PathNotAllowed(f"{location}: percent-encoded separators and dots are not allowed in a key")
    stripped = key.strip("/")
    segments = stripped.split("/") if stripped else []
    if any(segment in ("", ".", "..") for segment in segments):
        raise PathNotAllowed(f"{location}: the key has empty, '.' or '..' segments")
    canonical = "s3" if found in S3_SCHEMES else found
    return f"{canonical}://{bucket}/{'/'.join(segments)}".rstrip("/")


def is_within(location: str, root: str) -> bool:
    """True when the normalised ``location`` is ``root`` or lies under it, at a segment boundary."""
    location, root = normalise(location), normalise(root)
    if is_local(root) != is_local(location):
        return False
    if is_local(root):
        return location == root or location.startswith(root.rstrip("/") + "/")
    return location == root or location.startswith(root + "/")


def join(location: str, *parts: str) -> str:
    """``location`` joined with relative parts, the same way for paths and URIs."""
    base = location.rstrip("/")
    for part in parts:
        base = f"{base}/{part.strip('/')}"
    return base


def filesystem(location: str, options: StoreOptions | None = None) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system and the path on it (``bucket/key`` on S3, absolute locally)."""
    if is_local(location):
        return pafs.LocalFileSystem(), os.path.abspath(local_path(location))
    found = scheme(location)
    if found in S3_SCHEMES:
        options = options if options is not None else StoreOptions.from_env()
        parsed = urlparse(location)
        return options.s3_filesystem(), f"{parsed.netloc}{unquote(parsed.path)}".rstrip("/")
    if found in OBJECT_SCHEMES:
        try:
            return pafs.FileSystem.from_uri(location)
        except Exception as error:  # pyarrow built without GCS/Azure, bad account name...
            raise StoreError(f"cannot reach {location}: {error}") from None
    raise PathNotAllowed(f"{found}:// locations are not supported")


def uri(location: str, fs_path: str) -> str:
    """Turn a path on ``filesystem(location)`` back into a location of the same kind."""
    if is_local(location):
        return fs_path
    return f"{scheme(location)}://{fs_path.lstrip('/')}"


def describe_error(location: str, error: BaseException) -> str:
    """A one-line message naming the location and the store's error (no secrets: pyarrow and the
    AWS SDK do not echo credentials, and the options are never formatted into it)."""
    text = " ".join(str(error).split())
    return f"{location}: {text}" if text else f"{location}: {type(error).__name__}"


def parent(location: str) -> str:
    return posixpath.dirname(location.rstrip("/"))
