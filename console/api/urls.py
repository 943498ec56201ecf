from __future__ import annotations

from rest_framework.routers import DefaultRouter

from console.api.views import CatalogViewSet, TableViewSet
from processes.api import PluginViewSet, ProcessViewSet

router = DefaultRouter()
router.register("catalogs", CatalogViewSet, basename="catalog")
router.register("tables", TableViewSet, basename="table")
router.register("processes", ProcessViewSet, basename="process")
router.register("plugins", PluginViewSet, basename="plugin")

urlpatterns = router.urls
