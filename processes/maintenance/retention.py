"""Durations and listings shared by the expiry and cleanup processes.

Ages (``max-age``, ``min-age``) are given either as a whole number of seconds (``432000``) or as an
ISO 8601 duration of weeks, days, hours, minutes and seconds (``P5D``, ``PT36H``, ``P1DT12H``);
years and months are refused (their length varies).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from processes.maintenance.schemas import MAX_AGE_SECONDS, SECONDS, UNIT
from processes.plugin import Preview, ProcessContext, ProcessInputError
from storage.io.guard import OutsideTable
from storage.trash import TrashUnavailable, batch_location, prepare_batch, purge_batch

if TYPE_CHECKING:
    from storage.io import StoreOptions

_ISO_DURATION = re.compile(
    r"^P(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)

#: The JSON Schema ``format`` of an age string, checked by ``processes.registry`` with
#: ``parse_duration`` (its message, naming the limit, is the 400's).
DURATION_FORMAT = "duration"

#: JSON Schema of an age property: seconds, or an ISO 8601 duration string; 100 years at most.
AGE_SCHEMA: dict[str, Any] = {
    "type": ["integer", "string"],
    "minimum": 0,
    "maximum": MAX_AGE_SECONDS,
    "pattern": _ISO_DURATION.pattern,
    "format": DURATION_FORMAT,
    UNIT: SECONDS,
}


def described(schema: dict[str, Any], description: str) -> dict[str, Any]:
    """``schema`` with a description (for the admin, the plugins API and README)."""
    return {**schema, "description": description}


#: At most this many paths are listed in a summary (counts are always complete).
SUMMARY_LIST_LIMIT = 1000


def parse_duration(value: Any) -> dt.timedelta:
    """Seconds (int, float or digit string) or an ISO 8601 duration (``P5D``, ``PT12H``), of at
    most ``MAX_AGE_SECONDS`` (100 years): a ValueError naming the limit beyond."""
    if isinstance(value, dt.timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"a duration cannot be negative: {value}")
        return _bounded(value, value)
    text = str(value).strip().upper()
    if text.isdigit():
        return _bounded(int(text), value)
    match = _ISO_DURATION.match(text)
    if not match or text in ("P", "PT"):
        raise ValueError(f"{value!r} is not a duration: use seconds or ISO 8601 such as P5D or PT12H")
    seconds = sum(float(v) * _UNIT_SECONDS[k] for k, v in match.groupdict().items() if v)
    return _bounded(seconds, value)


_UNIT_SECONDS = {"weeks": 604_800, "days": 86_400, "hours": 3600, "minutes": 60, "seconds": 1}


def _bounded(seconds: float, value: Any) -> dt.timedelta:
    if not seconds <= MAX_AGE_SECONDS:  # NaN too
        raise ValueError(
            f"{value} is longer than the limit of {MAX_AGE_SECONDS // 86_400:,} days ({MAX_AGE_SECONDS:,} s)"
        )
    return dt.timedelta(seconds=seconds)


def summary_list(paths: list[str]) -> list[str]:
    return sorted(paths)[:SUMMARY_LIST_LIMIT]


# --- trash instead of delete -----------------------------------------------------------------------

#: Property of the expiry, orphan-cleanup and vacuum factories (overridable per table): how long
#: removed files are kept in the table's trash; 0 (the default) deletes them at once.
TRASH_RETENTION = "trash-retention"


def trash_retention(config: dict[str, Any]) -> dt.timedelta | None:
    """The configured trash retention, or None when trash is off (unset or zero)."""
    value = config.get(TRASH_RETENTION)
    if value in (None, "", 0):
        return None
    retention = parse_duration(value)
    return retention if retention.total_seconds() > 0 else None


def keep_in_trash(
    context: ProcessContext,
    *,
    action: str,
    retention: dt.timedelta,
    root: str,
    files: list[tuple[str, int, str]],
    storage: StoreOptions | None,
) -> dict[str, Any]:
    """Move ``files`` ((location, size, kind), spelt as ``root`` is) into this process's trash
    batch instead of deleting them; the facts for the process summary."""
    from storage.models import Table
    from storage.trash.services import trash_files

    if not files:  # nothing removed: no batch, no folder
        return {
            "location": None,
            "expires_at": None,
            "files": 0,
            "bytes": 0,
            "kinds": {},
            "missing": 0,
            "failed": 0,
        }
    table = getattr(context.runtime, "table", None)
    if not isinstance(table, Table):
        raise ValueError(f"{TRASH_RETENTION} needs a table registered in Lakewarden")
    try:
        outcome = trash_files(
            table=table,
            process_id=context.process_id,
            action=action,
            retention=retention,
            root=root,
            files=files,
            storage=storage,
        )
    except TrashUnavailable as error:
        raise ProcessInputError(str(error)) from None
    return outcome.summary()


@contextlib.contextmanager
def trash_checked(
    context: ProcessContext,
    *,
    action: str,
    root: str,
    files: list[tuple[str, int, str]],
    storage: StoreOptions | None,
) -> Iterator[None]:
    """Around the step that commits a removal: first write the trash manifest (naming ``files``,
    what may be removed), so a store that refuses the trash folder fails the process before
    anything changed; if the step fails, the manifest goes again."""
    try:
        context.guard.check(batch_location(root, context.process_id), "keep the trash in")
        files = [file for file in files if context.guard.allows(file[0])]
        batch, _ = prepare_batch(root, context.process_id, files, storage, action=action)
    except (TrashUnavailable, OutsideTable) as error:
        raise ProcessInputError(str(error)) from None
    try:
        yield
    except BaseException:
        with contextlib.suppress(OSError):
            purge_batch(batch, storage)
        raise


def removal_preview(
    count: int, size: int, details: dict[str, Any], *, trash: dt.timedelta | None, idle: str | None
) -> Preview:
    """The ``Preview`` of a process that removes files: ``count`` objects of ``size`` bytes to
    delete (or keep in the trash), ``details`` as they are; ``idle`` says why there is nothing to do."""
    preview = Preview(
        objects_to_delete=count,
        bytes_to_delete=size,
        details={**details, "trash_retention_seconds": int(trash.total_seconds()) if trash else 0},
    )
    if idle:
        preview.notes.append(f"nothing to do: {idle}")
    elif trash and count:
        preview.notes.append(f"the files would be kept in the trash for {trash}, restorable until then")
    return preview


#: The ``trash-retention`` property of every factory that removes files.
TRASH_RETENTION_SCHEMA = described(
    AGE_SCHEMA,
    "Move removed files to <table>/.lakewarden-trash/<process>/ for this long (seconds or ISO 8601); 0 deletes them",
)
