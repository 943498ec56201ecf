"""Discovery of intermediate result storages through the ``lakewarden.result_storages`` entry points.

    storage = build_storage(StorageDescriptor().with_type("filesystem").with_config("root", "/cache"))
    storage = build_storage(StorageDescriptor.from_yaml(text))

Every registration (code, YAML, console) ends in ``build_storage``: find the type, validate the
configuration against its ``config_schema``, instantiate without arguments, ``configure``. Secrets
are shown back only through ``mask_config``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import jsonschema

from storage.plugins import Plugins, discover_plugins
from storage.results.plugin import IntermediateResultStorage, StorageDescriptor
from storage.secrets import MASK, mask_mapping, mask_url, merge_secrets

ENTRY_POINT_GROUP = "lakewarden.result_storages"


class StorageConfigError(ValueError):
    """A registration that cannot work: unknown type, or configuration failing its schema."""


class StorageUnavailable(ConnectionError):
    """The backend is configured but cannot be reached (a database down, a catalog refusing us).
    Messages never carry secrets."""


@functools.cache
def _discover() -> Plugins[IntermediateResultStorage]:
    return discover_plugins(ENTRY_POINT_GROUP, IntermediateResultStorage)


def storage_types() -> Mapping[str, type[IntermediateResultStorage]]:
    """Storage classes by type name, loaded once; read-only afterwards."""
    return _discover().found


def broken_storage_types() -> Mapping[str, str]:
    """Entry points that could not be loaded, with the reason (for the console and logs)."""
    return _discover().broken


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


def mask_config(type_cls: type[IntermediateResultStorage], config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` safe to show: the storage's ``secret_keys`` and anything storage/secrets.py calls
    secret masked; a URL or DSN keeps everything but its password."""
    return mask_mapping(config, secret_keys=type_cls.secret_keys)


def unmask_config(
    type_cls: type[IntermediateResultStorage], submitted: Mapping[str, Any], stored: Mapping[str, Any]
) -> dict[str, Any]:
    """The configuration an edit form means: a secret sent back masked (or blank) keeps the stored
    one, so re-submitting a masked form never overwrites a password with the mask."""
    return merge_secrets(stored, submitted, secret_keys=type_cls.secret_keys)


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
