"""The API's JSON parser: DRF's, with the limits of console/api/limits.py."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError, ValidationError

from console.api.limits import MAX_JSON_DEPTH

NUL_MESSAGE = "must not contain a NUL character (\\u0000): text cannot hold one"


class JSONParser(parsers.JSONParser):
    """Nesting deeper than ``MAX_JSON_DEPTH`` is a 400 (it was a RecursionError, a 500), and so is
    a NUL character in any string or key, naming the top-level field it is under (Postgres stores
    it in neither text nor jsonb, so it used to be a 500 at the first write)."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise _too_deep() from None
        check_json(data)
        return data


def _too_deep() -> ParseError:
    return ParseError(f"JSON parse error - arrays and objects nest at most {MAX_JSON_DEPTH} levels deep")


def _nul(field) -> Exception:
    if isinstance(field, str) and "\x00" not in field:
        return ValidationError({field: [NUL_MESSAGE]})
    return ParseError(f"the body {NUL_MESSAGE}")


def check_json(data) -> None:
    """Raise ParseError or ValidationError for parsed JSON deeper than the limit or holding a NUL."""
    stack = [(data, 0, None)]  # (value, depth, the top-level key it is under)
    while stack:
        value, depth, field = stack.pop()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = ((None, item) for item in value)
        else:
            if isinstance(value, str) and "\x00" in value:
                raise _nul(field)
            continue
        if depth >= MAX_JSON_DEPTH:
            raise _too_deep()
        for key, item in items:
            under = key if depth == 0 else field
            if key is not None and "\x00" in key:
                raise _nul(under)
            stack.append((item, depth + 1, under))
