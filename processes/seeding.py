"""Plugin configuration from YAML (``conf/plugins/process-factories.yaml``)."""

from __future__ import annotations

from pathlib import Path

import yaml
from django.db import transaction

from processes.models import PluginConfig, PluginKind
from processes.registry import configured_factories, coordinators, factory_classes, validate_properties
from storage.errors import InvalidInput


def plugin_configs_seed(*, path: Path, overwrite: bool = False) -> dict[str, str]:
    """Create (or with ``overwrite`` update) PluginConfig rows from the YAML file; validates every
    entry first and writes nothing when one is bad."""
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as error:
        raise InvalidInput(f"{path} is not valid YAML: {error}") from error
    entries = document.get("process-factories") or {}
    if not isinstance(entries, dict):
        raise InvalidInput(f"{path}: process-factories must be a mapping of factory name to settings")
    planned = {}
    for name, entry in entries.items():
        entry = entry or {}
        cls = factory_classes().get(name)
        if cls is None:
            raise InvalidInput(f"{path}: no installed process factory is called {name!r}")
        unknown = set(entry) - {"enabled", "priority", "properties"}
        if unknown:
            raise InvalidInput(f"{path}: {name}: unknown keys {', '.join(sorted(unknown))}")
        try:
            properties = validate_properties(cls, entry.get("properties") or {})
        except InvalidInput as error:
            raise InvalidInput(f"{path}: {name}: {error.message}") from None
        planned[name] = {
            "enabled": bool(entry.get("enabled", cls.enabled_by_default)),
            "priority": int(entry.get("priority", 100)),
            "properties": properties,
        }
    outcome = {}
    with transaction.atomic():
        for name, values in planned.items():
            config, created = PluginConfig.objects.get_or_create(
                kind=PluginKind.PROCESS_FACTORY, name=name, defaults=values
            )
            if created:
                outcome[name] = "created"
            elif overwrite:
                for key, value in values.items():
                    setattr(config, key, value)
                config.save()
                outcome[name] = "updated"
            else:
                outcome[name] = "kept"
        coordinators(configured_factories())  # a conflicting seed rolls back whole
    return outcome
