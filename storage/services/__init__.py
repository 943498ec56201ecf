"""Services of the lakehouse's bookkeeping: the one place their rules live (pages, the API, commands
and tasks call these). ``tables``: catalogs and managed tables; ``results``: registered result
storages and cached results."""

from __future__ import annotations

from storage.catalogs import iceberg_catalog
from storage.services.catalogs import catalog_delete, catalog_test, catalog_update
from storage.services.results import (
    DEFAULT_BACKEND_NAME,
    cached_result_drop,
    cached_result_invalidate,
    cached_results_clean,
    cached_results_evict,
    cached_results_invalidate_for_table,
    storage_backend_default,
    storage_backend_delete,
    storage_backend_masked_config,
    storage_backend_register,
    storage_backend_test,
    storage_backend_update,
    storage_open,
    storages_close,
)
from storage.services.tables import (
    ICEBERG_KINDS,
    SyncReport,
    catalog_create,
    catalog_sync,
    table_open,
    table_refresh,
    table_register,
    table_store_options,
)

__all__ = [
    "DEFAULT_BACKEND_NAME",
    "ICEBERG_KINDS",
    "SyncReport",
    "cached_result_drop",
    "cached_result_invalidate",
    "cached_results_clean",
    "cached_results_evict",
    "cached_results_invalidate_for_table",
    "catalog_create",
    "catalog_delete",
    "catalog_sync",
    "catalog_test",
    "catalog_update",
    "iceberg_catalog",
    "storage_backend_default",
    "storage_backend_delete",
    "storage_backend_masked_config",
    "storage_backend_register",
    "storage_backend_test",
    "storage_backend_update",
    "storage_open",
    "storages_close",
    "table_open",
    "table_store_options",
    "table_refresh",
    "table_register",
]
