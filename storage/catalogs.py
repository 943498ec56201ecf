"""Building pyiceberg catalogs from Catalog rows, and finding tables under a path root (a folder or
an object-store prefix)."""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
from django.conf import settings
from django.db import connection

from storage import outbound
from storage.io import PathNotAllowed, StoreOptions, filesystem, is_object_store, is_within, uri
from storage.models import Catalog, CatalogKind
from storage.spec.registry import format_adapters

# Table folders are rarely deeper than this under a root; the bound keeps a sync of a big tree quick.
MAX_DISCOVERY_DEPTH = 6
#: Prefixes listed at most by one sync of an object-store root (one request each, or a few).
MAX_DISCOVERY_LISTINGS = 5000


def lakewarden_database_sqlalchemy_url() -> str:
    """Lakewarden's own Postgres database (the test database under pytest) as a SQLAlchemy URL."""
    db = connection.settings_dict
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    host = db.get("HOST") or "127.0.0.1"
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql+psycopg2://{auth}{host}{port}/{db['NAME']}"


def iceberg_catalog_properties(catalog: Catalog) -> dict[str, str]:
    props = {str(k): str(v) for k, v in (catalog.properties or {}).items()}
    if catalog.kind == CatalogKind.ICEBERG_SQL:
        props["type"] = "sql"
        if not props.get("uri"):
            props["uri"] = lakewarden_database_sqlalchemy_url()
        props.setdefault("warehouse", Path(settings.LAKEWARDEN_WAREHOUSE).as_uri())
    elif catalog.kind == CatalogKind.ICEBERG_REST:
        props["type"] = "rest"
    return props


@functools.cache
def rest_catalog_class():
    """pyiceberg's RestCatalog whose every HTTP request (config, OAuth token, namespaces, tables,
    commits) goes through an ``OutboundAdapter`` (storage/outbound.py): the checked address pinned,
    no redirect followed, the connect and read timeouts of the catalog's ``StoreOptions``
    (``s3.connect-timeout``, ``s3.request-timeout`` or ``LAKEWARDEN_S3_*``, lowered to a few seconds
    inside a web request; pyiceberg sets none), and no byte of the catalog's answers in an error:
    an error answer is rewritten to name its status, the URL and the Iceberg error type only, and
    an answer pyiceberg cannot parse is refused without quoting it. REST catalogs are configured by
    admins and may be private (``outbound.TRUSTED``)."""
    from pydantic import ValidationError
    from pyiceberg.catalog.rest import RestCatalog
    from pyiceberg.exceptions import RESTError

    class BoundedRestCatalog(RestCatalog):
        def _config_headers(self, session) -> None:  # called first on every session it makes
            options = StoreOptions.from_properties(self.properties)
            adapter = _RestCatalogAdapter(
                policy=outbound.TRUSTED, timeout=(options.connect_timeout, options.request_timeout)
            )
            session.trust_env = False
            session.mount("http://", adapter)
            session.mount("https://", adapter)
            super()._config_headers(session)

    def guarded(method):
        @functools.wraps(method)
        def call(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except ValidationError as error:
                where = outbound.where(str(getattr(self, "uri", "") or self.properties.get("uri", "")))
                raise RESTError(
                    f"{where} answered JSON that is not an Iceberg REST answer "
                    f"({error.error_count()} fields wrong: {_field_paths(error)})"
                ) from None

        return call

    for name, attribute in vars(RestCatalog).items():
        if inspect.isfunction(attribute) and (name == "__init__" or not name.startswith("_")):
            setattr(BoundedRestCatalog, name, guarded(attribute))
    return BoundedRestCatalog


_ERROR_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")
#: The error codes of an OAuth token endpoint's answer (RFC 6749 5.2), which pyiceberg parses.
_OAUTH_ERRORS = frozenset(
    {
        "invalid_request",
        "invalid_client",
        "invalid_grant",
        "unauthorized_client",
        "unsupported_grant_type",
        "invalid_scope",
    }
)


class _RestCatalogAdapter(outbound.OutboundAdapter):
    """Answers as pyiceberg expects them, with nothing of the remote text but an error's type."""

    def answer(self, status: int, url: str, body: bytes) -> bytes:
        if status < 400:
            if body.strip():
                try:
                    json.loads(body)
                except ValueError:
                    raise outbound.OutboundError(
                        f"{url} answered HTTP {status} with a body that is not JSON: "
                        "is it an Iceberg REST catalog?"
                    ) from None
            return body
        return json.dumps(rest_error_document(status, url, body)).encode()


def rest_error_document(status: int, url: str, body: bytes) -> dict:
    """The error answer pyiceberg is given in place of ``body``: the same shape (an Iceberg
    ``ErrorResponse`` or an OAuth token error) so it raises the same exception, naming the status,
    the URL and the error's type or OAuth code; any other text of the remote answer is dropped."""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    error = document.get("error") if isinstance(document, dict) else None
    message = f"HTTP {status} from {url}"
    if isinstance(error, str) and error in _OAUTH_ERRORS:
        return {"error": error, "error_description": message}
    kind = error.get("type") if isinstance(error, dict) else None
    if not (isinstance(kind, str) and _ERROR_TYPE.fullmatch(kind)):
        try:
            kind = HTTPStatus(status).phrase.replace(" ", "").replace("-", "")
        except ValueError:
            kind = "HTTPError"
    return {"error": {"message": message, "type": kind, "code": status}}


def _field_paths(error) -> str:
    """The locations of a pydantic ``ValidationError``'s problems (never their input values)."""
    paths = [".".join(str(part) for part in problem["loc"]) or "(top)" for problem in error.errors()]
    return ", ".join(paths[:5])


#: pyiceberg catalogs kept per process, least recently used dropped first (a REST catalog's
#: session and a SQL catalog's object; a SQL catalog's connections belong to its shared engine).
MAX_CACHED_CATALOGS = 64
#: SQLAlchemy engines kept per process: one per database URL, shared by every SQL catalog on it.
#: Each keeps at most its pool's idle connections (1 after sequential use); the least recently
#: used engine is disposed (its connections closed) when one more URL comes.
MAX_SQL_ENGINES = 4

_catalogs: OrderedDict[tuple, Any] = OrderedDict()
_engines: OrderedDict[tuple, Any] = OrderedDict()
_catalogs_lock = threading.RLock()


def iceberg_catalog(catalog: Catalog):
    """A pyiceberg catalog for an Iceberg catalog row, one per process and configuration (kept in
    a bounded LRU). SQL catalogs on one database share one engine (``sql_engine``): 200 catalogs
    made one after the other hold one idle connection, not 200."""
    properties = iceberg_catalog_properties(catalog)
    key = (catalog.name, tuple(sorted(properties.items())))
    with _catalogs_lock:
        if key in _catalogs:
            _catalogs.move_to_end(key)
            return _catalogs[key]
    if catalog.kind == CatalogKind.ICEBERG_REST:
        made = rest_catalog_class()(catalog.name, **properties)
    else:
        made = sql_catalog_class()(catalog.name, **properties)
    with _catalogs_lock:
        made = _catalogs.setdefault(key, made)  # another thread's, if it made one meanwhile
        _catalogs.move_to_end(key)
        while len(_catalogs) > MAX_CACHED_CATALOGS:
            _catalogs.popitem(last=False)
        return made


def sql_engine(uri: str, *, echo: bool | str = False, pool_pre_ping: bool = False):
    """The process's one SQLAlchemy engine for ``uri`` (and these options), made on first use."""
    from sqlalchemy import create_engine

    key = (uri, echo, pool_pre_ping)
    with _catalogs_lock:
        engine = _engines.get(key)
        if engine is None:
            engine = _engines[key] = create_engine(uri, echo=echo, pool_pre_ping=pool_pre_ping)
        _engines.move_to_end(key)
        while len(_engines) > MAX_SQL_ENGINES:
            _, evicted = _engines.popitem(last=False)
            for cached_key, cached in list(_catalogs.items()):
                if getattr(cached, "engine", None) is evicted:
                    del _catalogs[cached_key]
            evicted.dispose()
        return engine


@functools.cache
def sql_catalog_class():
    """pyiceberg's SqlCatalog on the shared engine of its database URL (``sql_engine``): pyiceberg
    makes an engine, so a pool, per catalog object, and each kept an idle connection for the
    process's life (10 catalogs: 11 -> 22 connections on the server)."""
    from pyiceberg.catalog import URI, MetastoreCatalog
    from pyiceberg.catalog.sql import DEFAULT_ECHO_VALUE, DEFAULT_POOL_PRE_PING_VALUE, SqlCatalog
    from pyiceberg.exceptions import NoSuchPropertyException
    from pyiceberg.types import strtobool

    class SharedEngineSqlCatalog(SqlCatalog):
        def __init__(self, name: str, **properties: str) -> None:  # SqlCatalog's, but the engine
            MetastoreCatalog.__init__(self, name, **properties)
            if not (uri := self.properties.get(URI)):
                raise NoSuchPropertyException("SQL connection URI is required")
            echo_text = str(self.properties.get("echo", DEFAULT_ECHO_VALUE)).lower()
            echo: bool | str = strtobool(echo_text) if echo_text != "debug" else "debug"
            pre_ping = strtobool(self.properties.get("pool_pre_ping", DEFAULT_POOL_PRE_PING_VALUE))
            self.engine = sql_engine(uri, echo=echo, pool_pre_ping=pre_ping)
            self._init_catalog()

        def close(self) -> None:
            """Nothing: the engine is shared (``close_iceberg_catalogs`` disposes of it)."""

    return SharedEngineSqlCatalog


def is_catalog_error(error: BaseException) -> bool:
    """An error an Iceberg catalog client raised (a REST answer such as 401/404/500, a missing
    table or namespace, a refused OAuth credential, an unreachable or unusable target), as
    opposed to a bug."""
    return (
        isinstance(error, outbound.OutboundError)
        or type(error).__module__.startswith("pyiceberg.")
        or type(error).__module__.startswith("requests.")
    )


def close_iceberg_catalogs() -> None:
    """Forget the cached catalogs and close the SQL engines' connections (before the database is
    dropped, in tests)."""
    with _catalogs_lock:
        for engine in _engines.values():
            engine.dispose()
        _engines.clear()
        _catalogs.clear()


def iceberg_identifiers(catalog: Catalog) -> Iterator[str]:
    """Every table identifier of an Iceberg catalog, namespaces walked recursively."""
    pyiceberg_catalog = iceberg_catalog(catalog)
    pending = list(pyiceberg_catalog.list_namespaces())
    while pending:
        namespace = pending.pop(0)
        for identifier in pyiceberg_catalog.list_tables(namespace):
            yield ".".join(identifier)
        pending.extend(pyiceberg_catalog.list_namespaces(namespace))


def store_options_for(
    location: str, catalog: Catalog | None = None, *, roots: Iterable[Catalog] | None = None
) -> StoreOptions:
    """The credentials reaching ``location``: the catalog's ``s3.*`` properties when the table
    belongs to one, else those of the path-root catalog whose root holds the location, over the
    environment's (``LAKEWARDEN_S3_*``, ``AWS_*``). Local locations get the environment's (unused).
    ``roots``: the path-root catalogs when the caller read them already (``path_root_catalogs``:
    a pass over many tables reads them once, not once per table)."""
    if catalog is None and is_object_store(location):
        catalog = _root_catalog_of(location, roots)
    properties = (catalog.properties or {}) if catalog is not None else {}
    return StoreOptions.from_properties(properties)


def path_root_catalogs() -> list[Catalog]:
    """Every path-root catalog (one query): ``store_options_for``'s ``roots``."""
    return list(Catalog.objects.filter(kind=CatalogKind.PATH_ROOT))


def _root_catalog_of(location: str, roots: Iterable[Catalog] | None = None) -> Catalog | None:
    """The path-root catalog with the longest root holding ``location`` (object stores only)."""
    best: Catalog | None = None
    best_length = -1
    # (``properties__root__contains`` would be JSON containment on Postgres, not a substring test.)
    for catalog in path_root_catalogs() if roots is None else roots:
        root = str((catalog.properties or {}).get("root", ""))
        if not is_object_store(root):
            continue
        try:
            inside = is_within(location, root)
        except PathNotAllowed:
            continue
        if inside and len(root) > best_length:
            best, best_length = catalog, len(root)
    return best


def table_folders(root: Path) -> Iterator[Path]:
    """Folders under ``root`` that hold a table; a table's own folder is not searched further."""

    def is_table(path: Path) -> bool:
        return (
            (path / "_delta_log").is_dir()
            or (path / ".hoodie").is_dir()
            or any((path / "metadata").glob("*.metadata.json"))
            or plugin_format_detects(str(path))
        )

    stack = [(root, 0)]
    while stack:
        folder, depth = stack.pop()
        if is_table(folder):
            yield folder
            continue
        if depth >= MAX_DISCOVERY_DEPTH:
            continue
        try:
            children = sorted(os.scandir(folder), key=lambda e: e.name, reverse=True)
        except OSError:
            continue
        for entry in children:
            if entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                stack.append((Path(entry.path), depth + 1))


def object_store_table_folders(root: str, options: StoreOptions) -> Iterator[str]:
    """URIs of the prefixes under the object-store ``root`` that hold a table (``_delta_log``,
    ``.hoodie``, or ``metadata/*.metadata.json``), found by listing one level at a time (at most
    ``MAX_DISCOVERY_DEPTH`` levels and ``MAX_DISCOVERY_LISTINGS`` listings); a table's own prefix is
    not searched further. A store error (credentials, endpoint) is raised as the ``OSError`` it is."""
    fs, base = filesystem(root, options)
    pending = [(base.rstrip("/"), 0)]
    listings = 0
    while pending and listings < MAX_DISCOVERY_LISTINGS:
        path, depth = pending.pop()
        listings += 1
        children = {
            info.base_name: info
            for info in fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
            if info.type == pafs.FileType.Directory
        }
        if _holds_table(fs, path, children) or plugin_format_detects(uri(root, path), options):
            yield uri(root, path)
            continue
        if depth < MAX_DISCOVERY_DEPTH:
            pending.extend(
                (info.path, depth + 1)
                for name, info in sorted(children.items(), reverse=True)
                if not name.startswith((".", "_"))
            )


#: Formats whose tables the listings above recognise by their markers, without asking the adapter.
_MARKED_FORMATS = frozenset({"iceberg", "delta", "hudi"})


def plugin_format_detects(location: str, options: StoreOptions | None = None) -> bool:
    """Whether the adapter of a format added by a plugin (Lance, Paimon...) recognises
    ``location`` as one of its tables: discovery asks them, it does not know their markers."""
    for name, adapter in format_adapters().items():
        if name in _MARKED_FORMATS:
            continue
        if adapter.detect(location) if options is None else adapter.detect(location, storage=options):
            return True
    return False


def _holds_table(fs: pafs.FileSystem, path: str, children: dict[str, pafs.FileInfo]) -> bool:
    if "_delta_log" in children or ".hoodie" in children:
        return True
    if "metadata" not in children:
        return False
    entries = fs.get_file_info(pafs.FileSelector(f"{path}/metadata", allow_not_found=True))
    return any(entry.base_name.endswith(".metadata.json") for entry in entries)
