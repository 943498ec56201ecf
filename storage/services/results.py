"""Storage backends: register (code, YAML or console: one path), test, update, delete; cached results:
invalidate, drop, evict. Planning a query and finding its cached result is in storage/cache.py; running
it on Spark is in processes/queries.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from storage.errors import Conflict, InvalidInput
from storage.models import CachedResult, CachedResultState, StorageBackend, StorageSource
from storage.paths import PathNotAllowed, confine
from storage.results import registry
from storage.results.plugin import IntermediateResultStorage, StorageDescriptor
from storage.secrets import mask_text

logger = logging.getLogger(__name__)

DEFAULT_BACKEND_NAME = "default-filesystem"


def _validated(descriptor: StorageDescriptor) -> tuple[str, dict[str, Any]]:
    """Type known, config valid for it, paths confined, the place reachable: (type, config) or
    InvalidInput."""
    if not descriptor.type:
        raise InvalidInput("a storage needs a type", field="type")
    config = dict(descriptor.config)
    if descriptor.type == "filesystem":
        root = config.get("root") or str(Path(settings.LAKEWARDEN_WAREHOUSE) / ".lakewarden-cache")
        try:
            config["root"] = str(confine(str(root)))  # a resolved folder or a normalised URI
        except PathNotAllowed as error:
            raise InvalidInput(f"root: {error}", field="config") from error
    if descriptor.type == "iceberg":
        config.update(_iceberg_warehouse(config))
    try:
        storage = registry.build_storage(StorageDescriptor(type=descriptor.type, config=config))
    except registry.StorageConfigError as error:
        field = "type" if descriptor.type not in registry.storage_types() else "config"
        raise InvalidInput(str(error), field=field) from error
    try:
        storage.verify()
    except OSError as error:
        message = mask_text(str(error), secrets=_secrets(storage, config))
        raise InvalidInput(f"cannot reach the storage: {message}", field="config") from error
    return descriptor.type, config


def _iceberg_warehouse(config: dict[str, Any]) -> dict[str, Any]:
    """An ``iceberg`` storage writes its tables' data under ``warehouse``: a SQL catalog needs
    one, and any warehouse must lie inside the allowed roots (``InvalidInput`` otherwise)."""
    warehouse = str(config.get("warehouse") or "").strip()
    if not warehouse:
        if str(config.get("type") or "sql") == "sql":
            raise InvalidInput(
                "warehouse: a SQL catalog needs a warehouse inside the allowed roots", field="config"
            )
        return {}
    try:
        confined = confine(warehouse)
    except PathNotAllowed as error:
        raise InvalidInput(f"warehouse: {error}", field="config") from error
    return {"warehouse": confined.as_uri() if isinstance(confined, Path) else confined}


def storage_backend_register(
    *,
    name: str,
    descriptor: StorageDescriptor,
    quota_bytes: int | None = None,
    source: str = StorageSource.CONSOLE,
    is_default: bool = False,
) -> StorageBackend:
    """The one way a storage gets registered, whether it comes from code, YAML or the console."""
    if not name or not all(c.isalnum() or c in "-_" for c in name):
        raise InvalidInput("a storage name uses letters, digits, '-' and '_'", field="name")
    if StorageBackend.objects.filter(name=name).exists():
        raise InvalidInput(f"a storage named {name!r} already exists", field="name")
    if quota_bytes is not None and quota_bytes <= 0:
        raise InvalidInput("quota_bytes must be positive (or empty for no quota)", field="quota_bytes")
    storage_type, config = _validated(descriptor)
    with transaction.atomic():
        if is_default:
            StorageBackend.objects.filter(is_default=True).update(is_default=False)
        return StorageBackend.objects.create(
            name=name,
            type=storage_type,
            config=config,
            quota_bytes=quota_bytes,
            source=source,
            is_default=is_default,
        )


def storage_backend_update(
    *,
    backend: StorageBackend,
    config: dict[str, Any] | None = None,
    quota_bytes: int | None = None,
    is_default: bool | None = None,
) -> StorageBackend:
    if config is not None:
        # Masked secrets sent back unchanged keep their stored value.
        merged = registry.unmask_config(registry.storage_type(backend.type), config, backend.config)
        storage_type, validated = _validated(StorageDescriptor(type=backend.type, config=merged))
        if validated != backend.config:
            _results_clean_before_moving(backend)
        backend.type, backend.config = storage_type, validated
    if quota_bytes is not None:
        if quota_bytes <= 0:
            raise InvalidInput("quota_bytes must be positive", field="quota_bytes")
        backend.quota_bytes = quota_bytes
    with transaction.atomic():
        if is_default:
            StorageBackend.objects.exclude(pk=backend.pk).filter(is_default=True).update(is_default=False)
            backend.is_default = True
        backend.save()
    if quota_bytes is not None:
        cached_results_evict(backend=backend)
    return backend


def _results_clean_before_moving(backend: StorageBackend) -> None:
    """What the storage holds under its old configuration (root, bucket, database) the new one
    cannot reach: clean it with the old one first. Unreachable, it is forgotten where it is."""
    live = list(backend.results.exclude(state=CachedResultState.CLEANED))
    reason = f"storage {backend.name}: configuration changed"
    try:
        cached_results_clean(results=live, reason=reason)
    except Exception:  # logged by cached_results_clean; the move goes ahead
        CachedResult.objects.filter(pk__in=[r.pk for r in live]).update(
            state=CachedResultState.CLEANED, state_reason=f"{reason}; left at the old location"[:255]
        )


def storage_backend_delete(*, backend: StorageBackend) -> None:
    """Clean every result the backend holds, then forget it."""
    live = list(backend.results.exclude(state=CachedResultState.CLEANED))
    if live:
        cached_results_clean(results=live, reason="storage deleted")
    backend.results.all().delete()
    backend.delete()


def storage_backend_default() -> StorageBackend:
    """The default storage; a filesystem storage under the warehouse is made on first use."""
    backend = StorageBackend.objects.filter(is_default=True).first()
    if backend is not None:
        return backend
    existing = StorageBackend.objects.filter(name=DEFAULT_BACKEND_NAME).first()
    if existing is not None:
        return existing
    return storage_backend_register(
        name=DEFAULT_BACKEND_NAME,
        descriptor=StorageDescriptor(type="filesystem"),
        source=StorageSource.DEFAULT,
        is_default=not StorageBackend.objects.filter(is_default=True).exists(),
    )


_open_storages: dict[str, IntermediateResultStorage] = {}


def storage_open(backend: StorageBackend) -> IntermediateResultStorage:
    """The configured storage, one per configuration per process (some hold connection pools)."""
    import json

    key = json.dumps([backend.type, backend.config], sort_keys=True, default=str)
    if key not in _open_storages:
        _open_storages[key] = registry.build_storage(
            StorageDescriptor(type=backend.type, config=dict(backend.config))
        )
    return _open_storages[key]


def storages_close() -> None:
    """Release the storages' connection pools (tests, before their database is dropped)."""
    for storage in _open_storages.values():
        close = getattr(storage, "close", None)
        if close is not None:
            close()
    _open_storages.clear()


def storage_backend_masked_config(backend: StorageBackend) -> dict[str, Any]:
    storage_cls = registry.storage_types().get(backend.type)
    return registry.mask_config(storage_cls, backend.config) if storage_cls else {}


def storage_backend_test(*, backend: StorageBackend, spark) -> tuple[bool, str]:
    """create → write → read → clean on a tiny frame with ``spark`` (a worker's session); the
    outcome is recorded on the backend."""
    import uuid

    name = f"lakewarden_test_{uuid.uuid4().hex[:10]}"
    properties: dict[str, Any] | None = None
    storage = None
    try:
        storage = storage_open(backend)
        frame = spark.createDataFrame([(1, "one"), (2, "two"), (3, "three")], "id long, word string")
        properties = storage.create(name, {})
        storage.write(frame, properties)
        rows = sorted(tuple(r) for r in storage.read(spark, properties).collect())
        if rows != [(1, "one"), (2, "two"), (3, "three")]:
            raise RuntimeError(f"read back {rows!r} instead of the 3 rows written")
        storage.clean([name], {name: properties})
        if storage.exists(properties):
            raise RuntimeError("the data was still there after the cleanup hook ran")
        properties = None
        ok, message = True, "create, write, read and clean all worked"
    except Exception as error:  # any backend failure is the test's answer, shown to the user
        ok, message = False, _redact(f"{type(error).__name__}: {error}", backend)
    finally:
        if properties is not None and storage is not None:
            try:
                storage.clean([name], {name: properties})
            except Exception:
                logger.warning("cleaning the test data of storage %s failed", backend.name, exc_info=True)
    backend.last_test_at, backend.last_test_ok, backend.last_test_message = timezone.now(), ok, message
    backend.save(update_fields=["last_test_at", "last_test_ok", "last_test_message"])
    return ok, message


def _redact(message: str, backend: StorageBackend) -> str:
    storage_cls = registry.storage_types().get(backend.type)
    return mask_text(message, secrets=_secrets(storage_cls, backend.config))


def _secrets(storage: Any, config: dict[str, Any]) -> list[Any]:
    """The secret values of a storage configuration (to mask them out of messages)."""
    return [config.get(key) for key in getattr(storage, "secret_keys", ())]


# --- cached results -----------------------------------------------------------------------------


def cached_results_clean(
    *, results: list[CachedResult], reason: str, state: str = CachedResultState.CLEANED
) -> int:
    """Run the cleanup hook for ``results`` (grouped per backend) and mark them; returns the count."""
    by_backend: dict[int, list[CachedResult]] = {}
    for result in results:
        by_backend.setdefault(result.backend_id, []).append(result)
    for backend_results in by_backend.values():
        backend = backend_results[0].backend
        names = [r.name for r in backend_results]
        try:
            storage_open(backend).clean(names, {r.name: r.properties for r in backend_results})
        except Exception:
            logger.exception("cleaning %d results in storage %s failed", len(names), backend.name)
            raise
        CachedResult.objects.filter(pk__in=[r.pk for r in backend_results]).update(
            state=state, state_reason=reason[:255]
        )
    return len(results)


def cached_result_invalidate(
    *, result: CachedResult, reason: str = "invalidated by an operator"
) -> CachedResult:
    if result.state not in (CachedResultState.READY, CachedResultState.POPULATING):
        raise Conflict(
            f"cached result {result.pk} is {result.state}; only READY or POPULATING results can be invalidated"
        )
    CachedResult.objects.filter(pk=result.pk).update(state=CachedResultState.INVALID, state_reason=reason)
    cached_results_clean(results=[result], reason=reason)
    result.refresh_from_db()
    return result


def cached_result_drop(*, result: CachedResult) -> None:
    if result.state in (CachedResultState.READY, CachedResultState.POPULATING, CachedResultState.INVALID):
        cached_results_clean(results=[result], reason="dropped")
    result.delete()


def cached_results_invalidate_for_table(*, table_id: int, current_instant: str) -> int:
    """A source table moved on: every live result that read another instant of it is invalid."""
    stale = [
        result
        for result in CachedResult.objects.select_related("backend").filter(
            state__in=(CachedResultState.READY, CachedResultState.POPULATING),
            source_snapshots__has_key=str(table_id),
        )
        if str(result.source_snapshots.get(str(table_id))) != str(current_instant)
    ]
    if not stale:
        return 0
    CachedResult.objects.filter(pk__in=[r.pk for r in stale]).update(
        state=CachedResultState.INVALID, state_reason=f"table {table_id} has a new snapshot {current_instant}"
    )
    return cached_results_clean(results=stale, reason=f"source table {table_id} moved to {current_instant}")


def cached_results_evict(*, backend: StorageBackend) -> int:
    """Clean least recently used READY results until the backend is within its quota."""
    if not backend.quota_bytes:
        return 0
    ready = CachedResult.objects.filter(backend=backend, state=CachedResultState.READY)
    total = ready.aggregate(total=Sum("size_bytes"))["total"] or 0
    victims = []
    for result in ready.select_related("backend").order_by("last_used_at", "pk"):
        if total <= backend.quota_bytes:
            break
        victims.append(result)
        total -= result.size_bytes
    if victims:
        cached_results_clean(results=victims, reason=f"evicted: storage {backend.name} over its quota")
    return len(victims)
