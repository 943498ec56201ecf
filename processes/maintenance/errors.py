"""The maintenance kit's error for bad input. (A commit that lost to another writer raises the
spec's ``storage.spec.errors.RewriteConflict``.)"""

from __future__ import annotations

from processes.plugin import ProcessInputError


class InputError(ProcessInputError, ValueError):
    """Parameters or properties this table cannot take: a 400 at submission, a FAILED run without
    retry (``ProcessInputError``); a ``ValueError`` still for callers that catch those."""
