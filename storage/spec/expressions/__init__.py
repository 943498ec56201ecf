"""Filter expressions: a tree, its text syntax, pruning by partitions and statistics, translations.

    expr = parse_filter("region = 'eu' and ts >= timestamp '2024-01-01 00:00:00'", schema)
    might_match_file(expr, data_file, spec)  # False: no row of the file can match
    table.filter(to_arrow(expr))             # the exact rows

Modules: ``tree`` (nodes), ``parser`` (text syntax), ``binding`` (schema resolution and literal
coercion), ``evaluate`` (pruning), ``transforms`` (partition transforms and projection),
``translate`` (pyarrow, pyiceberg, deltalake, Spark, text).
"""

from __future__ import annotations

import pyarrow as pa

from storage.spec.expressions.binding import Columns, coerce_literal, coerce_prefix, type_name
from storage.spec.expressions.evaluate import (
    might_match_file,
    might_match_file_stats,
    might_match_partition,
    might_match_partition_bounds,
    might_match_stats,
    partition_projection,
)
from storage.spec.expressions.parser import parse_filter
from storage.spec.expressions.residual import always_matches_partition
from storage.spec.expressions.transforms import apply_transform, bucket_hash, parse_transform
from storage.spec.expressions.translate import (
    to_arrow,
    to_delta_partition_filters,
    to_delta_predicate,
    to_pyiceberg,
    to_spark,
)
from storage.spec.expressions.tree import (
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
    Predicate,
    StartsWith,
    and_,
    or_,
    to_sql,
    transform_leaves,
)


def bind_expression(expr: Expression, schema: pa.Schema) -> Expression:
    """``expr`` with its columns resolved against ``schema`` and its literals coerced to the
    columns' types; FilterError for an unknown column or a literal of the wrong type."""
    columns = Columns(schema)

    def bind(predicate: Predicate) -> Expression:
        column = columns.resolve(predicate.column)
        if isinstance(predicate, Comparison):
            return Comparison(predicate.op, column.name, coerce_literal(column, predicate.value))
        if isinstance(predicate, In | NotIn):
            return type(predicate)(column.name, tuple(coerce_literal(column, v) for v in predicate.values))
        if isinstance(predicate, StartsWith):
            return StartsWith(column.name, coerce_prefix(column, predicate.prefix))
        if isinstance(predicate, IsNull | NotNull):
            return type(predicate)(column.name)
        raise TypeError(f"not a predicate: {predicate!r}")

    return transform_leaves(expr, bind)


def bind_filter(filters: Expression | str | None, schema: pa.Schema) -> Expression | None:
    """The ``filters`` argument of the table API, bound to ``schema``: None (or blank text) stays
    None, text is parsed, an expression is bound. Raises FilterError for bad input."""
    if filters is None:
        return None
    if isinstance(filters, str):
        return parse_filter(filters, schema) if filters.strip() else None
    if isinstance(filters, Expression):
        return bind_expression(filters, schema)
    raise TypeError(f"filters must be an Expression, filter text or None, not {type(filters).__name__}")


__all__ = [
    "AlwaysFalse",
    "AlwaysTrue",
    "And",
    "Comparison",
    "Expression",
    "In",
    "IsNull",
    "Not",
    "NotIn",
    "NotNull",
    "Or",
    "Predicate",
    "StartsWith",
    "always_matches_partition",
    "and_",
    "apply_transform",
    "bind_expression",
    "bind_filter",
    "bucket_hash",
    "might_match_file",
    "might_match_file_stats",
    "might_match_partition",
    "might_match_partition_bounds",
    "might_match_stats",
    "or_",
    "parse_filter",
    "parse_transform",
    "partition_projection",
    "to_arrow",
    "to_delta_partition_filters",
    "to_delta_predicate",
    "to_pyiceberg",
    "to_spark",
    "to_sql",
    "type_name",
]
