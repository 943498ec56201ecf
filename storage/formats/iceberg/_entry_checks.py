"""What listing relies on in a decoded manifest entry, checked per entry (``checked_entry``) or
once per writer schema (``entries_well_typed``), and the rows of a manifest list."""

from __future__ import annotations

from typing import Any

_INTEGERS = ("int", "long", {"type": "int"}, {"type": "long"})
_STRINGS = ("string", {"type": "string"})


def entries_well_typed(schema: dict[str, Any]) -> bool:
    """Whether every entry this writer schema decodes passes ``checked_entry`` unchanged: its
    status is an int or long, its data_file an inline record (not a nullable union or a named
    reference) with a string file_path, int or long file_size_in_bytes and record_count, and an
    inline record as partition. Listing then skips the per-entry check; any other shape (nullable
    fields, unions, named types) keeps it."""

    def types(fields: Any) -> dict[Any, Any]:
        return {f.get("name"): f.get("type") for f in fields if isinstance(f, dict)}

    def inline_record(node: Any) -> bool:
        return (
            isinstance(node, dict) and node.get("type") == "record" and isinstance(node.get("fields"), list)
        )

    entry = types(schema.get("fields") or ())
    data_file: Any = entry.get("data_file")
    if entry.get("status") not in _INTEGERS or not inline_record(data_file):
        return False
    fields = types(data_file["fields"])
    return (
        fields.get("file_path") in _STRINGS
        and fields.get("file_size_in_bytes") in _INTEGERS
        and fields.get("record_count") in _INTEGERS
        and inline_record(fields.get("partition"))
    )


def checked_entry(record: Any) -> dict[str, Any]:
    """A decoded manifest entry with the fields listing relies on, or ``ValueError``: a null
    ``data_file`` (a nullable union written null), a missing path, size or count. A null
    partition tuple reads as an empty one (every partition value null)."""
    data = record.get("data_file") if isinstance(record, dict) else None
    if not isinstance(data, dict):
        raise ValueError("a manifest entry has no data_file")
    if not isinstance(record.get("status"), int):
        raise ValueError("a manifest entry has no status")
    if not isinstance(data.get("file_path"), str):
        raise ValueError("a manifest entry's data_file has no file_path")
    if not isinstance(data.get("file_size_in_bytes"), int) or not isinstance(data.get("record_count"), int):
        raise ValueError(f"data file {data['file_path']} has no file_size_in_bytes or record_count")
    partition = data.get("partition")
    if partition is None:
        data["partition"] = {}
    elif not isinstance(partition, dict):
        raise ValueError(f"data file {data['file_path']} has a partition that is not a record")
    return record


def checked_manifest_list(rows: Any, path: str) -> None:
    """``CorruptTable`` naming ``path`` unless every row of a manifest list names its manifest."""
    from storage.spec.errors import CorruptTable

    for row in rows:
        if not isinstance(row, dict) or not isinstance(row.get("manifest_path"), str):
            raise CorruptTable(f"manifest list {path} has a row without a manifest_path")
