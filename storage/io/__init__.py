"""Where tables live: local paths, ``file:`` URIs and object stores (``s3://``, ``gs://``,
``abfss://``) with their credentials, through the libraries' own file systems."""

from __future__ import annotations

from storage.io.objects import PutUnsupported, put_if_absent
from storage.io.paths import PathNotAllowed, is_local, local_path
from storage.io.stores import (
    OBJECT_SCHEMES,
    StoreError,
    StoreOptions,
    describe_error,
    filesystem,
    is_object_store,
    is_within,
    join,
    normalise,
    scheme,
    uri,
)

__all__ = [
    "OBJECT_SCHEMES",
    "PathNotAllowed",
    "PutUnsupported",
    "StoreError",
    "StoreOptions",
    "describe_error",
    "filesystem",
    "is_local",
    "is_object_store",
    "is_within",
    "join",
    "local_path",
    "normalise",
    "put_if_absent",
    "scheme",
    "uri",
]
