"""Errors that services raise and every surface maps the same way (400, 403, 404, 409)."""

from __future__ import annotations


class ServiceError(Exception):
    """Base: ``message`` is shown to the user as it is."""

    status_code = 400

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class InvalidInput(ServiceError):
    status_code = 400


class NotFound(ServiceError):
    status_code = 404


class Forbidden(ServiceError):
    """The user may not do this to this object (a query naming a table their teams cannot read)."""

    status_code = 403


class Conflict(ServiceError):
    """The request is valid but the object's state forbids it (e.g. cancelling a finished process)."""

    status_code = 409
