from __future__ import annotations

from rest_framework.routers import DefaultRouter

from console.api.views import CatalogViewSet, TableViewSet

router = DefaultRouter()
router.register("catalogs", CatalogViewSet, basename="catalog")
router.register("tables", TableViewSet, basename="table")

urlpatterns = router.urls
