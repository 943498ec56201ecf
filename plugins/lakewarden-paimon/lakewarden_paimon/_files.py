"""The table's files through pyarrow's file system (a local folder or an object-store prefix),
reached with Lakewarden's credentials (``storage.io``). Locations are compared as file-system
paths (``bucket/key`` on S3, absolute paths locally), whatever scheme spelling they came with."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pyarrow.fs as pafs

from storage.io import filesystem, is_local, local_path
from storage.io import uri as location_uri
from storage.io.guard import KeptFiles, PathGuard


def pypaimon_options(storage: Any) -> dict[str, str]:
    """pypaimon's file IO options for an object store's ``StoreOptions`` (None: the environment)."""
    if storage is None:
        return {}
    options = {
        "fs.s3.endpoint": storage.endpoint,
        "fs.s3.accessKeyId": storage.access_key,
        "fs.s3.accessKeySecret": storage.secret_key,
        "fs.s3.securityToken": storage.session_token,
        "fs.s3.region": storage.region,
        "fs.s3.path-style-access": "true" if storage.path_style else "false",
    }
    return {key: value for key, value in options.items() if value}


class Files:
    """File operations under one table location."""

    def __init__(self, location: str, storage: Any = None) -> None:
        self.location = location.rstrip("/")
        self.local = is_local(location)
        self.fs, self.root = filesystem(self.location, storage)
        #: Set by a maintenance process (``context.guard``): removes and writes are checked by it;
        #: a file it refuses stays where it is and is noted in ``kept``.
        self.guard: PathGuard | None = None
        self.kept = KeptFiles()

    def path(self, location: str) -> str:
        """The file-system path of a location under this table (a path, ``file:`` or store URI)."""
        if self.local:
            return os.path.abspath(local_path(location))
        return location.split("://", 1)[1] if "://" in location else location

    def location_of(self, path: str) -> str:
        return location_uri(self.location, path)

    def child(self, *parts: str) -> str:
        return "/".join([self.location, *parts])

    def names(self, folder: str) -> list[str]:
        """Names of the files directly in ``folder`` (a location); none when it is missing."""
        selector = pafs.FileSelector(self.path(folder), allow_not_found=True)
        return [i.base_name for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.File]

    def walk(self, folder: str) -> Iterator[pafs.FileInfo]:
        """Every file under ``folder`` (a location), recursively."""
        selector = pafs.FileSelector(self.path(folder), allow_not_found=True, recursive=True)
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                yield info

    def folders(self) -> list[str]:
        selector = pafs.FileSelector(self.root, allow_not_found=True)
        return [i.base_name for i in self.fs.get_file_info(selector) if i.type == pafs.FileType.Directory]

    def size(self, location: str) -> int:
        info = self.fs.get_file_info(self.path(location))
        return int(info.size or 0) if info.type == pafs.FileType.File else 0

    def remove(self, location: str) -> int:
        """Delete one file: 1 when it was there, 0 when it was already gone or the guard keeps it."""
        reason = self.guard.refusal(location) if self.guard is not None else None
        if reason:
            self.kept.add(location, reason)
            return 0
        try:
            self.fs.delete_file(self.path(location))
        except FileNotFoundError:
            return 0
        return 1

    def write_text(self, location: str, text: str) -> None:
        """Write a small file whole (locally through a rename, so no reader sees half of it)."""
        if self.guard is not None:
            self.guard.check(location, "write")
        path = self.path(location)
        temporary = f"{path}.lakewarden.tmp" if self.local else path
        with self.fs.open_output_stream(temporary) as out:
            out.write(text.encode())
        if temporary != path:
            self.fs.move(temporary, path)
