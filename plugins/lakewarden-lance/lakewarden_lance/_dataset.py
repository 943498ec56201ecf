"""Private helpers: opening a Lance dataset at a version, and its fragments as file slices.

A Lance fragment is one or more data files (``data/*.lance``; a column added later lives in its
own file) plus at most one deletion file (``_deletions/<fragment>-<version>-<id>.arrow|bin``). It
maps onto one ``FileSlice``: the base file is the fragment's first data file with the size of all
its data files (their paths in ``extra["data_files"]``), and the deletion file is its
``DELETION_VECTOR`` delete file. ``file_group_id`` is ``fragment-<id>``; ``base_instant`` the
version the slice was listed at, so a slice alone says which deletions apply to it.
"""

from __future__ import annotations

import datetime as dt
import enum
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from storage.io import StoreOptions, filesystem, is_object_store, join
from storage.spec.errors import CorruptTable, InstantNotFound, TableNotFound, UnsupportedFeature
from storage.spec.models import DataFile, FileContent, FileSlice, PartitionDescriptor

UNPARTITIONED = PartitionDescriptor("")


class LanceFormat(enum.StrEnum):
    """The format's name. Lakewarden's ``TableFormat`` enum holds only the built-in formats, and
    ``SpecTable.format`` is read as ``.value``: a one-member StrEnum of our own satisfies both."""

    LANCE = "lance"


def storage_options(location: str, storage: StoreOptions | None) -> dict[str, str] | None:
    """Lance (object_store) options for an object-store location; None for a local one."""
    if not is_object_store(location):
        return None
    options = (storage or StoreOptions.from_env()).hudi_options()  # object_store's lower-case keys
    options.pop("conditional_put", None)  # Lance commits with its own put-if-absent
    return options


def open_dataset(location: str, storage: StoreOptions | None = None, version: int | None = None) -> Any:
    """``lance.dataset`` at ``version`` (latest when None), with Lakewarden's errors; one whose
    schema has duplicate field ids is refused (``check_field_ids``)."""
    import lance

    try:
        dataset = lance.dataset(location, version=version, storage_options=storage_options(location, storage))
    except ValueError as exc:
        text = str(exc)
        if version is not None and ("version" in text.lower() or "not found" in text.lower()):
            raise InstantNotFound(f"no version {version!r} in the Lance dataset {location}: {text}") from exc
        raise TableNotFound(f"no Lance dataset at {location}: {text}") from exc
    except OSError as exc:
        raise CorruptTable(f"the Lance dataset {location} cannot be read: {exc}") from exc
    check_field_ids(dataset, location)
    return dataset


def check_field_ids(dataset: Any, location: str) -> None:
    """``CorruptTable`` when two data files of a fragment hold the same field id.

    Lance 0.10.5 and older gave a column added after ``drop_columns`` the id of a dropped column
    still stored in an older data file of each fragment; Lance reads that file for it, so the
    column shows the dropped column's values, with no error. Lance's ``validate`` refuses such a
    dataset (its test data ``v0.10.5/corrupt_schema``), and Lance repairs it on its next commit.
    The check reads the manifest only (negative ids are Lance's tombstones)."""
    for fragment in dataset.get_fragments():
        files = fragment.metadata.files
        if len(files) < 2:
            continue
        seen: set[int] = set()
        duplicated: list[int] = []
        for data_file in files:
            for field_id in data_file.fields:
                if field_id >= 0 and field_id in seen and field_id not in duplicated:
                    duplicated.append(field_id)
                seen.add(field_id)
        if duplicated:
            names = {f.id(): f.name() for f in _all_fields(dataset.lance_schema.fields())}
            columns = ", ".join(
                f"field id {i} (column {names[i]})" if i in names else f"field id {i}" for i in duplicated
            )
            raise CorruptTable(
                f"version {dataset.version} of the Lance dataset {location} has duplicate field ids in"
                f" fragment {fragment.fragment_id}: {columns} is stored in more than one of its data files,"
                " a fault of Lance 0.10 and older after add_columns and drop_columns; reading it would"
                " return another column's values. A write by a current Lance repairs it, as Lance's own"
                ' migration does (for example lance.dataset(uri).delete("false")).'
            )


def _all_fields(fields: list[Any]) -> Iterator[Any]:
    for field in fields:
        yield field
        yield from _all_fields(field.children())


def version_time(version: dict[str, Any]) -> dt.datetime:
    """pylance gives naive local times (``datetime.fromtimestamp``); make them aware UTC."""
    moment = version["timestamp"]
    return moment.astimezone(dt.UTC)


class Files:
    """Paths and sizes of one dataset's files (sizes of deletion files are stat'ed once)."""

    def __init__(self, location: str, storage: StoreOptions | None) -> None:
        self.location = location.rstrip("/")
        self.storage = storage
        self._sizes: dict[str, int] = {}

    def data_path(self, relative: str) -> str:
        return join(self.location, "data", relative)

    def deletion_path(self, fragment_id: int, deletion: Any) -> str:
        return join(self.location, deletion.path(fragment_id))

    def size(self, path: str) -> int:
        """The size of a file the manifest names without one (deletion files), stat'ed once."""
        if path not in self._sizes:
            fs, fs_path = filesystem(path, self.storage)
            info = fs.get_file_info(fs_path)
            if info.type != pafs.FileType.File:
                raise CorruptTable(f"file {path} of the Lance dataset {self.location} is missing")
            self._sizes[path] = int(info.size or 0)
        return self._sizes[path]


def fragment_slice(files: Files, metadata: Any, version: int) -> FileSlice:
    """The file slice of one fragment (``lance.fragment.FragmentMetadata``) at ``version``."""
    if not metadata.files:
        raise UnsupportedFeature(f"fragment {metadata.id} of {files.location} has no data file")
    paths, size = [], 0
    for data_file in metadata.files:
        if getattr(data_file, "base_id", None) is not None:
            raise UnsupportedFeature(
                f"fragment {metadata.id} of {files.location} lives in another base path (shallow clone)"
            )
        path = files.data_path(data_file.path)
        paths.append(path)
        known = data_file.file_size_bytes
        size += int(known) if known else files.size(path)
    physical = int(metadata.physical_rows or 0)
    base = DataFile(
        path=paths[0],
        size_bytes=size,
        record_count=physical,
        file_format="lance",
        extra={"fragment_id": metadata.id, "data_files": tuple(paths)},
    )
    deletes: tuple[DataFile, ...] = ()
    deletion = metadata.deletion_file
    if deletion is not None:
        path = files.deletion_path(metadata.id, deletion)
        deletes = (
            DataFile(
                path=path,
                size_bytes=files.size(path),
                record_count=int(deletion.num_deleted_rows or 0),
                content=FileContent.DELETION_VECTOR,
                file_format=str(deletion.file_type),
                extra={"fragment_id": metadata.id},
            ),
        )
    return FileSlice(UNPARTITIONED, base, deletes, f"fragment-{metadata.id}", version)


def live_rows(metadata: Any) -> int:
    deletion = metadata.deletion_file
    return int(metadata.physical_rows or 0) - (int(deletion.num_deleted_rows or 0) if deletion else 0)


def fragment_slices(files: Files, dataset: Any) -> Iterator[FileSlice]:
    for fragment in dataset.get_fragments():
        yield fragment_slice(files, fragment.metadata, dataset.version)


def slice_key(file_slice: FileSlice) -> tuple[str, ...]:
    """What makes two listings' slices the same: data files and deletion file."""
    base = file_slice.base_file
    data = tuple(base.extra.get("data_files", (base.path,))) if base is not None else ()
    return (*data, *(f.path for f in file_slice.delete_files))
