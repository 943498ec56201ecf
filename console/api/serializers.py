from __future__ import annotations

from rest_framework import serializers

from storage.models import Catalog, CatalogKind, Table, format_choices
from storage.secrets import mask_mapping


def mask_secrets(properties: dict) -> dict:
    """Properties safe to show: what storage/secrets.py calls secret masked, and the password
    inside any URL or DSN value (a SQL catalog's ``uri`` carries one)."""
    return mask_mapping(properties)


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


class CatalogUpdateSerializer(serializers.Serializer):
    """A catalog's new properties: the whole set, as the console's edit form sends it (a secret
    sent blank or masked keeps the stored one). Its name and kind never change: its tables are
    registered under them; sending other values is refused."""

    name = serializers.SlugField(max_length=100, required=False)
    kind = serializers.ChoiceField(choices=CatalogKind.choices, required=False)
    properties = serializers.DictField(child=serializers.CharField(allow_blank=True))

    def validate(self, attrs):
        catalog = self.context["catalog"]
        for field in ("name", "kind"):
            if field in attrs and attrs[field] != getattr(catalog, field):
                raise serializers.ValidationError(
                    {field: [f"a catalog's {field} cannot change (it is {getattr(catalog, field)!r})"]}
                )
        return attrs


class SyncReportSerializer(serializers.Serializer):
    added = serializers.ListField(child=serializers.CharField())
    already_registered = serializers.ListField(child=serializers.CharField())
    failed = serializers.DictField(child=serializers.CharField())


class TableSerializer(serializers.ModelSerializer):
    # null for tables registered by location
    catalog = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

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
    format = serializers.ChoiceField(choices=format_choices(), required=False)
    properties = serializers.DictField(required=False, default=dict)
    allow_nested = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Register the table although its location holds, or lies inside, another registered"
        " table's (refused otherwise; maintenance of each keeps off the other's files)",
    )

    def validate(self, attrs):
        if not attrs.get("location") and not attrs.get("identifier"):
            raise serializers.ValidationError({"location": "give a location, or a catalog and an identifier"})
        if attrs.get("identifier") and not attrs.get("catalog"):
            raise serializers.ValidationError({"catalog": "an identifier needs a catalog"})
        return attrs


# --- table reads through the spec API -----------------------------------------------------------


class InstantSerializer(serializers.Serializer):
    id = serializers.CharField()
    timestamp = serializers.DateTimeField()
    operation = serializers.CharField()
    parent_id = serializers.CharField(allow_null=True)
    summary = serializers.SerializerMethodField()

    def get_summary(self, instant) -> dict:
        from storage.selectors import jsonable

        return jsonable(instant.summary)


class DataFileSerializer(serializers.Serializer):
    path = serializers.CharField()
    content = serializers.CharField(source="content.value")
    size_bytes = serializers.IntegerField()
    record_count = serializers.IntegerField()


class FileSliceSerializer(serializers.Serializer):
    path = serializers.CharField()
    partition_path = serializers.CharField(source="partition.path")
    partition = serializers.SerializerMethodField()
    size_bytes = serializers.IntegerField(source="base_file.size_bytes", default=0)
    record_count = serializers.IntegerField()
    delete_files = DataFileSerializer(many=True)
    stats = serializers.SerializerMethodField()

    def get_partition(self, file_slice) -> dict:
        from storage.selectors import jsonable

        return jsonable(file_slice.partition.values)

    def get_stats(self, file_slice) -> dict:
        from storage.selectors import jsonable

        base = file_slice.base_file
        if base is None:
            return {}
        return {
            "lower_bounds": jsonable(base.lower_bounds or {}),
            "upper_bounds": jsonable(base.upper_bounds or {}),
            "null_counts": jsonable(base.null_counts or {}),
        }


class FilesPageSerializer(serializers.Serializer):
    instant = InstantSerializer(allow_null=True)
    page = serializers.IntegerField()
    page_size = serializers.IntegerField()
    has_next = serializers.BooleanField()
    files = FileSliceSerializer(many=True)


class SplitPartSerializer(serializers.Serializer):
    path = serializers.CharField(source="file_slice.path")
    start = serializers.IntegerField()
    length = serializers.IntegerField()
    estimated_rows = serializers.IntegerField()
    delete_files = serializers.SerializerMethodField()

    def get_delete_files(self, part) -> int:
        return len(part.file_slice.delete_files)


class SplitSerializer(serializers.Serializer):
    weight = serializers.IntegerField()
    size_bytes = serializers.IntegerField()
    estimated_rows = serializers.IntegerField()
    parts = SplitPartSerializer(many=True)


class SplitPlanSerializer(serializers.Serializer):
    instant = InstantSerializer(allow_null=True)
    summary = serializers.DictField()
    truncated = serializers.BooleanField(help_text="only the first 200 splits are listed")
    splits = SplitSerializer(many=True)


class PartitionSerializer(serializers.Serializer):
    path = serializers.CharField(source="partition.path")
    file_count = serializers.IntegerField()
    total_bytes = serializers.IntegerField()
    record_count = serializers.IntegerField()
    delete_file_count = serializers.IntegerField()
    small_file_count = serializers.IntegerField()


class PartitionChangeSerializer(serializers.Serializer):
    path = serializers.CharField(source="partition.path")
    files_added = serializers.IntegerField()
    files_removed = serializers.IntegerField()
    bytes_added = serializers.IntegerField()
    bytes_removed = serializers.IntegerField()
    records_added = serializers.IntegerField()
    records_removed = serializers.IntegerField()


class FileChangeSerializer(serializers.Serializer):
    kind = serializers.CharField(source="kind.value")
    file = FileSliceSerializer(source="file_slice")
