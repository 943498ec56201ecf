"""The result storage form (issue 34): the configuration fields generated from each storage
type's ``config_schema`` (``console.schema_form``), the quota entered in MiB, GiB or TiB, the raw
JSON behind "Advanced". Which type's fields show is CSS (``:has`` on the type select), no script.

``storage_form`` builds what the page shows (a new storage's, or a registered one's with its values,
secrets never sent back); ``submitted_values`` reads a POST back into what the service takes, and
``place_errors`` puts a service's refusal beside the field it names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from console import schema_form
from console.schema_form import FormError, ParamField, Variant
from processes.maintenance.schemas import BYTES, UNIT
from storage.models import StorageBackend
from storage.results import registry

#: Units the quota is entered in; it is stored in bytes.
QUOTA_UNITS = ("MiB", "GiB", "TiB")
QUOTA_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "quota": {
            "type": "integer",
            "minimum": 1,
            UNIT: BYTES,
            "description": "Least recently used results are cleaned above it. Empty: no quota.",
        }
    },
}
#: The prefix of the form's own fields (the quota); a type's fields are prefixed by the type.
OWN = "storage"


@dataclass
class StorageForm:
    backend: StorageBackend | None
    name: str = ""
    type: str = ""
    is_default: bool = False
    quota: ParamField | None = None
    types: list[Variant] = field(default_factory=list)
    advanced: bool = False
    config_text: str = "{}"
    errors: dict[str, str] = field(default_factory=dict)  # name, type, config
    error: str = ""  # not about one field

    @property
    def select_id(self) -> str:
        """The type's select (none once registered: the type is fixed)."""
        return "" if self.backend is not None else "storage-type"

    @property
    def quota_fields(self) -> list[ParamField]:
        return [self.quota] if self.quota is not None else []

    @property
    def selected(self) -> Variant | None:
        return next((t for t in self.types if t.name == self.type), None)


def _type_fields(type_name: str, cls: Any, config: Mapping[str, Any] | None) -> Variant:
    return schema_form.variant(
        type_name,
        cls.config_schema,
        description=cls.description,
        secrets=cls.secret_keys,
        stored=config,
        id_prefix="storage",
    )


def _quota_field(quota_bytes: int | None) -> ParamField:
    values = {"quota": quota_bytes} if quota_bytes else None
    (quota,) = schema_form.build_fields(
        OWN, QUOTA_SCHEMA, {}, values=values, id_prefix="storage", size_units=QUOTA_UNITS
    )
    return quota


def storage_form(*, backend: StorageBackend | None = None) -> StorageForm:
    """The form of a new storage, or of ``backend`` with its values (its type fixed)."""
    types = registry.storage_types()
    if backend is not None:
        shown = [(backend.type, types[backend.type])] if backend.type in types else []
        masked = registry.mask_config(types[backend.type], backend.config) if shown else backend.config
        return StorageForm(
            backend=backend,
            name=backend.name,
            type=backend.type,
            is_default=backend.is_default,
            quota=_quota_field(backend.quota_bytes),
            types=[_type_fields(name, cls, backend.config) for name, cls in shown],
            config_text=json.dumps(masked, indent=2, sort_keys=True),
        )
    names = sorted(types)
    return StorageForm(
        backend=None,
        type="filesystem" if "filesystem" in names else (names[0] if names else ""),
        quota=_quota_field(None),
        types=[_type_fields(name, types[name], None) for name in names],
    )


@dataclass(frozen=True)
class Submitted:
    """What the form means: the service's arguments."""

    name: str
    type: str
    config: dict[str, Any]
    quota_bytes: int | None
    is_default: bool


def submitted_values(form: StorageForm, post: Mapping[str, str]) -> Submitted:
    """The POST read back (and kept in ``form``, so a refused form comes back as it was sent).
    ``FormError`` names the field whose text is no value (``config`` for the JSON)."""
    form.name = form.name if form.backend else (post.get("name") or "").strip()
    form.type = form.type if form.backend else (post.get("type") or "").strip()
    form.is_default = "is_default" in post
    form.advanced = bool(post.get("advanced"))
    form.config_text = post.get("config", "")[:100_000] or "{}"
    for variant in form.types:
        schema_form.fill(variant.fields, post if variant.name == form.type else {}, {})
    assert form.quota is not None
    schema_form.fill([form.quota], post, {})
    quota = schema_form.values_from_form(OWN, QUOTA_SCHEMA, post, {}, size_units=QUOTA_UNITS).get("quota")
    if quota is not None and quota < 1:
        raise FormError("quota", "must be positive (or empty for no quota)")
    return Submitted(
        name=form.name,
        type=form.type,
        config=schema_form.submitted_dict(
            form.selected,
            post,
            form.backend.config if form.backend is not None else {},
            advanced=form.advanced,
            json_text=form.config_text,
            key="config",
        ),
        quota_bytes=quota,
        is_default=form.is_default,
    )


def place_errors(form: StorageForm, key: str, message: str) -> None:
    """A refusal put beside its field: a configuration key's (``root: ...``, as the registry and
    the services word them, after ``<type> configuration: ``), the quota's, the name's or the
    type's; what names no field goes above the form."""
    selected = form.selected
    if key in ("quota", "quota_bytes") and form.quota is not None:
        form.quota.error = message.removeprefix("quota: ").removeprefix("quota_bytes ")
        return
    if key in ("name", "type") or (key == "config" and form.advanced):
        form.errors[key] = message
        return
    fields = list(selected.fields) if selected is not None else []
    form.error = schema_form.place_errors(fields, message.removeprefix(f"{form.type} configuration: "))
