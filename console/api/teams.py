"""REST API of teams and grants (``/api/v1/teams/``, ``/api/v1/grants/``), for admins: every
change audited (console/teams/services.py). Team owners managing their own team is later work.
``/api/v1/teams/<id>/metrics-token/``: a team's ``/metrics`` scrape token (POST makes, DELETE revokes)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.response import Response

from console.api.base import ApiDefaults
from console.api.storage import NameField
from console.roles import ADMIN
from console.teams import services
from console.teams.models import GRANT_ROLES, Grant, Team


class TeamSerializer(serializers.ModelSerializer):
    members = serializers.SerializerMethodField()

    class Meta:
        model = Team
        fields = ["id", "name", "description", "sso_groups", "members", "created_at"]

    def get_members(self, team) -> list[dict]:
        return [
            {"username": m.user.username, "source": m.source}
            for m in sorted(team.memberships.all(), key=lambda m: m.user.username)
        ]


class TeamWriteSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(max_length=255, required=False, allow_blank=True)
    members = serializers.ListField(
        child=serializers.CharField(max_length=150), required=False, help_text="usernames added by hand"
    )
    sso_groups = serializers.ListField(
        child=serializers.CharField(max_length=255),
        required=False,
        help_text="OIDC group claims or LDAP group DNs whose members join at sign-in",
    )


class TeamUpdateSerializer(TeamWriteSerializer):
    name = None  # type: ignore[assignment]


class MetricsTokenSerializer(serializers.Serializer):
    team = serializers.CharField()
    token = serializers.CharField(help_text="Send as 'Authorization: Bearer <token>'; shown only here")


class GrantSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="name", read_only=True)
    catalog = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = Grant
        fields = ["id", "team", "role", "catalog", "namespace", "table", "created_at"]


class GrantWriteSerializer(serializers.Serializer):
    team = NameField(slug_field="name", queryset=Team.objects.all())
    role = serializers.ChoiceField(choices=GRANT_ROLES)
    catalog = serializers.CharField(required=False, help_text="a catalog's name")
    namespace = serializers.CharField(required=False, help_text="catalog.namespace, e.g. lake.sales")
    table = serializers.IntegerField(
        required=False, min_value=1, max_value=2**63 - 1, help_text="a table's id"
    )


class _AdminsOnly(ApiDefaults, mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    write_role = ADMIN
    action_roles = {"list": ADMIN, "retrieve": ADMIN}


class TeamViewSet(_AdminsOnly):
    serializer_class = TeamSerializer
    queryset = Team.objects.none()

    def get_queryset(self):
        return Team.objects.prefetch_related("memberships__user")

    @extend_schema(request=TeamWriteSerializer, responses={201: TeamSerializer, 200: TeamSerializer})
    def create(self, request):
        """Create a team, or bring the one of that name to the body (idempotent: 200 when it existed)."""
        data = TeamWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team, created = services.team_set(**data.validated_data)
        answer = TeamSerializer(self.get_queryset().get(pk=team.pk)).data
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=TeamUpdateSerializer, responses={200: TeamSerializer})
    def partial_update(self, request, pk=None):
        data = TeamUpdateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        team, _ = services.team_set(name=self.get_object().name, **data.validated_data)
        return Response(TeamSerializer(self.get_queryset().get(pk=team.pk)).data)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.team_delete(team=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(request=None, responses={201: MetricsTokenSerializer, 204: None})
    @action(detail=True, methods=["post", "delete"], url_path="metrics-token")
    def metrics_token(self, request, pk=None):
        """POST: a new ``/metrics`` scrape token of the team (replacing its old one), answered this
        once; a scrape sending it gets the series of the team's tables only. DELETE: revoke it."""
        team = self.get_object()
        if request.method == "DELETE":
            if not services.team_metrics_token_revoke(team=team):
                raise NotFound(f"team {team.name} has no metrics token")
            return Response(status=status.HTTP_204_NO_CONTENT)
        token = services.team_metrics_token_create(team=team)
        return Response({"team": team.name, "token": token}, status=status.HTTP_201_CREATED)


class GrantViewSet(_AdminsOnly):
    serializer_class = GrantSerializer
    queryset = Grant.objects.none()

    def get_queryset(self):
        return Grant.objects.select_related("team", "catalog")

    @extend_schema(request=GrantWriteSerializer, responses={201: GrantSerializer, 200: GrantSerializer})
    def create(self, request):
        """Give a team a role on exactly one of: a catalog, a namespace, a table (idempotent: a
        grant on the same scope takes the new role, 200)."""
        data = GrantWriteSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        grant, created = services.grant_set(**data.validated_data)
        answer = GrantSerializer(grant).data
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(responses={204: None})
    def destroy(self, request, pk=None):
        services.grant_revoke(grant=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
