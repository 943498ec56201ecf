"""The expression tree: predicates over columns and typed literals, combined with and/or/not.

Nodes are frozen dataclasses, so two expressions that say the same thing in the same shape compare
equal (``parse_filter(to_sql(e)) == e``). Columns are names as the table schema spells them; a
nested struct field is its dotted path (``"address.city"``). Literal values are plain Python values
of the column's type once bound to a schema (see ``bind_filter``).

Null semantics are SQL's: a comparison with a null column value is neither true nor false, and
``Not`` of that is still not true, so rows whose column is null match only ``IsNull``. Floating
point NaN follows IEEE-754 as Arrow does: every ordering comparison with NaN is false, ``!=`` true.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from storage.spec.expressions.text import sql_column, sql_literal

COMPARISON_OPS = ("=", "!=", "<", "<=", ">", ">=")
# The comparison that is true exactly when the original is false (for non-null, non-NaN values).
NEGATED_OP = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
# ``v op column`` rewritten as ``column op' v``.
FLIPPED_OP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


class Expression:
    """Base of every node. ``a & b``, ``a | b`` and ``~a`` build And, Or and Not."""

    __slots__ = ()

    def columns(self) -> frozenset[str]:
        return frozenset()

    def __and__(self, other: Expression) -> Expression:
        return And(self, other)

    def __or__(self, other: Expression) -> Expression:
        return Or(self, other)

    def __invert__(self) -> Expression:
        return Not(self)

    def __str__(self) -> str:
        return to_sql(self)


@dataclass(frozen=True, slots=True)
class AlwaysTrue(Expression):
    pass


@dataclass(frozen=True, slots=True)
class AlwaysFalse(Expression):
    pass


@dataclass(frozen=True, slots=True, init=False)
class And(Expression):
    """Conjunction of any number of children: ``And(a, b, c)``."""

    children: tuple[Expression, ...]

    def __init__(self, *children: Expression) -> None:
        object.__setattr__(self, "children", _as_children(children))

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(c.columns() for c in self.children))


@dataclass(frozen=True, slots=True, init=False)
class Or(Expression):
    """Disjunction of any number of children: ``Or(a, b, c)``."""

    children: tuple[Expression, ...]

    def __init__(self, *children: Expression) -> None:
        object.__setattr__(self, "children", _as_children(children))

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(c.columns() for c in self.children))


@dataclass(frozen=True, slots=True)
class Not(Expression):
    child: Expression

    def columns(self) -> frozenset[str]:
        return self.child.columns()


class Predicate(Expression):
    """A leaf: a test on one column."""

    __slots__ = ()
    column: str

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True, slots=True)
class Comparison(Predicate):
    """``column op value`` with op one of ``= != < <= > >=``."""

    op: str
    column: str
    value: Any

    def __post_init__(self) -> None:
        if self.op not in COMPARISON_OPS:
            raise ValueError(
                f"unknown comparison operator {self.op!r}; use one of {', '.join(COMPARISON_OPS)}"
            )


@dataclass(frozen=True, slots=True)
class In(Predicate):
    column: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))


@dataclass(frozen=True, slots=True)
class NotIn(Predicate):
    column: str
    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))


@dataclass(frozen=True, slots=True)
class IsNull(Predicate):
    column: str


@dataclass(frozen=True, slots=True)
class NotNull(Predicate):
    column: str


@dataclass(frozen=True, slots=True)
class StartsWith(Predicate):
    column: str
    prefix: str | bytes


def _as_children(children: Iterable[Expression]) -> tuple[Expression, ...]:
    result = tuple(children)
    for child in result:
        if not isinstance(child, Expression):
            raise TypeError(f"expected an Expression, got {child!r}")
    return result


def and_(*children: Expression) -> Expression:
    """And with constant folding and flattening: for building, not for round-tripping text."""
    flat: list[Expression] = []
    for child in children:
        if isinstance(child, AlwaysFalse):
            return child
        if isinstance(child, AlwaysTrue):
            continue
        flat.extend(child.children if isinstance(child, And) else (child,))
    if not flat:
        return AlwaysTrue()
    return flat[0] if len(flat) == 1 else And(*flat)


def or_(*children: Expression) -> Expression:
    """Or with constant folding and flattening."""
    flat: list[Expression] = []
    for child in children:
        if isinstance(child, AlwaysTrue):
            return child
        if isinstance(child, AlwaysFalse):
            continue
        flat.extend(child.children if isinstance(child, Or) else (child,))
    if not flat:
        return AlwaysFalse()
    return flat[0] if len(flat) == 1 else Or(*flat)


T = TypeVar("T")


class NegationFold:
    """Folds a tree bottom-up while pushing ``Not`` down to the leaves (De Morgan).

    Subclasses implement ``leaf(predicate, negated)``: ``negated`` asks for the rows where the
    predicate is *false* (not null). Pushing negation this way, instead of negating an answer, is
    what keeps stats pruning correct: "no row can satisfy p" says nothing about "no row can satisfy
    not p", and a null row satisfies neither.
    """

    true: Any = True
    false: Any = False

    def fold(self, expr: Expression, negated: bool = False) -> Any:
        if isinstance(expr, Not):
            return self.fold(expr.child, not negated)
        if isinstance(expr, And | Or):
            parts = [self.fold(c, negated) for c in expr.children]
            conjunction = isinstance(expr, And) != negated
            return self.all_of(parts) if conjunction else self.any_of(parts)
        if isinstance(expr, AlwaysTrue):
            return self.false if negated else self.true
        if isinstance(expr, AlwaysFalse):
            return self.true if negated else self.false
        if isinstance(expr, Predicate):
            return self.leaf(expr, negated)
        raise TypeError(f"not an expression: {expr!r}")

    def leaf(self, predicate: Predicate, negated: bool) -> Any:
        raise NotImplementedError

    def all_of(self, parts: list[Any]) -> Any:
        return all(parts)

    def any_of(self, parts: list[Any]) -> Any:
        return any(parts)


def transform_leaves(expr: Expression, fn: Callable[[Predicate], Expression]) -> Expression:
    """Rebuild ``expr`` with each leaf replaced by ``fn(leaf)``, keeping the tree's shape."""
    if isinstance(expr, And):
        return And(*(transform_leaves(c, fn) for c in expr.children))
    if isinstance(expr, Or):
        return Or(*(transform_leaves(c, fn) for c in expr.children))
    if isinstance(expr, Not):
        return Not(transform_leaves(expr.child, fn))
    if isinstance(expr, Predicate):
        return fn(expr)
    return expr


# -- filter text ----------------------------------------------------------------------------------
def to_sql(expr: Expression) -> str:
    """Filter text for ``expr``; ``parse_filter(to_sql(e), schema) == e`` for a bound ``e``."""
    if isinstance(expr, AlwaysTrue):
        return "true"
    if isinstance(expr, AlwaysFalse):
        return "false"
    if isinstance(expr, And | Or):
        if not expr.children:
            return "true" if isinstance(expr, And) else "false"
        joiner = " and " if isinstance(expr, And) else " or "
        # Parenthesise And/Or children so the text reads back to the same shape.
        return joiner.join(f"({to_sql(c)})" if isinstance(c, And | Or) else to_sql(c) for c in expr.children)
    if isinstance(expr, Not):
        inner = to_sql(expr.child)
        return f"not ({inner})" if isinstance(expr.child, And | Or) else f"not {inner}"
    column = sql_column(expr.column) if isinstance(expr, Predicate) else ""
    if isinstance(expr, Comparison):
        return f"{column} {expr.op} {sql_literal(expr.value)}"
    if isinstance(expr, In | NotIn):
        keyword = "in" if isinstance(expr, In) else "not in"
        return f"{column} {keyword} ({', '.join(sql_literal(v) for v in expr.values)})"
    if isinstance(expr, IsNull):
        return f"{column} is null"
    if isinstance(expr, NotNull):
        return f"{column} is not null"
    if isinstance(expr, StartsWith):
        return f"{column} starts with {sql_literal(expr.prefix)}"
    raise TypeError(f"not an expression: {expr!r}")
