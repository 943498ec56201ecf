from __future__ import annotations

from rest_framework import serializers

from console.models import Catalog, CatalogKind, Table, TableFormat

SECRET_KEYS = ("token", "credential", "password", "secret")


def mask_secrets(properties: dict) -> dict:
    return {
        key: ("********" if any(word in key.lower() for word in SECRET_KEYS) else value)
        for key, value in (properties or {}).items()
    }


class CatalogSerializer(serializers.ModelSerializer):
    properties = serializers.SerializerMethodField()
    table_count = serializers.IntegerField(read_only=True, default=None)

    class Meta:
        model = Catalog
        fields = ["id", "name", "kind", "properties", "table_count", "created_at", "last_synced_at"]

    def get_properties(self, catalog: Catalog) -> dict:
        return mask_secrets(catalog.properties)


class CatalogCreateSerializer(serializers.Serializer):
    name = serializers.SlugField(max_length=100)
    kind = serializers.ChoiceField(choices=CatalogKind.choices)
    properties = serializers.DictField(
        child=serializers.CharField(allow_blank=True), required=False, default=dict
    )


class SyncReportSerializer(serializers.Serializer):
    added = serializers.ListField(child=serializers.CharField())
    already_registered = serializers.ListField(child=serializers.CharField())
    failed = serializers.DictField(child=serializers.CharField())


class TableSerializer(serializers.ModelSerializer):
    catalog = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Table
        fields = [
            "id",
            "name",
            "identifier",
            "catalog",
            "format",
            "location",
            "properties",
            "current_instant",
            "file_count",
            "total_bytes",
            "record_count",
            "instant_count",
            "last_commit_at",
            "refreshed_at",
            "refresh_error",
            "registered_at",
        ]


class TableRegisterSerializer(serializers.Serializer):
    location = serializers.CharField(required=False, allow_blank=False, max_length=1024)
    catalog = serializers.PrimaryKeyRelatedField(queryset=Catalog.objects.all(), required=False)
    identifier = serializers.CharField(required=False, max_length=255)
    format = serializers.ChoiceField(choices=TableFormat.choices, required=False)
    properties = serializers.DictField(required=False, default=dict)

    def validate(self, attrs):
        if not attrs.get("location") and not attrs.get("identifier"):
            raise serializers.ValidationError({"location": "give a location, or a catalog and an identifier"})
        if attrs.get("identifier") and not attrs.get("catalog"):
            raise serializers.ValidationError({"catalog": "an identifier needs a catalog"})
        return attrs
