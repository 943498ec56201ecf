"""The text filter syntax of the console and the API.

    region = 'eu' and ts >= timestamp '2024-01-01 00:00:00' and id in (1, 2, 3)

Keywords are case-insensitive: ``and or not in is null true false like between starts with``.
Predicates: ``col op value`` (op ``= == != <> < <= > >=``, either side may be the value),
``col [not] in (v, ...)``, ``col is [not] null``, ``col [not] starts with 'p'``,
``col [not] like 'p%'`` (prefix patterns only), ``col [not] between a and b``; ``true``/``false``.
Values: ``'text'`` (``''`` escapes a quote), integers, decimals (``-1.5``, ``2e3``), ``true``,
``false``, ``date '2024-01-01'``, ``timestamp '2024-01-01 00:00:00[.ffffff][+HH:MM|Z]'``,
``time '12:00:00'``, ``double 'nan'``, ``x'0aff'`` (binary). Columns: ``name``, ``"any name"``
(``""`` escapes a quote), nested struct fields ``a.b``.

With a schema every column is resolved as it is read and every literal coerced to its column's
type, so an error points at the token at fault.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from storage.spec.errors import FilterError
from storage.spec.expressions.binding import Column, Columns, coerce_literal, coerce_prefix, parse_timestamp
from storage.spec.expressions.text import RESERVED, TYPED_LITERALS
from storage.spec.expressions.tree import (
    COMPARISON_OPS,
    FLIPPED_OP,
    AlwaysFalse,
    AlwaysTrue,
    And,
    Comparison,
    Expression,
    In,
    IsNull,
    Not,
    NotIn,
    NotNull,
    Or,
    StartsWith,
)

_TOKEN = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)
  | (?P<hex>[xX]'[^']*')
  | (?P<string>')
  | (?P<qident>")
  | (?P<ident>[^\W\d]\w*)
  | (?P<op>==|!=|<>|<=|>=|=|<|>)
  | (?P<punct>[(),.])
    """,
    re.VERBOSE,
)
_OP_ALIASES = {"==": "=", "<>": "!="}
#: Parentheses and ``not`` nested deeper than this are refused (FilterError naming the limit): the
#: parser and every walk of the tree recurse, and 300 levels exhausted Python's stack (a 500).
MAX_DEPTH = 64
_EXPECTED_OPERATOR = "=, !=, <, <=, >, >=, in, not in, is null, is not null, starts with, like or between"


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # ident qident string number hex op punct end
    text: str  # source text of the token
    value: Any  # decoded value: identifier name, string contents, operator
    position: int

    @property
    def word(self) -> str | None:
        return self.value.lower() if self.kind == "ident" else None


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    value: Any
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            raise FilterError(f"unexpected {text[pos]!r} at position {pos}", position=pos, token=text[pos])
        kind = match.lastgroup
        assert kind is not None
        if kind in ("string", "qident"):
            end, value = _quoted(text, pos, text[pos])
            tokens.append(Token(kind, text[pos:end], value, pos))
            pos = end
            continue
        raw = match.group()
        if kind == "number" and raw[0] in "+-" and tokens and tokens[-1].kind in ("number", "string"):
            # "1-2" is not a negative number after a value; report the sign, not the number.
            raise FilterError(f"unexpected {raw[0]!r} at position {pos}", position=pos, token=raw[0])
        if kind == "hex":
            try:
                value = bytes.fromhex(raw[2:-1])
            except ValueError:
                raise FilterError(
                    f"invalid binary literal {raw} at position {pos}; expected hex digits in x'...'",
                    position=pos,
                    token=raw,
                ) from None
        elif kind == "op":
            value = _OP_ALIASES.get(raw, raw)
        else:
            value = raw
        if kind != "space":
            tokens.append(Token(kind, raw, value, pos))
        pos = match.end()
    tokens.append(Token("end", "", None, len(text)))
    return tokens


def _quoted(text: str, start: int, quote: str) -> tuple[int, str]:
    """End offset and contents of a quoted string or name; a doubled quote stands for one."""
    parts = []
    pos = start + 1
    while True:
        end = text.find(quote, pos)
        if end < 0:
            what = "string" if quote == "'" else "quoted name"
            raise FilterError(
                f"unterminated {what} starting at position {start}; close it with {quote}",
                position=start,
                token=text[start:],
            )
        parts.append(text[pos:end])
        if text.startswith(quote * 2, end):
            parts.append(quote)
            pos = end + 2
            continue
        return end + 1, "".join(parts)


@dataclass(frozen=True, slots=True)
class _Operand:
    is_column: bool
    value: Any  # column name or literal value
    token: Token  # first token, for error positions
    column: Column | None = None  # resolved column when bound


class Parser:
    def __init__(self, text: str, schema: pa.Schema | None) -> None:
        self.text = text
        self.tokens = tokenize(text)
        self.index = 0
        self.columns = Columns(schema) if schema is not None else None
        self.depth = 0

    # -- token helpers ---------------------------------------------------------------------
    @property
    def current(self) -> Token:
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.current
        self.index = min(self.index + 1, len(self.tokens) - 1)
        return token

    def at_word(self, *words: str) -> bool:
        return self.current.word in words

    def expect_word(self, word: str, after: str) -> Token:
        if not self.at_word(word):
            self.fail(f"expected '{word}' after {after}")
        return self.advance()

    def expect_punct(self, punct: str, context: str) -> Token:
        if not (self.current.kind == "punct" and self.current.value == punct):
            self.fail(f"expected '{punct}' {context}")
        return self.advance()

    def fail(self, expected: str, token: Token | None = None) -> None:
        token = token or self.current
        if token.kind == "end":
            message = f"unexpected end of filter at position {token.position}; {expected}"
        else:
            message = f"unexpected {token.text!r} at position {token.position}; {expected}"
        raise FilterError(message, position=token.position, token=token.text)

    def enter(self, token: Token) -> None:
        """One level deeper (a ``(`` or a ``not``); FilterError past ``MAX_DEPTH``."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise FilterError(
                f"the filter nests parentheses and 'not' more than {MAX_DEPTH} levels deep"
                f" (at position {token.position})",
                position=token.position,
                token=token.text,
            )

    # -- grammar ---------------------------------------------------------------------------
    def parse(self) -> Expression:
        if self.current.kind == "end":
            raise FilterError("empty filter", position=0, token="")
        expr = self.parse_or()
        if self.current.kind != "end":
            self.fail("expected 'and', 'or' or the end of the filter")
        return expr

    def parse_or(self) -> Expression:
        children = [self.parse_and()]
        while self.at_word("or"):
            self.advance()
            children.append(self.parse_and())
        return children[0] if len(children) == 1 else Or(*children)

    def parse_and(self) -> Expression:
        children = [self.parse_not()]
        while self.at_word("and"):
            self.advance()
            children.append(self.parse_not())
        return children[0] if len(children) == 1 else And(*children)

    def parse_not(self) -> Expression:
        if self.at_word("not"):
            self.enter(self.advance())
            expr = Not(self.parse_not())
            self.depth -= 1
            return expr
        return self.parse_primary()

    def parse_primary(self) -> Expression:
        token = self.current
        if token.kind == "punct" and token.value == "(":
            self.enter(self.advance())
            expr = self.parse_or()
            self.expect_punct(")", f"to close the '(' at position {token.position}")
            self.depth -= 1
            return expr
        if token.word in ("true", "false") and self.peek().kind != "op":
            self.advance()
            return AlwaysTrue() if token.word == "true" else AlwaysFalse()
        return self.parse_predicate()

    def parse_predicate(self) -> Expression:
        left = self.parse_operand()
        if not left.is_column:
            return self.parse_flipped_comparison(left)
        token = self.current
        if token.kind == "op":
            self.advance()
            right = self.parse_operand()
            if right.is_column:
                self.fail(
                    "comparing two columns is not supported; compare a column with a value", right.token
                )
            return Comparison(token.value, left.value, self.literal_for(left, right))
        negated = False
        if token.word == "not":
            self.advance()
            negated = True
            if not self.at_word("in", "like", "starts", "between"):
                self.fail("expected 'in', 'like', 'starts with' or 'between' after 'not'")
        word = self.current.word
        if word == "in":
            self.advance()
            values = self.parse_list(left)
            return NotIn(left.value, values) if negated else In(left.value, values)
        if word == "is":
            self.advance()
            is_not = self.at_word("not")
            if is_not:
                self.advance()
            self.expect_word("null", "'is not'" if is_not else "'is'")
            return NotNull(left.value) if is_not else IsNull(left.value)
        if word == "starts":
            self.advance()
            self.expect_word("with", "'starts'")
            expr = self.parse_prefix(left, like=False)
        elif word == "like":
            self.advance()
            expr = self.parse_prefix(left, like=True)
        elif word == "between":
            self.advance()
            low = self.literal_for(left, self.parse_value_operand())
            self.expect_word("and", "the lower bound of 'between'")
            high = self.literal_for(left, self.parse_value_operand())
            expr = And(Comparison(">=", left.value, low), Comparison("<=", left.value, high))
        else:
            self.fail(f"expected an operator after {left.token.text!r}: {_EXPECTED_OPERATOR}")
        return Not(expr) if negated else expr

    def parse_flipped_comparison(self, left: _Operand) -> Expression:
        token = self.current
        if token.kind != "op":
            self.fail(f"expected a comparison operator after the value {left.token.text!r}")
        self.advance()
        right = self.parse_operand()
        if not right.is_column:
            self.fail("expected a column name: a filter compares a column with a value", right.token)
        return Comparison(FLIPPED_OP[token.value], right.value, self.literal_for(right, left))

    def parse_list(self, column: _Operand) -> tuple[Any, ...]:
        self.expect_punct("(", "to start the list of values after 'in'")
        values: list[Any] = []
        if self.current.kind == "punct" and self.current.value == ")":
            self.advance()
            return ()
        while True:
            values.append(self.literal_for(column, self.parse_value_operand()))
            if self.current.kind == "punct" and self.current.value == ",":
                self.advance()
                continue
            self.expect_punct(")", "or ',' in the list of values")
            return tuple(values)

    def parse_prefix(self, column: _Operand, *, like: bool) -> Expression:
        literal = self.parse_value_operand()
        if not isinstance(literal.value, str | bytes):
            self.fail(
                "expected a quoted string pattern" if like else "expected a quoted string prefix",
                literal.token,
            )
        value = literal.value
        if like:
            prefix, exact = _like_prefix(value, literal.token)
            if not exact and prefix == "":
                return NotNull(column.value)  # "x like '%'" matches every non-null value
            if exact:
                return Comparison(
                    "=", column.value, self.literal_for(column, dataclasses.replace(literal, value=prefix))
                )
            value = prefix
        if column.column is not None:
            value = coerce_prefix(
                column.column, value, position=literal.token.position, token=literal.token.text
            )
        return StartsWith(column.value, value)

    def parse_value_operand(self) -> _Operand:
        operand = self.parse_operand()
        if operand.is_column:
            self.fail(
                "expected a value (a quoted string, a number, true, false or a typed literal)", operand.token
            )
        return operand

    def parse_operand(self) -> _Operand:
        token = self.current
        if token.kind == "string":
            self.advance()
            return _Operand(False, token.value, token)
        if token.kind == "number":
            self.advance()
            return _Operand(False, _number(token), token)
        if token.kind == "hex":
            self.advance()
            return _Operand(False, token.value, token)
        word = token.word
        if word in ("true", "false"):
            self.advance()
            return _Operand(False, word == "true", token)
        if word == "null":
            self.advance()
            return _Operand(False, None, token)
        if word in TYPED_LITERALS and self.peek().kind == "string":
            self.advance()
            return _Operand(False, _typed_literal(word, self.advance()), token)
        if token.kind == "qident" or (token.kind == "ident" and word not in RESERVED):
            return self.parse_column()
        if token.kind == "ident":
            self.fail(f"'{token.text}' is a keyword; write \"{token.text}\" to use it as a column name")
        self.fail("expected a column name or a value")
        raise AssertionError  # fail() raises

    def parse_column(self) -> _Operand:
        first = self.advance()
        parts = [first.value]
        while (
            self.current.kind == "punct"
            and self.current.value == "."
            and self.peek().kind in ("ident", "qident")
        ):
            self.advance()
            parts.append(self.advance().value)
        name = ".".join(parts)
        text = self.text[
            first.position : self.tokens[self.index - 1].position + len(self.tokens[self.index - 1].text)
        ]
        token = Token(first.kind, text, name, first.position)
        if self.columns is None:
            return _Operand(True, name, token)
        column = self.columns.resolve(name, position=first.position, token=text)
        return _Operand(True, column.name, token, column)

    def literal_for(self, column: _Operand, literal: _Operand) -> Any:
        if literal.value is None:
            raise FilterError(
                f"unexpected null at position {literal.token.position}; compare with null using "
                f"'{column.token.text} is null' or 'is not null'",
                position=literal.token.position,
                token=literal.token.text,
            )
        if column.column is None:
            return literal.value
        return coerce_literal(
            column.column, literal.value, position=literal.token.position, token=literal.token.text
        )


def _number(token: Token) -> int | decimal.Decimal:
    text = token.text
    if re.fullmatch(r"[-+]?\d+", text):
        try:
            return int(text)
        except ValueError:  # over Python's int-digits limit
            raise FilterError(
                f"the number at position {token.position} has too many digits",
                position=token.position,
                token=text[:20],
            ) from None
    return decimal.Decimal(text)


def _typed_literal(kind: str, token: Token) -> Any:
    text = token.value
    try:
        if kind == "date":
            return dt.date.fromisoformat(text.strip())
        if kind == "timestamp":
            return parse_timestamp(text)
        if kind == "time":
            return dt.time.fromisoformat(text.strip())
        return float(text.strip())
    except ValueError:
        formats = {
            "date": "YYYY-MM-DD",
            "timestamp": "YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]",
            "time": "HH:MM:SS[.ffffff]",
            "double": "a number, 'nan', 'inf' or '-inf'",
        }
        raise FilterError(
            f"invalid {kind} {token.text} at position {token.position}; expected {formats[kind]}",
            position=token.position,
            token=token.text,
        ) from None


def _like_prefix(pattern: str | bytes, token: Token) -> tuple[str, bool]:
    """(literal prefix, whether the pattern has no wildcard at all) of a LIKE pattern.

    Only ``'abc'`` and ``'abc%'`` are accepted: anything else cannot prune and would need a
    pattern matcher in every engine we translate to. ``\\`` escapes ``%``, ``_`` and itself.
    """
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8", "replace")
    chars: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\" and i + 1 < len(pattern):
            chars.append(pattern[i + 1])
            i += 2
            continue
        if char == "%" and pattern[i:].strip("%") == "":
            return "".join(chars), False
        if char in "%_":
            raise FilterError(
                f"unsupported pattern {token.text} at position {token.position}; only prefix patterns "
                "such as 'abc%' are supported (use 'starts with')",
                position=token.position,
                token=token.text,
            )
        chars.append(char)
        i += 1
    return "".join(chars), True


def parse_filter(text: str, schema: pa.Schema | None = None) -> Expression:
    """Parse filter ``text``; with ``schema``, resolve columns and coerce literals as it goes.

    Raises FilterError with the offending token's position on malformed text, unknown columns
    (naming close matches) and literals of the wrong type.
    """
    if not isinstance(text, str):
        raise TypeError(f"filter text must be a string, got {type(text).__name__}")
    return Parser(text, schema).parse()


__all__ = ["COMPARISON_OPS", "MAX_DEPTH", "parse_filter", "tokenize"]
