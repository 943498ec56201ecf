"""Paimon metadata through pypaimon's own readers: snapshots, tags and manifest entries, streamed.

A Paimon table folder holds ``schema/schema-N`` (JSON), ``snapshot/snapshot-N`` (JSON), the
``manifest/`` folder (Avro manifest lists and manifests), ``tag/tag-<name>`` (a snapshot JSON kept
by name) and the data files under ``<partition>/bucket-<n>/``. A snapshot names a *base* manifest
list (the files live at the previous snapshot) and a *delta* one (the files this snapshot added,
``kind`` 0, and removed, ``kind`` 1).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from lakewarden_paimon._manifests import reading_older_manifests

ADD, DELETE = 0, 1


def open_file_store_table(location: str, options: dict[str, str] | None = None) -> Any:
    """pypaimon's ``FileStoreTable`` for the table at ``location`` (no catalog needed);
    ``options`` are pypaimon's file IO options (an object store's credentials). Its manifests
    are read in any format and version Paimon wrote (``_manifests``)."""
    from pypaimon.table.file_store_table import FileStoreTable

    return reading_older_manifests(FileStoreTable.from_path(location.rstrip("/"), options))


def snapshot_ids(table: Any) -> list[int]:
    """Ids of the snapshot files present, oldest first (expired ones are gone)."""
    folder = f"{table.table_path.rstrip('/')}/snapshot"
    if not table.file_io.exists(folder):
        return []
    names = [str(info.path).rstrip("/").rsplit("/", 1)[-1] for info in table.file_io.list_status(folder)]
    return sorted(int(n[9:]) for n in names if n.startswith("snapshot-") and n[9:].isdigit())


def load_snapshot(table: Any, snapshot_id: int) -> Any:
    return table.snapshot_manager().get_snapshot_by_id(int(snapshot_id))


def tag_snapshots(table: Any) -> dict[str, Any]:
    """Tags by name, each a snapshot (Paimon keeps a tag's snapshot JSON under ``tag/``)."""
    manager = table.tag_manager()
    if not table.file_io.exists(manager.tag_directory()):
        return {}
    return {name: manager.get(name) for name in sorted(manager.list_tags())}


def manifest_list_names(snapshot: Any) -> list[str]:
    """Manifest lists a snapshot names (base, delta, changelog)."""
    names = [snapshot.base_manifest_list, snapshot.delta_manifest_list, snapshot.changelog_manifest_list]
    return [name for name in names if name]


def manifests(table: Any, list_name: str) -> list[Any]:
    from pypaimon.manifest.manifest_list_manager import ManifestListManager

    return ManifestListManager(table).read(list_name)


def entries(table: Any, list_names: Iterable[str]) -> Iterator[Any]:
    """Manifest entries of the manifests in ``list_names``, one manifest in memory at a time."""
    from pypaimon.manifest.manifest_file_manager import ManifestFileManager

    reader = ManifestFileManager(table)
    for list_name in list_names:
        for manifest in manifests(table, list_name):
            yield from reader.read(manifest.file_name, file_size=manifest.file_size)


def live_entries(table: Any, snapshot: Any) -> Iterator[Any]:
    """The ADD entries live at ``snapshot``, streamed: a first pass counts the DELETE entries (a
    deleted file cancels one ADD of the same identifier), a second yields the ADDs they leave."""
    lists = [n for n in (snapshot.base_manifest_list, snapshot.delta_manifest_list) if n]
    deleted: Counter = Counter(e.identifier() for e in entries(table, lists) if e.kind == DELETE)
    for entry in entries(table, lists):
        if entry.kind != ADD:
            continue
        key = entry.identifier()
        if deleted[key]:
            deleted[key] -= 1
            continue
        yield entry


def partition_values(entry: Any) -> dict[str, Any]:
    return dict(entry.partition.to_dict()) if entry.partition is not None else {}


def data_file_path(table: Any, entry: Any) -> str:
    """Where the entry's data file lives (its external path when it has one)."""
    external = entry.file.external_path
    if external:
        return str(external)
    from pypaimon.utils.file_store_path_factory import canonical_data_file_path

    path = canonical_data_file_path(table, entry.partition.values, entry.bucket, entry.file.file_name)
    return path[len("file:") :] if path.startswith("file:") else path
