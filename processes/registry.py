"""Process factories: discovered once through entry points, configured from PluginConfig rows."""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema

from processes.maintenance.retention import DURATION_FORMAT, parse_duration
from processes.models import PluginConfig, PluginKind
from processes.plugin import ProcessFactory
from storage.errors import InvalidInput
from storage.plugins import Plugins, discover_plugins

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "lakewarden.process_factories"


class PluginConflict(Exception):
    """Two enabled factories claim the same (format, action)."""


@functools.cache
def _discovered() -> Plugins[ProcessFactory]:
    return discover_plugins(ENTRY_POINT_GROUP, ProcessFactory)


def factory_classes() -> Mapping[str, type[ProcessFactory]]:
    """Factory classes by name, discovered once; the mapping is read-only afterwards."""
    return _discovered().found


def broken_factories() -> Mapping[str, str]:
    """Factory entry points that failed to load (or name no ProcessFactory), with the reason."""
    return _discovered().broken


def rediscover_factories() -> None:
    """Forget the discovered classes (tests that install a plugin package call this)."""
    _discovered.cache_clear()


def validate_properties(factory_cls: type[ProcessFactory], properties: Any) -> dict[str, Any]:
    """Properties merged over the defaults, checked against the factory's schema.

    A bad value raises ``InvalidInput`` naming the property: ``target-file-size: -1 is less than
    the minimum of 1``.
    """
    if not isinstance(properties, dict):
        raise InvalidInput("properties must be a JSON object", field="properties")
    merged = {**factory_cls.default_properties, **properties}
    _validate(factory_cls.properties_schema, merged, field="properties")
    return merged


def validate_params(factory_cls: type[ProcessFactory], params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise InvalidInput("params must be a JSON object", field="params")
    _validate(factory_cls.params_schema, params, field="params")
    return params


#: The ``format``s the schemas use that are checked, not only documented: ages (``P5D``), whose
#: parser's message (naming the limit) becomes the 400's.
_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks(DURATION_FORMAT, raises=ValueError)
def _is_duration(value: object) -> bool:
    if isinstance(value, str):
        parse_duration(value)
    return True


def _validate(schema: dict, value: dict, *, field: str) -> None:
    validator = jsonschema.Draft202012Validator(schema, format_checker=_FORMATS)
    errors = sorted(validator.iter_errors(value), key=lambda e: (list(e.path), e.cause is None))
    if errors:
        error = _reason_of(errors[0])
        where = ".".join(str(p) for p in error.absolute_path)
        reason = str(error.cause) if error.cause is not None else error.message
        raise InvalidInput(f"{where}: {reason}" if where else reason, field=field)


def _reason_of(error: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """A nullable property (``oneOf`` null or a value) refused for its value: the value's own
    error ("-1 is less than the minimum of 0"), not "not valid under any of the given schemas"."""
    if error.validator in ("oneOf", "anyOf") and error.context:
        # the "not of type 'null'" branch says nothing the operator can act on
        specific = [e for e in error.context if not (e.validator == "type" and e.validator_value == "null")]
        if len(specific) == 1:
            return specific[0]
    return error


@dataclass
class ConfiguredFactory:
    name: str
    factory: ProcessFactory
    enabled: bool
    priority: int


def ensure_plugin_rows() -> None:
    """A configuration row for every discovered factory (enabled, default properties)."""
    existing = set(
        PluginConfig.objects.filter(kind=PluginKind.PROCESS_FACTORY).values_list("name", flat=True)
    )
    missing = [
        PluginConfig(
            kind=PluginKind.PROCESS_FACTORY,
            name=name,
            enabled=cls.enabled_by_default,
            properties=dict(cls.default_properties),
        )
        for name, cls in factory_classes().items()
        if name not in existing
    ]
    if missing:
        PluginConfig.objects.bulk_create(missing, ignore_conflicts=True)


def configured_factories(*, include_disabled: bool = False) -> list[ConfiguredFactory]:
    """Instances of the discovered factories, configured from their rows, highest priority first."""
    ensure_plugin_rows()
    configs = {c.name: c for c in PluginConfig.objects.filter(kind=PluginKind.PROCESS_FACTORY)}
    configured = []
    for name, cls in factory_classes().items():
        config = configs.get(name)
        if config is None or (not config.enabled and not include_disabled):
            continue
        factory = cls()
        try:
            factory.configure(validate_properties(cls, config.properties))
        except InvalidInput as error:
            logger.error(
                "process factory %s has invalid properties (%s); using its defaults", name, error.message
            )
            factory.configure(dict(cls.default_properties))
        configured.append(ConfiguredFactory(name, factory, config.enabled, config.priority))
    configured.sort(key=lambda c: (-c.priority, c.name))
    return configured


def coordinators(
    factories: list[ConfiguredFactory] | None = None,
) -> dict[tuple[str, str], ConfiguredFactory]:
    """The enabled factory serving each (format, action); two claiming one pair is an error."""
    claims: dict[tuple[str, str], ConfiguredFactory] = {}
    for configured in factories if factories is not None else configured_factories():
        if not configured.enabled:
            continue
        for pair in sorted(configured.factory.pairs()):
            if pair in claims:
                raise PluginConflict(
                    f"process factories {claims[pair].name!r} and {configured.name!r} both claim "
                    f"{pair[1]!r} on {pair[0]} tables: disable one of them"
                )
            claims[pair] = configured
    return claims


def conflicts_if_enabled(name: str) -> str | None:
    """The conflict message enabling factory ``name`` would cause, or None (used by the admin)."""
    factories = configured_factories(include_disabled=True)
    candidates = [c for c in factories if c.enabled or c.name == name]
    for c in candidates:
        c.enabled = True
    try:
        coordinators(candidates)
    except PluginConflict as conflict:
        return str(conflict)
    return None
