"""Errors of the table spec API. Every message names the table, instant or token at fault."""

from __future__ import annotations


class SpecError(Exception):
    """Base class: a problem a caller can show to a person as it is."""


class TableNotFound(SpecError):
    """No table at the location or identifier (missing path, no metadata, unknown identifier)."""


class UnknownFormat(SpecError):
    """The format name is not registered, or no registered format recognises the location."""


class CorruptTable(SpecError):
    """The table's metadata or files cannot be read (truncated JSON, missing manifest, vanished file)."""


class UnsupportedFeature(SpecError):
    """The table uses a feature this reader does not implement (e.g. a Delta reader feature)."""


class RewriteConflict(SpecError):
    """The table changed under a rewrite in a way its plan cannot survive (a planned file is no
    longer live, the schema or protocol moved, another writer kept taking the next version): the
    commit is refused, nothing was changed, and the process plans again."""


class InstantNotFound(SpecError):
    """The instant id does not exist in the table's timeline."""


class InvalidRange(SpecError):
    """A range of instants is backwards or otherwise invalid."""


class NotSupported(SpecError):
    """A (format, reading mode) pair or operation this format cannot do."""

    def __init__(self, format_name: str, what: str) -> None:
        super().__init__(f"{format_name} tables do not support {what}")
        self.format_name = format_name
        self.what = what


class FilterError(SpecError):
    """A filter text that does not parse or does not type-check.

    ``position`` is the 0-based character offset of the offending token, ``token`` its text.
    """

    def __init__(self, message: str, *, position: int | None = None, token: str | None = None) -> None:
        super().__init__(message)
        self.position = position
        self.token = token
