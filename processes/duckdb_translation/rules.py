"""The typed rules of DuckDB's translation: for each allowed construct whose answer depends on
types, the check that it answers as Spark does and, where DuckDB's own function differs, the
DuckDB expression that gives Spark's answer (an int where DuckDB says bigint, an error where it
says NULL...). ``TYPED_RULES`` maps sqlglot's class to its rule; a rule returns the replacement
node, or None to keep the node. Plain Python (sqlglot)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from sqlglot import exp

from processes.duckdb_translation.dates import DATE_RULES
from processes.duckdb_translation.typed import (
    ARRAYS,
    BOOLEANS,
    DATES,
    DECIMALS,
    FLOATS,
    INTEGERS,
    LOCAL_TIMESTAMPS,
    NULLS,
    NUMBERS,
    STRINGS,
    TIMES,
    TIMESTAMPS,
    N,
    NotOnAllowList,
    Rule,
    Typed,
    construct_name,
    duckdb_call,
    duckdb_error,
    rule_for,
)


def _nonzero(dividend: exp.Expr, divisor: exp.Expr, value: exp.Expr, message: str) -> exp.Expr:
    """``value``, or Spark's error when ``divisor`` is zero and ``dividend`` is not NULL (Spark
    answers NULL / 0 with NULL)."""
    zero = exp.and_(
        exp.EQ(this=divisor.copy(), expression=exp.Literal.number(0)),
        exp.not_(exp.Is(this=dividend.copy(), expression=exp.null())),
    )
    return exp.Case(ifs=[exp.If(this=zero, true=duckdb_error(message))], default=value)


def _div(node: exp.Div, typed: Typed) -> exp.Expr:
    left, right = node.this, node.expression
    for side in (left, right):
        typed.require(side, INTEGERS | FLOATS, "division (decimals divide to Spark's own precision)")
    quotient = exp.Div(this=left, expression=right)
    return _nonzero(left, right, quotient, "[DIVIDE_BY_ZERO] Division by zero")


def _mod(node: exp.Mod, typed: Typed) -> exp.Expr:
    left, right = node.this, node.expression
    for side in (left, right):
        typed.require(side, INTEGERS, "% (Spark's remainder of decimals and doubles)")
    remainder = exp.Mod(this=left, expression=right)
    return _nonzero(left, right, remainder, "[REMAINDER_BY_ZERO] Remainder by zero")


def _int_div(node: exp.IntDiv, typed: Typed) -> exp.Expr:
    left, right = node.this, node.expression
    for side in (left, right):
        typed.require(side, INTEGERS, "div")
    quotient = exp.cast(exp.IntDiv(this=left, expression=right), "BIGINT")
    return _nonzero(left, right, quotient, "[DIVIDE_BY_ZERO] Division by zero")


def _add_subtract(node: exp.Expr, typed: Typed) -> None:
    """Spark adds decimals to decimal(max(p1 - s1, p2 - s2) + max(s1, s2) + 1, max(s1, s2)) and
    rounds the scale away beyond 38 digits; within them both engines answer the same sum."""
    left, right = node.this, node.expression
    for side in (left, right):
        typed.require(side, NUMBERS, construct_name(node))
    left_shape, right_shape = typed.decimal(left), typed.decimal(right)
    if DECIMALS.isdisjoint({typed.of(left), typed.of(right)}) or left_shape is None or right_shape is None:
        return None
    (p1, s1), (p2, s2) = left_shape, right_shape
    if max(p1 - s1, p2 - s2) + max(s1, s2) + 1 > 38:
        raise NotOnAllowList(
            f"{node.sql(dialect='spark')} needs more than 38 digits: Spark rounds it its own way"
        )
    return None


def _multiply(node: exp.Mul, typed: Typed) -> exp.Expr | None:
    """Spark multiplies decimals to decimal(p1 + p2 + 1, s1 + s2); DuckDB to at most 18 digits
    unless told wider (it failed 99999999.99 * 99999999.99). Within 38 digits both answer the
    same exact value; beyond, Spark rounds the scale away and the product runs on Spark."""
    left, right = node.this, node.expression
    for side in (left, right):
        typed.require(side, NUMBERS, "*")
    if DECIMALS.isdisjoint({typed.of(left), typed.of(right)}):
        return None
    left_shape, right_shape = typed.decimal(left), typed.decimal(right)
    if left_shape is None or right_shape is None:
        return None  # a double times a decimal is a double on both
    (p1, s1), (p2, s2) = left_shape, right_shape
    if p1 + p2 + 1 > 38:
        raise NotOnAllowList(
            f"{node.sql(dialect='spark')} needs more than 38 digits: Spark rounds it its own way"
        )
    product = exp.Mul(
        this=exp.cast(left, f"DECIMAL(38, {s1})"), expression=exp.cast(right, f"DECIMAL(38, {s2})")
    )
    return exp.cast(product, f"DECIMAL({p1 + p2 + 1}, {s1 + s2})")


#: (source family, target type) pairs a Spark CAST answers alike on DuckDB (rendered by
#: ``_cast``); anything else runs on Spark.
CASTS: dict[frozenset[exp.DType | None], frozenset[exp.DType]] = {
    INTEGERS: INTEGERS | FLOATS | DECIMALS | STRINGS | BOOLEANS,
    FLOATS: INTEGERS | FLOATS | DECIMALS,
    DECIMALS: INTEGERS | FLOATS | DECIMALS | STRINGS,
    STRINGS: STRINGS | FLOATS | DECIMALS | DATES,
    DATES: DATES | STRINGS | TIMESTAMPS | LOCAL_TIMESTAMPS,
    TIMESTAMPS: TIMESTAMPS | DATES | LOCAL_TIMESTAMPS,
    LOCAL_TIMESTAMPS: LOCAL_TIMESTAMPS | DATES | TIMESTAMPS | STRINGS,
    BOOLEANS: BOOLEANS | INTEGERS | STRINGS,
    NULLS: INTEGERS | FLOATS | DECIMALS | STRINGS | TIMES | BOOLEANS,
}


def _cast(node: exp.Cast, typed: Typed) -> exp.Expr:
    """Spark's CAST (ANSI: a value that does not convert fails) or ``try_cast`` (NULL instead)."""
    source = typed.kind(node.this)
    target = node.to.this
    if target not in CASTS.get(source, frozenset()):
        raise NotOnAllowList(
            f"CAST from {typed.of(node.this)} to {target} is not on DuckDB's list: Spark converts it its own way"
        )
    value = node.this
    if source in (FLOATS, DECIMALS) and target in INTEGERS:
        value = duckdb_call("trunc", value)  # Spark truncates toward zero; DuckDB rounds
    to = node.to.copy()
    if target in TIMESTAMPS:
        to = exp.DataType.build("TIMESTAMPTZ")
    safe = isinstance(node, exp.TryCast) and bool(node.args.get("safe"))
    return (exp.TryCast if safe else exp.Cast)(this=value, to=to)


def _same_families(nodes: list[exp.Expr], typed: Typed, what: str) -> None:
    families = {typed.family(n) for n in nodes} - {NULLS}
    if len(families) > 1:
        shown = ", ".join(sorted(str(typed.of(n)) for n in nodes))
        raise NotOnAllowList(f"{what} mixes types ({shown}): Spark and DuckDB coerce them differently")


def _comparison(node: exp.Expr, typed: Typed) -> None:
    left, right = node.this, node.expression
    if _string_literal(left) or _string_literal(right):
        other = right if _string_literal(left) else left
        if typed.family(other) in (DATES, TIMESTAMPS, LOCAL_TIMESTAMPS, STRINGS, NULLS):
            return None  # a date or timestamp literal written as a string: both engines parse it
    _same_families([left, right], typed, f"the comparison {node.sql(dialect='spark')}")
    return None


def _string_literal(node: exp.Expr | None) -> TypeGuard[exp.Literal]:
    return isinstance(node, exp.Literal) and node.is_string


def _in(node: exp.In, typed: Typed) -> None:
    if node.args.get("query") is not None:
        return None
    _same_families([node.this, *node.expressions], typed, "IN")
    return None


def _between(node: exp.Between, typed: Typed) -> None:
    bounds = [b for b in (node.args["low"], node.args["high"]) if not _string_literal(b)]
    if len(bounds) < 2 and typed.family(node.this) not in (
        DATES,
        TIMESTAMPS,
        LOCAL_TIMESTAMPS,
        STRINGS,
        NULLS,
    ):
        bounds = [node.args["low"], node.args["high"]]  # a string bound is a date only beside a date
    _same_families([node.this, *bounds], typed, "BETWEEN")
    return None


def _case(node: exp.Case, typed: Typed) -> None:
    results = [branch.args["true"] for branch in node.args.get("ifs") or []]
    if node.args.get("default") is not None:
        results.append(node.args["default"])
    _same_families(results, typed, "CASE")
    return None


def _if(node: exp.If, typed: Typed) -> None:
    if isinstance(node.parent, exp.Case):
        return None  # a CASE branch: the CASE checks its results
    _same_families([node.args["true"], node.args.get("false") or exp.Null()], typed, "IF")
    return None


def _coalesce(node: exp.Expr, typed: Typed) -> None:
    _same_families([node.this, *node.expressions], typed, construct_name(node))
    return None


def _set_operation(node: exp.SetOperation, typed: Typed) -> None:
    left, right = node.left, node.right
    if isinstance(left, exp.Select) and isinstance(right, exp.Select):
        if len(left.selects) == len(right.selects):
            for a, b in zip(left.selects, right.selects, strict=True):
                _same_families([a.unalias(), b.unalias()], typed, node.key.upper())
    return None


def _numbers(*indexes: str, allowed: frozenset[exp.DType] = NUMBERS) -> Callable[[exp.Expr, Typed], None]:
    def rule(node: exp.Expr, typed: Typed) -> None:
        for key in indexes or ("this",):
            argument = node.args.get(key)
            if isinstance(argument, list):
                for item in argument:
                    typed.require(item, allowed, construct_name(node))
            elif argument is not None:
                typed.require(argument, allowed, construct_name(node))

    return rule


def _strings(*keys: str) -> Callable[[exp.Expr, Typed], None]:
    return _numbers(*keys, allowed=STRINGS)


def _avg(node: exp.Avg, typed: Typed) -> None:
    typed.require(
        node.this.unnest() if isinstance(node.this, exp.Distinct) else node.this, INTEGERS | FLOATS, "avg"
    )
    return None


def _floor_ceil(node: exp.Expr, typed: Typed) -> exp.Expr:
    """Spark's floor and ceil answer a bigint for whole numbers and doubles (DuckDB: the input's
    type), a decimal of scale 0 for decimals (as DuckDB does)."""
    typed.require(node.this, NUMBERS, construct_name(node))
    if node.args.get("decimals") is not None or node.args.get("expression") is not None:
        raise NotOnAllowList(f"{construct_name(node)} with a scale is not on DuckDB's list")
    return node if typed.kind(node.this) == DECIMALS else exp.cast(node, "BIGINT")


def _round(node: exp.Round, typed: Typed) -> exp.Expr:
    typed.require(node.this, INTEGERS | DECIMALS, "round (of a double: Spark rounds its decimal value)")
    scale = node.args.get("decimals")
    if scale is not None and not _number_literal(scale.this if isinstance(scale, exp.Neg) else scale):
        raise NotOnAllowList("round with a scale that is not a number literal is not on DuckDB's list")
    return node


def _number_literal(node: exp.Expr) -> bool:
    return isinstance(node, exp.Literal) and not node.is_string


def _sign(node: exp.Sign, typed: Typed) -> exp.Expr:
    typed.require(node.this, NUMBERS, "signum")
    return exp.cast(node, "DOUBLE")


def _literal_ints(node: exp.Expr, keys: tuple[str, ...], minimum: int) -> None:
    for key in keys:
        value = node.args.get(key)
        if value is None:
            continue
        if not (isinstance(value, exp.Literal) and not value.is_string and value.this.lstrip("-").isdigit()):
            raise NotOnAllowList(
                f"{construct_name(node)} runs on DuckDB only with number literals as its {key}"
            )
        if int(value.this) < minimum:
            raise NotOnAllowList(
                f"{construct_name(node)} with a {key} below {minimum} is not on DuckDB's list"
            )


def _substring(node: exp.Substring, typed: Typed) -> None:
    typed.require(node.this, STRINGS, "substring")
    _literal_ints(node, ("start",), 1)
    _literal_ints(node, ("length",), 0)
    return None


def _left_right(node: exp.Expr, typed: Typed) -> None:
    typed.require(node.this, STRINGS, construct_name(node))
    _literal_ints(node, ("expression",), 0)
    return None


def _pad(node: exp.Pad, typed: Typed) -> None:
    typed.require(node.this, STRINGS, construct_name(node))
    _literal_ints(node, ("expression",), 0)
    fill = node.args.get("fill_pattern")
    if fill is None or not _string_literal(fill) or not fill.this:
        raise NotOnAllowList("lpad/rpad run on DuckDB only with a non-empty literal fill")
    return None


def _repeat(node: exp.Repeat, typed: Typed) -> None:
    typed.require(node.this, STRINGS, "repeat")
    _literal_ints(node, ("times",), 0)
    return None


def _split_part(node: exp.SplitPart, typed: Typed) -> None:
    typed.require(node.this, STRINGS, "split_part")
    delimiter = node.args.get("delimiter")
    if not _string_literal(delimiter) or not delimiter.this:
        raise NotOnAllowList("split_part runs on DuckDB only with a non-empty literal delimiter")
    _literal_ints(node, ("part_index",), 1)
    return None


def _str_position(node: exp.StrPosition, typed: Typed) -> None:
    typed.require(node.this, STRINGS, "instr/locate")
    typed.require(node.args["substr"], STRINGS, "instr/locate")
    if node.args.get("position") is not None:
        raise NotOnAllowList("locate with a start position is not on DuckDB's list")
    return None


def _concat(node: exp.Expr, typed: Typed) -> None:
    """concat and ||: strings only (Spark writes other types as text its own way); a NULL
    literal is a NULL string (DuckDB would type the result as NULL)."""
    items = node.expressions if isinstance(node, exp.Concat) else [node.this, node.expression]
    for item in items:
        typed.require(item, STRINGS, "concat (Spark turns other types into text its own way)")
        if isinstance(item, exp.Null):
            item.replace(exp.cast(exp.null(), "VARCHAR"))
    return None


def _sha2(node: exp.SHA2, typed: Typed) -> None:
    typed.require(node.this, STRINGS, "sha2")
    length = node.args.get("length")
    if length is not None and not (isinstance(length, exp.Literal) and str(length.this) == "256"):
        raise NotOnAllowList("sha2 runs on DuckDB only with 256 bits")
    return None


def _int_result(check: Callable[[N, Typed], object]) -> Callable[[N, Typed], exp.Expr]:
    """A function Spark answers as an int and DuckDB as a bigint (length, instr...)."""

    def rule(node: N, typed: Typed) -> exp.Expr:
        check(node, typed)
        return exp.cast(node, "INT")

    return rule


def _array_size(node: exp.ArraySize, typed: Typed) -> exp.Expr:
    typed.require(node.this, ARRAYS, "size")
    return exp.cast(duckdb_call("len", node.this), "INT")


def _array_contains(node: exp.ArrayContains, typed: Typed) -> exp.Expr:
    typed.require(node.this, ARRAYS, "array_contains")
    if typed.of(node.expression) in NULLS:
        raise NotOnAllowList("array_contains of NULL is not on DuckDB's list")
    # Spark: NULL when not found and the array holds a NULL; DuckDB answers false.
    array, value = node.this, node.expression
    unknown = exp.or_(
        exp.Is(this=array.copy(), expression=exp.null()), exp.Is(this=value.copy(), expression=exp.null())
    )
    found = duckdb_call("list_contains", array, value)
    holds_null = duckdb_call(
        "list_contains", duckdb_call("list_transform", array.copy(), _is_null_lambda()), exp.true()
    )
    return exp.Case(
        ifs=[
            exp.If(this=unknown, true=exp.null()),
            exp.If(this=found, true=exp.true()),
            exp.If(this=holds_null, true=exp.null()),
        ],
        default=exp.false(),
    )


def _is_null_lambda() -> exp.Expr:
    return exp.Lambda(
        this=exp.Is(this=exp.column("lw_x"), expression=exp.null()), expressions=[exp.to_identifier("lw_x")]
    )


def _group(node: exp.Group, typed: Typed) -> exp.Expr:
    """``GROUP BY a, b WITH ROLLUP`` (or CUBE): DuckDB writes ``GROUP BY ROLLUP (a, b)``."""
    for key, kind in (("rollup", exp.Rollup), ("cube", exp.Cube)):
        marker = node.args.get(key)
        if marker and all(not m.expressions for m in marker):
            return exp.Group(expressions=[kind(expressions=list(node.expressions))])
    return node


def _logarithm(node: exp.Expr, typed: Typed) -> exp.Expr:
    """Spark's ln/log answer NULL for an argument (or base) at or below zero; DuckDB NaN or -inf."""
    arguments = [node.this] + ([node.expression] if node.args.get("expression") is not None else [])
    for argument in arguments:
        typed.require(argument, NUMBERS, construct_name(node))
    positive = [exp.GT(this=a.copy(), expression=exp.Literal.number(0)) for a in arguments]
    return exp.Case(ifs=[exp.If(this=exp.and_(*positive), true=node)], default=exp.null())


def _aggregate_numbers(node: exp.Expr, typed: Typed) -> None:
    typed.require(node.this, INTEGERS | FLOATS, construct_name(node))
    for item in node.expressions if hasattr(node, "expressions") else []:
        typed.require(item, INTEGERS | FLOATS, construct_name(node))
    if node.args.get("expression") is not None:
        typed.require(node.expression, INTEGERS | FLOATS, construct_name(node))
    return None


def _literal(node: exp.Literal, typed: Typed) -> exp.Expr | None:
    """Spark reads ``-2147483648`` as an int (DuckDB: a bigint); an integer literal beyond 64 bits
    is a decimal on Spark and a 128-bit integer on DuckDB."""
    if node.is_string or not str(node.this).isdigit():
        return None
    value = int(node.this)
    if value >= 2**63:
        raise NotOnAllowList(f"the literal {value} (a decimal on Spark) is not on DuckDB's list")
    return None


def _neg(node: exp.Neg, typed: Typed) -> exp.Expr | None:
    """Spark's negation keeps the integer's type (and fails past it); DuckDB widens a constant
    (-(-2147483648) answered 2147483648, a bigint)."""
    typed.require(node.this, NUMBERS, "-")
    if _number_literal(node.this):  # a negative literal: Spark types it by its value
        return exp.cast(exp.Literal.number(-(2**31)), "INT") if str(node.this.this) == str(2**31) else None
    kind = typed.of(node.this)
    return exp.cast(node, exp.DataType.build(kind)) if kind in INTEGERS else None


RANKINGS = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.Ntile)


def _window(node: exp.Window, typed: Typed) -> exp.Expr | None:
    """row_number, rank, dense_rank and ntile: an int on Spark, a bigint on DuckDB."""
    return exp.cast(node, "INT") if isinstance(node.this, RANKINGS) else None


TYPED_RULES: dict[type[exp.Expr], Rule] = dict(
    [
        *DATE_RULES.items(),
        rule_for(exp.Div, _div),
        rule_for(exp.Mod, _mod),
        rule_for(exp.IntDiv, _int_div),
        rule_for(exp.Cast, _cast),
        rule_for(exp.TryCast, _cast),
        rule_for(exp.EQ, _comparison),
        rule_for(exp.NEQ, _comparison),
        rule_for(exp.GT, _comparison),
        rule_for(exp.GTE, _comparison),
        rule_for(exp.LT, _comparison),
        rule_for(exp.LTE, _comparison),
        rule_for(exp.NullSafeEQ, _comparison),
        rule_for(exp.NullSafeNEQ, _comparison),
        rule_for(exp.In, _in),
        rule_for(exp.Between, _between),
        rule_for(exp.Case, _case),
        rule_for(exp.If, _if),
        rule_for(exp.Coalesce, _coalesce),
        rule_for(exp.Greatest, _coalesce),
        rule_for(exp.Least, _coalesce),
        rule_for(exp.Union, _set_operation),
        rule_for(exp.Intersect, _set_operation),
        rule_for(exp.Except, _set_operation),
        rule_for(exp.Add, _add_subtract),
        rule_for(exp.Sub, _add_subtract),
        rule_for(exp.Mul, _multiply),
        rule_for(exp.Neg, _neg),
        rule_for(exp.Literal, _literal),
        rule_for(exp.Window, _window),
        rule_for(exp.Abs, _numbers()),
        rule_for(exp.Sum, _numbers()),
        rule_for(exp.Avg, _avg),
        rule_for(exp.Floor, _floor_ceil),
        rule_for(exp.Ceil, _floor_ceil),
        rule_for(exp.Round, _round),
        rule_for(exp.Sign, _sign),
        rule_for(exp.Sqrt, _numbers()),
        rule_for(exp.Exp, _numbers()),
        rule_for(exp.Pow, _numbers("this", "expression")),
        rule_for(exp.Ln, _logarithm),
        rule_for(exp.Log, _logarithm),
        rule_for(exp.Stddev, _aggregate_numbers),
        rule_for(exp.StddevSamp, _aggregate_numbers),
        rule_for(exp.StddevPop, _aggregate_numbers),
        rule_for(exp.Variance, _aggregate_numbers),
        rule_for(exp.VariancePop, _aggregate_numbers),
        rule_for(exp.Corr, _aggregate_numbers),
        rule_for(exp.CovarSamp, _aggregate_numbers),
        rule_for(exp.CovarPop, _aggregate_numbers),
        rule_for(exp.Median, _aggregate_numbers),
        rule_for(exp.Upper, _strings()),
        rule_for(exp.Lower, _strings()),
        rule_for(exp.Length, _int_result(_strings())),
        rule_for(exp.Trim, _strings()),
        rule_for(exp.Reverse, _strings()),
        rule_for(exp.Ascii, _int_result(_strings())),
        rule_for(exp.MD5, _strings()),
        rule_for(exp.StartsWith, _strings("this", "expression")),
        rule_for(exp.EndsWith, _strings("this", "expression")),
        rule_for(exp.Contains, _strings("this", "expression")),
        rule_for(exp.Replace, _strings("this", "expression", "replacement")),
        rule_for(exp.Translate, _strings("this", "from_", "to")),
        rule_for(exp.Like, _strings("this")),
        rule_for(exp.ILike, _strings("this")),
        rule_for(exp.ConcatWs, _strings("expressions")),
        rule_for(exp.Concat, _concat),
        rule_for(exp.DPipe, _concat),
        rule_for(exp.Substring, _substring),
        rule_for(exp.Left, _left_right),
        rule_for(exp.Right, _left_right),
        rule_for(exp.Pad, _pad),
        rule_for(exp.Repeat, _repeat),
        rule_for(exp.SplitPart, _split_part),
        rule_for(exp.StrPosition, _int_result(_str_position)),
        rule_for(exp.SHA2, _sha2),
        rule_for(exp.ArraySize, _array_size),
        rule_for(exp.ArrayContains, _array_contains),
        rule_for(exp.Group, _group),
    ]
)
