"""S3 through object_store (PyPI ``obstore``, the Rust client deltalake and hudi-rs use too): whole
objects in one request each (metadata files read from start to end: Iceberg manifest lists and
manifests, one GET per object), put-if-absent, and the listing of a location a page at a time
(``list_pages``: what orphan cleanup, vacuum and the leftover sweep list, in flat memory).

pyarrow's S3 file system opens every file with a HEAD (its size) before the GET, and its AWS SDK
spends about 0.3 ms of CPU per request in the calling process: a listing of 500 manifests made
1,002 requests and lost about a third of its time to them (bench/RESULTS.md, "listing on the
object store"). Reading the same bytes with one GET each halves the store's work and most of ours.

The fast path is taken only where it is known to read the object pyiceberg's pyarrow FileIO
would read, with the same credentials, at the same place:

- a FileIO whose properties give the key pair and the region explicitly (no credential chain,
  instance profile or region lookup to mimic) and hold no ``s3.``/``client.`` property it does not
  map (remote signing, a proxy, an assumed role...); addressing is path-style unless
  ``s3.force-virtual-addressing``, as pyiceberg has it (it ignores ``s3.path-style-access``);
- no environment variable object_store would read and pyarrow would not, or that could send the
  request elsewhere: ``AWS_*`` beyond the credentials and region the properties override (and
  the endpoint, when they give one) and the TLS trust, and the ``*_PROXY`` variables;
- an ``s3://`` (``s3a``, ``s3n``) location whose bucket and key are plain (letters, digits,
  ``. - _ = + /`` and spaces; no empty segment, no ``%``, ``?`` or ``#``): the key object_store
  requests is then the key pyarrow requests;
- not in a process forked after this one made a request: object_store's runtime does not survive
  ``fork`` (a child's first request would hang), so a forked child keeps to pyarrow for its life.

Any failure of the fast path (missing object, refused, unreachable) is not reported from here:
the caller reads the object the usual way, whose bytes or error stand. So this can only make a
read cheaper, never answer differently.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

from storage.io.paths import local_path
from storage.io.stores import S3_SCHEMES, StoreError, StoreOptions, scheme

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

log = logging.getLogger(__name__)

#: pyiceberg FileIO properties this reader maps; any other ``s3.``/``client.`` property leaves the
#: read to pyarrow.
KNOWN_PROPERTIES = frozenset(
    {
        "s3.endpoint",
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "s3.region",
        "s3.path-style-access",  # read by Lakewarden's own stores; pyiceberg ignores it, so do we
        "s3.force-virtual-addressing",
        "s3.connect-timeout",
        "s3.request-timeout",
    }
)
_STORE_PREFIXES = ("s3.", "client.", "adls.", "gcs.", "hf.", "oss.")
#: pyiceberg's ``property_as_bool`` (``strtobool``) spellings
_TRUE = frozenset({"y", "yes", "t", "true", "on", "1"})
_FALSE = frozenset({"n", "no", "f", "false", "off", "0"})
#: environment variables both libraries may see that only decide whether TLS verifies or that the
#: explicit properties override (the endpoint ones only when the properties give an endpoint)
_HARMLESS_ENV = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_DEFAULT_REGION"}
    | {"AWS_CA_BUNDLE", "AWS_EC2_METADATA_DISABLED"}
)
_ENDPOINT_ENV = frozenset({"AWS_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"})
_PLAIN_KEY = re.compile(r"[\w.\-=+ ]+(?:/[\w.\-=+ ]+)*")
_PLAIN_BUCKET = re.compile(r"[a-z0-9][a-z0-9.\-]*[a-z0-9]")

# object_store's runtime starts with a process's first request and is lost in a forked child
_state = {"requested": False, "forked_after_request": False}


def _after_fork_in_child() -> None:
    if _state["requested"]:
        _state["forked_after_request"] = True


os.register_at_fork(after_in_child=_after_fork_in_child)


_obstore_module: Any
try:  # loaded with this module, not on a listing's first read (4-20 ms in a fresh process)
    import obstore as _obstore_module
    import obstore.store  # noqa: F401 - S3Store, for the first store made
except Exception:  # noqa: BLE001 - an install without it (or whose import fails) reads through pyarrow
    _obstore_module = None


def _obstore() -> Any:
    return _obstore_module


def _environment_allows(explicit_endpoint: bool, environ: Mapping[str, str]) -> bool:
    for name in environ:
        upper = name.upper()
        if upper.endswith("_PROXY"):
            return False
        if upper.startswith("AWS_") and name not in _HARMLESS_ENV:
            if not (explicit_endpoint and name in _ENDPOINT_ENV):
                return False
    return True


class OneGetReads:
    """Reads whole S3 objects with one GET each; ``read`` answers None where it cannot (the
    caller then reads the object its usual way). Thread-safe: a listing reads ahead on threads."""

    def __init__(self, options: StoreOptions) -> None:
        self.options = options
        self._stores: dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def for_properties(
        cls, properties: Mapping[str, Any], environ: Mapping[str, str] | None = None
    ) -> OneGetReads | None:
        """The reader for a pyiceberg pyarrow FileIO's properties, or None where the fast path is
        not known to read what pyarrow reads (see the module's docstring)."""
        if _obstore() is None or _state["forked_after_request"]:
            return None
        if any(key.startswith(_STORE_PREFIXES) and key not in KNOWN_PROPERTIES for key in properties):
            return None
        virtual = str(properties.get("s3.force-virtual-addressing", "false")).strip().lower()
        if virtual not in _TRUE | _FALSE:
            return None
        try:
            options = StoreOptions.from_properties(properties, environ={})
        except ValueError:  # a timeout that is not a number: pyarrow's read says so
            return None
        options = replace(options, path_style=virtual in _FALSE)
        if not (options.access_key and options.secret_key and options.region):
            return None
        if not _environment_allows(bool(options.endpoint), os.environ if environ is None else environ):
            return None
        return _reads_for(options)

    def read(self, location: str) -> Any:
        """The whole object (a buffer) or None: not a plain S3 location, a forked process, or the
        request failed (the caller's own read then says why)."""
        parsed = urlparse(location)
        if (
            parsed.scheme.lower() not in S3_SCHEMES
            or parsed.params
            or parsed.query
            or parsed.fragment
            or not _PLAIN_BUCKET.fullmatch(parsed.netloc)
            or not parsed.path.startswith("/")
            or not _PLAIN_KEY.fullmatch(parsed.path[1:])
            or _state["forked_after_request"]
        ):
            return None
        obstore = _obstore()
        try:
            store = self._store(parsed.netloc)
            _state["requested"] = True
            return obstore.get(store, parsed.path[1:]).bytes()
        except Exception as error:  # any refusal: the caller reads it through pyarrow
            # the type only: a store's error body may quote the signed request (a session token)
            log.debug(
                "one-GET read of %s failed (%s), reading it through pyarrow", location, type(error).__name__
            )
            return None

    def _store(self, bucket: str) -> Any:
        with self._lock:
            store = self._stores.get(bucket)
            if store is None:
                store = self._stores[bucket] = self._make_store(bucket)
            return store

    def _make_store(self, bucket: str) -> Any:
        # one attempt: a failed read is made again through pyarrow, whose own retries (three
        # attempts, stores.py) then apply, so a dead store costs one timeout more than before
        return _s3_store(self.options, bucket)


def one_get_reader(file_io: Any) -> OneGetReads | None:
    """The reader for a pyiceberg FileIO, or None: only where pyiceberg reads through pyarrow
    itself (not fsspec, not a custom FileIO) and ``for_properties`` takes its properties."""
    pyarrow_io = (
        type(file_io).__module__ == "pyiceberg.io.pyarrow" and type(file_io).__name__ == "PyArrowFileIO"
    )
    return OneGetReads.for_properties(file_io.properties) if pyarrow_io else None


@functools.lru_cache(maxsize=32)
def _reads_for(options: StoreOptions) -> OneGetReads:
    """One reader per set of options in a process, so listings reuse its connections."""
    return OneGetReads(options)


# --- put-if-absent ---------------------------------------------------------------------------------


class PutUnsupported(StoreError):
    """The location's store has no put-if-absent here (object stores other than S3)."""


def put_if_absent(location: str, content: bytes, options: StoreOptions | None = None) -> bool:
    """Create the file or object ``location`` (a local path, ``file:`` or ``s3://`` URI) holding
    ``content`` unless something is already there: True when this call created it, False when the
    name was taken (by an earlier writer or a concurrent one). Nobody ever sees half the content.

    On a file system the content goes to a temporary file beside the target, flushed to disk, then
    hard-linked to its name: ``link`` fails atomically when the name exists (the primitive
    deltalake uses on local file systems). On S3 it is one ``PUT`` with ``If-None-Match: *``
    through object_store (``obstore.put(..., mode="create")``, what deltalake's own commit
    sends; AWS S3, MinIO, SeaweedFS and R2 honour it), with no retry: a retried create whose
    first try had landed would answer "taken". ``PutUnsupported`` for other object stores;
    ``StoreError`` when the store cannot be reached or refuses."""
    if scheme(location) in ("", "file"):
        return _local_put_if_absent(local_path(location, percent_decoded=False), content)
    if scheme(location) not in S3_SCHEMES:
        raise PutUnsupported(f"{location}: Lakewarden has a put-if-absent for S3 stores and local files only")
    obstore = _obstore()
    if obstore is None:
        raise PutUnsupported(f"{location}: put-if-absent on S3 needs the obstore package")
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    if _state["forked_after_request"]:
        # object_store's runtime does not survive fork: a process forked after a request would
        # hang on its first one, and a conditional put has no other way to the store
        raise StoreError(f"{location}: this process was forked after it used object_store")
    parsed = urlparse(location)
    options = options if options is not None else StoreOptions.from_env()
    store = _s3_store(options, parsed.netloc)
    try:
        _state["requested"] = True
        obstore.put(store, parsed.path.lstrip("/"), content, mode="create")
    except (AlreadyExistsError, PreconditionError):  # 412, or 409 for a concurrent create
        return False
    except Exception as error:
        # the type and message only: object_store's messages name the URL, never the signature
        raise StoreError(f"{location}: the store refused a conditional put: {error}") from error
    return True


def _s3_store(options: StoreOptions, bucket: str, *, retries: int = 0) -> Any:
    """An object_store client of ``bucket`` that tries each request ``retries`` more times (none by
    default: the callers above have their own second way)."""
    from obstore.store import S3Store

    settings = options.object_store_config()
    client: ClientConfig = {"allow_http": settings.pop("allow_http", "") == "true"}
    for name in ("timeout", "connect_timeout"):
        client[name] = settings.pop(name)
    retry: RetryConfig = {
        "max_retries": retries,
        "retry_timeout": timedelta(seconds=options.request_timeout * (retries + 1)),
    }
    return S3Store(bucket, config=cast("S3Config", settings), client_options=client, retry_config=retry)


# --- paged listing ---------------------------------------------------------------------------------

#: Keys per listing request (S3's ListObjectsV2 maximum) and per page handed to the caller.
LIST_PAGE = 1000
#: Attempts of each listing request after the first (pyarrow's S3 file system makes three in all).
LIST_RETRIES = 2


def list_pages(
    location: str, options: StoreOptions | None = None
) -> Iterator[list[tuple[str, int, float]]] | None:
    """The objects under the S3 location ``location`` a page at a time, as object_store lists them
    (ListObjectsV2, ``LIST_PAGE`` keys per request, continuation tokens): lists of
    ``(location, size, LastModified as a timestamp)``, each location ``<scheme>://<bucket>/<key>``
    with the key exactly as stored (spaces, ``%``, ``+``, unicode: nothing decoded or encoded).
    Memory holds two pages at most, whatever the number of objects: the next page is requested
    (on a thread) while the caller works through the current one.

    ``location``'s key is taken literally as the prefix, at a segment boundary (``t`` lists
    ``t/...``, not ``t2/...``). None where this listing is not available: not an S3 location,
    no obstore, or a process forked after it used object_store (see the module's docstring); the
    caller then lists another way. ``StoreError`` when the store refuses or cannot be reached, or
    holds a key under the prefix object_store cannot name (a control character such as a newline,
    an empty or ``.``/``..`` segment): object_store stops the listing there, and a partial listing
    is never passed off as the whole."""
    found = scheme(location)
    if found not in S3_SCHEMES or _obstore() is None or _state["forked_after_request"]:
        return None
    parsed = urlparse(location)
    prefix = location.split("://", 1)[1][len(parsed.netloc) :].strip("/")
    options = options if options is not None else StoreOptions.from_env()
    store = _s3_store(options, parsed.netloc, retries=LIST_RETRIES)
    return _pages(store, f"{found}://{parsed.netloc}/", prefix or None, location)


def _pages(
    store: Any, head: str, prefix: str | None, location: str
) -> Iterator[list[tuple[str, int, float]]]:
    obstore = _obstore()
    _state["requested"] = True
    stream = obstore.list(store, prefix, chunk_size=LIST_PAGE)
    # the next page is requested while the caller works through this one (its request's latency
    # overlaps the caller's work): two pages in memory at most
    with ThreadPoolExecutor(1, thread_name_prefix="lakewarden-list") as ahead:
        pending = ahead.submit(_next_page, stream)
        while True:
            try:
                page = pending.result()
            except Exception as error:
                # object_store's messages name the URL and the key, never the signature
                raise StoreError(f"{location}: the listing failed: {' '.join(str(error).split())}") from error
            if page is None:
                return
            pending = ahead.submit(_next_page, stream)
            yield [(head + meta["path"], meta["size"], meta["last_modified"].timestamp()) for meta in page]


def _next_page(stream: Any) -> Any:
    """The stream's next page, or None at its end."""
    return next(stream, None)


def _local_put_if_absent(target: str | os.PathLike[str], content: bytes) -> bool:
    folder = os.path.dirname(target)
    temporary = os.path.join(folder, f"_put_{uuid.uuid4().hex}.tmp")
    with open(temporary, "xb") as out:
        out.write(content)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(temporary, target)
    except FileExistsError:
        return False
    finally:
        try:
            os.remove(temporary)
        except OSError:
            log.warning("could not remove the temporary file %s", temporary, exc_info=True)
    _sync_directory(folder)
    return True


def _sync_directory(path: str) -> None:
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
