"""The timeline of a Delta table: one instant per version, from each commit's ``commitInfo``."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from storage.formats.delta._log import DeltaLog
from storage.formats.delta._types import millis_to_datetime
from storage.spec.errors import InstantNotFound
from storage.spec.models import Instant
from storage.spec.table import Timeline

_APPEND_MODES = {"append", "errorifexists", "ignore", ""}


class DeltaTimeline(Timeline):
    """Versions from the commits in ``_delta_log``, oldest first; below a checkpoint whose older
    commits were cleaned up, the timeline starts at the checkpoint."""

    def __init__(self, log: DeltaLog, latest: int) -> None:
        self._log = log
        self._latest = latest
        self._instants: list[Instant] | None = None

    def instants(self) -> list[Instant]:
        if self._instants is None:
            self._instants = [
                self._instant(v, i) for i, v in enumerate(range(self._log.earliest, self._latest + 1))
            ]
        return self._instants

    def get(self, instant_id: Instant | int | str) -> Instant:
        if isinstance(instant_id, Instant):
            return instant_id
        try:
            version = int(instant_id)
        except (TypeError, ValueError):
            raise InstantNotFound(
                f"{instant_id!r} is not a Delta version (versions are whole numbers)"
            ) from None
        if not self._log.earliest <= version <= self._latest:
            raise InstantNotFound(f"no version {version} in this table's timeline")
        return self.instants()[version - self._log.earliest]

    def _instant(self, version: int, sequence: int) -> Instant:
        info = self._log.commit_info(version) if version in self._log.commits else None
        info = info or {}
        summary: dict[str, Any] = {}
        for key in ("operationParameters", "operationMetrics"):
            for name, value in (info.get(key) or {}).items():
                summary[name] = value if isinstance(value, str | int | float | bool) else json.dumps(value)
        if info.get("operation"):
            summary["delta.operation"] = info["operation"]
        if info.get("engineInfo"):
            summary["engineInfo"] = info["engineInfo"]
        return Instant(
            id=version,
            timestamp=commit_time(info, self._log, version),
            operation=_operation(info)
            if info
            else ("checkpoint" if version not in self._log.commits else "unknown"),
            parent_id=version - 1 if version > self._log.earliest else None,
            summary=summary,
            sequence=sequence,
        )


def _operation(info: Mapping[str, Any]) -> str:
    """Delta's operation name in the spec's vocabulary: a WRITE is an append or an overwrite."""
    operation = str(info.get("operation") or "unknown")
    mode = str((info.get("operationParameters") or {}).get("mode") or "").lower()
    if operation.upper() == "WRITE":
        return "append" if mode in _APPEND_MODES else "overwrite"
    return operation.lower().replace(" ", "_")


def commit_time(info: Mapping[str, Any] | None, log: DeltaLog, version: int) -> dt.datetime:
    info = info or {}
    millis = info.get("inCommitTimestamp") or info.get("timestamp")
    if isinstance(millis, int) and not isinstance(millis, bool):
        return millis_to_datetime(millis)
    # Without a commit timestamp Delta uses the commit file's modification time.
    file_info = log.commits.get(version)
    if file_info is None and version in log.checkpoints:
        file_info = log.store.fs.get_file_info(log.checkpoints[version].paths[0])
    mtime = getattr(file_info, "mtime", None)
    if mtime is None:
        return dt.datetime.fromtimestamp(0, dt.UTC)
    return mtime if mtime.tzinfo else mtime.replace(tzinfo=dt.UTC)
