"""Discovery of intermediate result storages through the ``lakewarden.result_storages`` entry points.

    storage = build_storage(StorageDescriptor().with_type("filesystem").with_config("root", "/cache"))
    storage = build_storage(StorageDescriptor.from_yaml(text))

Every registration (code, YAML, console) ends in ``build_storage``: find the type, validate the
configuration against its ``config_schema``, instantiate without arguments, ``configure``. Secrets
are shown back only through ``mask_config``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import jsonschema

from storage.results.plugin import IntermediateResultStorage, StorageDescriptor

ENTRY_POINT_GROUP = "lakewarden.result_storages"
MASK = "********"


class StorageConfigError(ValueError):
    """A registration that cannot work: unknown type, or configuration failing its schema."""


class StorageUnavailable(ConnectionError):
    """The backend is configured but cannot be reached (a database down, a catalog refusing us).
    Messages never carry secrets."""


@functools.cache
def _discover() -> tuple[Mapping[str, type[IntermediateResultStorage]], Mapping[str, str]]:
    found: dict[str, type[IntermediateResultStorage]] = {}
    broken: dict[str, str] = {}
    for entry_point in entry_points(group=ENTRY_POINT_GROUP):
        # One plugin failing to import must not take the other storages down with it.
        try:
            cls = entry_point.load()
        except Exception as exc:
            broken[entry_point.name] = f"{entry_point.value} failed to load: {type(exc).__name__}: {exc}"
            continue
        if not (isinstance(cls, type) and issubclass(cls, IntermediateResultStorage)):
            broken[entry_point.name] = f"{entry_point.value} is not an IntermediateResultStorage"
            continue
        found[entry_point.name] = cls
    return MappingProxyType(found), MappingProxyType(broken)


def storage_types() -> Mapping[str, type[IntermediateResultStorage]]:
    """Storage classes by type name, loaded once; read-only afterwards."""
    return _discover()[0]


def broken_storage_types() -> Mapping[str, str]:
    """Entry points that could not be loaded, with the reason (for the console and logs)."""
    return _discover()[1]


def storage_type(type_name: str | None) -> type[IntermediateResultStorage]:
    """The class registered as ``type_name``; StorageConfigError naming the known types."""
    types = storage_types()
    try:
        return types[str(type_name)]
    except KeyError:
        if str(type_name) in broken_storage_types():
            raise StorageConfigError(
                f"storage type {type_name!r} is installed but {broken_storage_types()[str(type_name)]}"
            ) from None
        known = ", ".join(sorted(types)) or "none"
        raise StorageConfigError(f"unknown storage type {type_name!r} (known: {known})") from None


def validate_config(type_cls: type[IntermediateResultStorage], config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` checked against ``type_cls.config_schema``; StorageConfigError naming the key.

    Every problem is reported at once (a form shows them together), best match first. Values are
    never echoed for secret keys.
    """
    config = dict(config)
    validator_cls = jsonschema.validators.validator_for(type_cls.config_schema)
    validator = validator_cls(type_cls.config_schema)
    errors = sorted(validator.iter_errors(config), key=jsonschema.exceptions.relevance)
    if errors:
        messages = [_describe(error, type_cls) for error in errors]
        raise StorageConfigError(f"{type_cls.type_name} configuration: " + "; ".join(messages))
    return config


def _describe(error: jsonschema.ValidationError, type_cls: type[IntermediateResultStorage]) -> str:
    path = ".".join(str(part) for part in error.absolute_path)
    secret = bool(error.absolute_path) and str(error.absolute_path[0]) in type_cls.secret_keys
    message = error.message
    if secret and error.validator in {"type", "enum", "pattern", "format", "const"}:
        message = f"value does not match: {error.validator} {error.validator_value!r}"
    return f"{path}: {message}" if path else message


def build_storage(descriptor: StorageDescriptor | Mapping[str, Any]) -> IntermediateResultStorage:
    """A configured storage for a descriptor (or its flattened ``to_properties()`` form)."""
    if not isinstance(descriptor, StorageDescriptor):
        try:
            descriptor = StorageDescriptor.from_properties(descriptor)
        except ValueError as exc:
            raise StorageConfigError(str(exc)) from None
    type_cls = storage_type(descriptor.type)
    config = validate_config(type_cls, descriptor.config)
    storage = type_cls()
    storage.configure(config)
    return storage


# -- secrets ---------------------------------------------------------------------------------------

_KEYWORD_PASSWORD = re.compile(r"(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)


def mask_url(text: str) -> str:
    """``text`` with the password of a URL (``scheme://user:secret@host``) or of a libpq
    keyword DSN (``password=secret``) replaced by the mask; anything else unchanged."""
    text = _KEYWORD_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    if parts.password is None:
        return text
    userinfo, _, host = parts.netloc.rpartition("@")
    user = userinfo.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def mask_config(type_cls: type[IntermediateResultStorage], config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` safe to show: secret keys masked (a URL or DSN keeps everything but its
    password, so an operator still sees where it points), passwords inside any other URL too."""
    masked: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, str):
            url_masked = mask_url(value)
            if key in type_cls.secret_keys and url_masked == value:
                masked[key] = MASK if value else value
            else:
                masked[key] = url_masked
        elif key in type_cls.secret_keys and value is not None:
            masked[key] = MASK
        else:
            masked[key] = value
    return masked


def unmask_config(
    type_cls: type[IntermediateResultStorage], submitted: Mapping[str, Any], stored: Mapping[str, Any]
) -> dict[str, Any]:
    """The configuration an edit form means: a value still equal to its masked form keeps the
    stored secret, so re-submitting a masked form never overwrites a password with the mask."""
    original_masked = mask_config(type_cls, stored)
    result = dict(submitted)
    for key, value in submitted.items():
        if key in stored and value == original_masked.get(key) and value != stored[key]:
            result[key] = stored[key]
    return result


__all__ = [
    "ENTRY_POINT_GROUP",
    "MASK",
    "StorageConfigError",
    "StorageUnavailable",
    "broken_storage_types",
    "build_storage",
    "mask_config",
    "mask_url",
    "storage_type",
    "storage_types",
    "unmask_config",
    "validate_config",
]
