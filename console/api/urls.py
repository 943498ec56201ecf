from __future__ import annotations

from django.urls import path

from console.api import trash  # trash (issue 14)
from console.api.base import ApiRouter
from console.api.processes import PluginViewSet, ProcessViewSet
from console.api.records import TableRecordViewSet
from console.api.storage import CachedResultViewSet, QueryViewSet, StorageBackendViewSet
from console.api.views import CatalogViewSet, TableViewSet

router = ApiRouter()
router.register("catalogs", CatalogViewSet, basename="catalog")
router.register("tables", TableViewSet, basename="table")
router.register(r"tables/(?P<table_pk>[0-9]+)/records", TableRecordViewSet, basename="table-record")
router.register("processes", ProcessViewSet, basename="process")
router.register("plugins", PluginViewSet, basename="plugin")
router.register("storages", StorageBackendViewSet, basename="storage")
router.register("queries", QueryViewSet, basename="query")
router.register("cached-results", CachedResultViewSet, basename="cached-result")

urlpatterns = router.urls

# Trash (issue 14): a process's trash batch and its restore; the list of batches.
urlpatterns += [
    path("processes/<int:pk>/trash/", trash.ProcessTrashView.as_view(), name="process-trash"),
    path("processes/<int:pk>/restore/", trash.ProcessTrashRestoreView.as_view(), name="process-restore"),
    path("trash/", trash.TrashBatchListView.as_view(), name="trash-list"),
]

# Audit trail (issue 16): the list, for operators and admins.
from console.api.audit import AuditEventListView  # noqa: E402

urlpatterns += [path("audit/", AuditEventListView.as_view(), name="audit-list")]

# Alerts (issue 16): notification channels (with "send test") and the delivery record, admin role.
from console.api.alerts import (  # noqa: E402
    AlertChannelViewSet,
    AlertDeliveryViewSet,
    AlertEpisodeViewSet,
    AlertRuleViewSet,
)

alert_router = ApiRouter(trailing_slash=True)
alert_router.include_root_view = False
alert_router.register("alert-channels", AlertChannelViewSet, basename="alert-channel")
alert_router.register("alert-rules", AlertRuleViewSet, basename="alert-rule")
alert_router.register("alert-deliveries", AlertDeliveryViewSet, basename="alert-delivery")
alert_router.register("alert-episodes", AlertEpisodeViewSet, basename="alert-episode")
urlpatterns += alert_router.urls

# Resource groups (issue 31): queues and budgets; operators read, admins write.
from console.api.resource_groups import ResourceGroupViewSet  # noqa: E402

group_router = ApiRouter(trailing_slash=True)
group_router.include_root_view = False
group_router.register("resource-groups", ResourceGroupViewSet, basename="resource-group")
urlpatterns += group_router.urls

# Teams and grants (issue 32, console/teams): admins change them; others read their own teams.
from console.api.teams import GrantViewSet, TeamViewSet  # noqa: E402

team_router = ApiRouter(trailing_slash=True)
team_router.include_root_view = False
team_router.register("teams", TeamViewSet, basename="team")
team_router.register("grants", GrantViewSet, basename="grant")
urlpatterns += team_router.urls

# Maintenance decisions (issue 31 item 3): per action, the last decisions, next evaluation, settings.
from console.api.maintenance import TableMaintenanceView  # noqa: E402

urlpatterns += [
    path("tables/<int:pk>/maintenance/", TableMaintenanceView.as_view(), name="table-maintenance")
]
