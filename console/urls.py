from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from console.api.base import AUTHENTICATION_CLASSES
from console.auth import ThrottledLoginView
from console.sso import oidc_login
from console.views import catalogs, maintenance, overrides, storages
from console.views import processes as process_views
from console.views import queries as storage_views
from console.views import records as record_views
from console.views import tables as views
from console.views import trash as trash_views  # trash (issue 14)

console_patterns = [
    path("", views.overview, name="overview"),
    path("liveness/", views.overview_liveness, name="liveness"),
    path("catalogs/", views.catalog_list, name="catalog-list"),
    path("catalogs/new/", catalogs.catalog_create, name="catalog-create"),
    path("catalogs/<int:pk>/", views.catalog_detail, name="catalog-detail"),
    path("catalogs/<int:pk>/sync/", views.catalog_sync, name="catalog-sync"),
    path("catalogs/<int:pk>/edit/", catalogs.catalog_edit, name="catalog-edit"),
    path("catalogs/<int:pk>/delete/", catalogs.catalog_delete, name="catalog-delete"),
    path("catalogs/<int:pk>/test/", catalogs.catalog_test, name="catalog-test"),
    path("tables/", views.table_list, name="table-list"),
    path("tables/register/", views.table_register, name="table-register"),
    path("tables/<int:pk>/", views.table_detail, name="table-detail"),
    path("tables/<int:pk>/refresh/", views.table_refresh, name="table-refresh"),
    path("tables/<int:pk>/snapshots/", views.table_snapshots, name="table-snapshots"),
    path("tables/<int:pk>/files/", views.table_files, name="table-files"),
    path("tables/<int:pk>/splits/", views.table_splits, name="table-splits"),
    path("tables/<int:pk>/partitions/", views.table_partitions, name="table-partitions"),
    path("tables/<int:pk>/changes/", views.table_changes, name="table-changes"),
    path("tables/<int:pk>/records/", record_views.table_records, name="table-records"),
    path("tables/<int:pk>/processes/", process_views.table_processes, name="table-processes"),
    path("tables/<int:pk>/processes/run/", process_views.table_process_run, name="table-process-run"),
    path("tables/<int:pk>/overrides/", overrides.table_overrides, name="table-overrides"),
    path("tables/<int:pk>/maintenance/", maintenance.table_maintenance_tab, name="table-maintenance"),
    # plan preview beside "Run now" (submission helper)
    path(
        "tables/<int:pk>/processes/preview/",
        process_views.table_process_preview,
        name="table-process-preview",
    ),
    path("processes/", process_views.process_list, name="process-list"),
    path("processes/<int:pk>/", process_views.process_detail, name="process-detail"),
    path("processes/<int:pk>/<str:verb>/", process_views.process_act, name="process-act"),
    path("queries/", storage_views.workbench, name="workbench"),
    path("queries/run/", storage_views.query_run, name="query-run"),
    path("queries/tables/", storage_views.workbench_tables, name="workbench-tables"),
    path("queries/tables/<int:pk>/columns/", storage_views.workbench_columns, name="workbench-columns"),
    path("queries/<int:pk>/", storage_views.query_detail, name="query-detail"),
    path("queries/<int:pk>/cancel/", storage_views.query_cancel, name="query-cancel"),
    path("queries/<int:pk>/export.<str:fmt>", storage_views.query_export, name="query-export"),
    path("cached-results/", storage_views.cached_result_list, name="cached-result-list"),
    path("cached-results/<int:pk>/<str:verb>/", storage_views.cached_result_act, name="cached-result-act"),
    path("storages/", storages.storage_list, name="storage-list"),
    path("storages/new/", storages.storage_create, name="storage-create"),
    path("storages/<int:pk>/edit/", storages.storage_edit, name="storage-edit"),
    path("storages/<int:pk>/test/", storages.storage_test, name="storage-test"),
    path("storages/<int:pk>/delete/", storages.storage_delete, name="storage-delete"),
    # Trash (issue 14): a process's trash card and its restore button.
    path("trash/processes/<int:pk>/", trash_views.process_trash, name="process-trash"),
    path(
        "trash/processes/<int:pk>/restore/",
        trash_views.process_trash_restore_view,
        name="process-trash-restore",
    ),
]

urlpatterns = [
    path("", include((console_patterns, "console"))),
    path("healthz", views.healthz, name="healthz"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("accounts/login/", ThrottledLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("console.api.urls")),
    path(
        "api/schema/",
        SpectacularAPIView.as_view(authentication_classes=AUTHENTICATION_CLASSES),
        name="api-schema",
    ),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

# Single sign-on (console/sso): OpenID Connect sign-in and its callback, under /accounts/login/ so
# they need no session; both answer 404 unless LAKEWARDEN_OIDC_* is set (console/sso/config.py).
urlpatterns += [
    path("accounts/login/oidc/", oidc_login.oidc_authenticate, name="oidc_authentication_init"),
    path("accounts/login/oidc/callback/", oidc_login.oidc_callback, name="oidc_authentication_callback"),
]

handler400 = "console.errorpages.bad_request"
handler403 = "console.errorpages.permission_denied"
handler404 = "console.errorpages.not_found"
handler500 = "console.errorpages.server_error"

# Prometheus metrics (token or allow-list, see console/metrics/access.py)
from console.metrics.views import metrics as metrics_view  # noqa: E402

urlpatterns += [path("metrics", metrics_view, name="metrics")]

# Audit trail (issue 16, console/audit): the page, for operators and admins. (``+=`` extends the
# list the "console" namespace already includes.)
from console.views import audit as audit_views  # noqa: E402

console_patterns += [path("audit/", audit_views.audit_list, name="audit")]

# Alerts (issue 16): the page (channels, rules, episodes, deliveries) and its "send test" button, admins.
from console.views import alerts as alert_views  # noqa: E402

console_patterns += [
    path("alerts/", alert_views.alerts_page, name="alerts"),
    path("alerts/channels/<int:pk>/test/", alert_views.alert_channel_test, name="alert-channel-test"),
    path("alerts/channels/<int:pk>/toggle/", alert_views.alert_channel_toggle, name="alert-channel-toggle"),
    path("alerts/rules/<int:pk>/toggle/", alert_views.alert_rule_toggle, name="alert-rule-toggle"),
    # Issue 32: the forms that create, edit and delete channels and rules (a team's, for its operators).
    path("alerts/channels/new/", alert_views.alert_channel_create, name="alert-channel-create"),
    path("alerts/channels/<int:pk>/edit/", alert_views.alert_channel_edit, name="alert-channel-edit"),
    path("alerts/channels/<int:pk>/delete/", alert_views.alert_channel_delete, name="alert-channel-delete"),
    path("alerts/rules/new/", alert_views.alert_rule_create, name="alert-rule-create"),
    path("alerts/rules/<int:pk>/edit/", alert_views.alert_rule_edit, name="alert-rule-edit"),
    path("alerts/rules/<int:pk>/delete/", alert_views.alert_rule_delete, name="alert-rule-delete"),
]

# Resource groups (issue 31): the capacity page (groups, workers, queue depth, backlog, budgets).
from console.views import capacity as capacity_views  # noqa: E402

console_patterns += [
    path("capacity/", capacity_views.capacity_page, name="capacity"),
    path("capacity/groups/", capacity_views.resource_group_create, name="resource-group-create"),
    path("capacity/groups/<int:pk>/", capacity_views.resource_group_update, name="resource-group-update"),
]

# Teams (issue 32, console/teams): the page where admins and team owners manage members and grants.
from console.views import teams as team_views  # noqa: E402

console_patterns += [
    path("teams/", team_views.team_list, name="team-list"),
    path("teams/<int:pk>/members/", team_views.team_member_add, name="team-member-add"),
    path(
        "teams/<int:pk>/members/<int:member_pk>/remove/",
        team_views.team_member_remove,
        name="team-member-remove",
    ),
    path("teams/<int:pk>/grants/", team_views.team_grant_add, name="team-grant-add"),
    path(
        "teams/<int:pk>/grants/<int:grant_pk>/remove/", team_views.team_grant_remove, name="team-grant-remove"
    ),
    path("teams/<int:pk>/metrics-token/", team_views.team_metrics_token, name="team-metrics-token"),
]
