"""Whole S3 objects in one request each: metadata files read from start to end (Iceberg manifest
lists and manifests) through object_store (PyPI ``obstore``, the Rust client deltalake and hudi-rs
use too), one GET per object.

pyarrow's S3 file system opens every file with a HEAD (its size) before the GET, and its AWS SDK
spends about 0.3 ms of CPU per request in the calling process: a listing of 500 manifests made
1,002 requests and lost about a third of its time to them (bench/RESULTS.md, "listing on the
object store"). Reading the same bytes with one GET each halves the store's work and most of ours.

The fast path is taken only where it is known to read the same object pyarrow would:

- an ``s3://`` (``s3a``, ``s3n``) location, with the access key and secret given explicitly and
  an endpoint or a region (no credential chain, instance profile or region lookup to mimic);
- no FileIO property it does not understand (``OneGetReads.for_properties``): remote signing, a
  proxy, an assumed role... leave the read to pyarrow;
- not in a process forked after this one made a request: object_store's runtime does not survive
  ``fork`` (a child's first request would hang), so a forked child keeps to pyarrow for its life.

Any failure of the fast path (missing object, refused, odd key) is not reported from here: the
caller reads the object the usual way, whose error (or bytes) stand. So this can only make a read
cheaper, never answer differently.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from storage.io.stores import S3_SCHEMES, StoreOptions

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

log = logging.getLogger(__name__)

#: pyiceberg FileIO properties this reader understands; any other ``s3.``/``client.`` property
#: (remote signing, proxies, roles, anonymous access...) leaves the read to pyarrow.
KNOWN_PROPERTIES = frozenset(
    {
        "s3.endpoint",
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "s3.region",
        "s3.path-style-access",
        "s3.force-virtual-addressing",
        "s3.connect-timeout",
        "s3.request-timeout",
    }
)
_STORE_PREFIXES = ("s3.", "client.", "adls.", "gcs.", "hf.", "oss.")
_TRUE = frozenset({"1", "true", "yes", "on"})

# object_store's runtime starts with a process's first request and is lost in a forked child
_state = {"requested": False, "forked_after_request": False}


def _after_fork_in_child() -> None:
    if _state["requested"]:
        _state["forked_after_request"] = True


os.register_at_fork(after_in_child=_after_fork_in_child)


def _obstore() -> Any:
    try:
        import obstore
    except ImportError:  # an install without it reads through pyarrow, as before
        return None
    return obstore


class OneGetReads:
    """Reads whole S3 objects with one GET each; ``read`` answers None where it cannot (the
    caller then reads the object its usual way). Thread-safe: a listing reads ahead on threads."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_properties(cls, properties: Mapping[str, Any]) -> OneGetReads | None:
        """The reader for a pyiceberg FileIO's properties, or None where the fast path is not
        known to read what pyarrow reads (see the module's docstring)."""
        if _obstore() is None or _state["forked_after_request"]:
            return None
        if any(key.startswith(_STORE_PREFIXES) and key not in KNOWN_PROPERTIES for key in properties):
            return None
        options = StoreOptions.from_properties(properties, environ={})
        if str(properties.get("s3.force-virtual-addressing", "")).strip().lower() in _TRUE:
            options = replace(options, path_style=False)
        if not (options.access_key and options.secret_key) or not (options.endpoint or options.region):
            return None
        return _reads_for(options)

    def read(self, location: str) -> Any:
        """The whole object (a buffer) or None: not an S3 location, a forked process, or the
        request failed (the caller's own read then says why)."""
        parsed = urlparse(location)
        if parsed.scheme.lower() not in S3_SCHEMES or not parsed.netloc or _state["forked_after_request"]:
            return None
        obstore = _obstore()
        key = unquote(parsed.path).lstrip("/")
        try:
            store = self._store(parsed.netloc)
            _state["requested"] = True
            return obstore.get(store, key).bytes()
        except Exception as error:  # any refusal: the caller reads it through pyarrow
            log.debug("one-GET read of %s failed, reading it through pyarrow: %s", location, error)
            return None

    def _store(self, bucket: str) -> Any:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._make_store(bucket)
            return store

    def _make_store(self, bucket: str) -> Any:
        from obstore.store import S3Store

        options = self.options
        config: S3Config = {
            "access_key_id": options.access_key,
            "secret_access_key": options.secret_key,
            "region": options.region or "us-east-1",
            "virtual_hosted_style_request": not options.path_style,
        }
        if options.session_token:
            config["session_token"] = options.session_token
        if options.endpoint:
            config["endpoint"] = (
                options.endpoint if "://" in options.endpoint else f"https://{options.endpoint}"
            )
        client: ClientConfig = {
            "connect_timeout": timedelta(seconds=options.connect_timeout),
            "timeout": timedelta(seconds=options.request_timeout),
            "allow_http": str(config.get("endpoint", "")).startswith("http://"),
        }
        # one attempt: a failed read is made again through pyarrow, whose own retries (three
        # attempts, stores.py) then apply, so a dead store costs one timeout more than before
        retry: RetryConfig = {"max_retries": 0, "retry_timeout": timedelta(seconds=options.request_timeout)}
        return S3Store(bucket, config=config, client_options=client, retry_config=retry)


@functools.lru_cache(maxsize=32)
def _reads_for(options: StoreOptions) -> OneGetReads:
    """One reader per set of options in a process, so listings reuse its connections."""
    return OneGetReads(options)
