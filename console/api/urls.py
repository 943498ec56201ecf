from __future__ import annotations

from rest_framework.routers import DefaultRouter

from console.api.views import CatalogViewSet, TableViewSet
from processes.api import PluginViewSet, ProcessViewSet
from storage.api import CachedResultViewSet, QueryViewSet, StorageBackendViewSet

router = DefaultRouter()
router.register("catalogs", CatalogViewSet, basename="catalog")
router.register("tables", TableViewSet, basename="table")
router.register("processes", ProcessViewSet, basename="process")
router.register("plugins", PluginViewSet, basename="plugin")
router.register("storages", StorageBackendViewSet, basename="storage")
router.register("queries", QueryViewSet, basename="query")
router.register("cached-results", CachedResultViewSet, basename="cached-result")

urlpatterns = router.urls
