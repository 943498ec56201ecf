"""The typed rules of dates and timestamps: Spark's date functions in the session's zone (UTC),
their answers' types (an int where DuckDB says bigint, a date where DuckDB's interval arithmetic
says timestamp), Sunday = 1, and units spelled as Spark spells them. Plain Python (sqlglot)."""

from __future__ import annotations

from sqlglot import exp

from processes.duckdb_translation.typed import (
    DATES,
    INTEGERS,
    LOCAL_TIMESTAMPS,
    STRINGS,
    TIMES,
    TIMESTAMPS,
    NotOnAllowList,
    Rule,
    Typed,
    construct_name,
    duckdb_call,
    rule_for,
)

DATE_PARTS = frozenset(
    {"YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "DAYOFWEEK", "DOW", "DOY", "HOUR", "MINUTE"}
)
#: Spark's trunc / date_trunc units (their spellings) -> DuckDB's unit.
TRUNC_UNITS = {
    spelling: unit
    for unit, spellings in {
        "year": "YEAR YYYY YY",
        "quarter": "QUARTER",
        "month": "MONTH MM MON",
        "week": "WEEK",
        "day": "DAY DD",
        "hour": "HOUR",
        "minute": "MINUTE",
        "second": "SECOND",
    }.items()
    for spelling in spellings.split()
}


def _day_of_week(node: exp.DayOfWeek, typed: Typed) -> exp.Expr:
    typed.require(node.this, TIMES, "dayofweek")
    return exp.cast(
        exp.Add(this=duckdb_call("dayofweek", node.this), expression=exp.Literal.number(1)), "INT"
    )


def _date_part(node: exp.Expr, typed: Typed) -> exp.Expr:
    """year(), month()...: Spark answers an int, DuckDB a bigint."""
    typed.require(node.this, TIMES, construct_name(node))
    return exp.cast(node, "INT")


def _time_part(node: exp.Expr, typed: Typed) -> exp.Expr:
    typed.require(node.this, TIMESTAMPS | LOCAL_TIMESTAMPS, construct_name(node))
    return exp.cast(node, "INT")


def _last_day(node: exp.LastDay, typed: Typed) -> None:
    typed.require(node.this, DATES, "last_day")
    return None


def _extract(node: exp.Extract, typed: Typed) -> exp.Expr:
    part = node.this.name.upper()
    if part not in DATE_PARTS:
        raise NotOnAllowList(f"EXTRACT({part} ...) is not on DuckDB's list")
    typed.require(node.expression, TIMES, "EXTRACT")
    if part in ("DAYOFWEEK", "DOW"):  # Spark counts from Sunday = 1, DuckDB from Sunday = 0
        return exp.cast(
            exp.Add(this=duckdb_call("dayofweek", node.expression), expression=exp.Literal.number(1)), "INT"
        )
    return exp.cast(node, "INT")


def _unit(node: exp.Expr, key: str) -> str:
    unit = node.args.get(key)
    text = (unit.name if isinstance(unit, (exp.Literal, exp.Var)) else "").upper()
    if text not in TRUNC_UNITS:
        raise NotOnAllowList(
            f"{construct_name(node)} runs on DuckDB only with a literal unit ({', '.join(TRUNC_UNITS)})"
        )
    return TRUNC_UNITS[text]


def _timestamp_trunc(node: exp.TimestampTrunc, typed: Typed) -> exp.Expr:
    typed.require(node.this, TIMESTAMPS | LOCAL_TIMESTAMPS, "date_trunc")
    unit = _unit(node, "unit")
    # Spark answers a TIMESTAMP (in the session's zone, UTC) for a TIMESTAMP_NTZ too.
    return exp.cast(duckdb_call("date_trunc", exp.Literal.string(unit), node.this), "TIMESTAMPTZ")


def _date_trunc(node: exp.DateTrunc, typed: Typed) -> exp.Expr:
    typed.require(node.this, DATES, "trunc")
    unit = _unit(node, "unit")
    if unit not in ("year", "quarter", "month", "week"):
        raise NotOnAllowList(f"trunc to {unit} answers NULL on Spark; it is not on DuckDB's list")
    return exp.cast(duckdb_call("date_trunc", exp.Literal.string(unit), node.this), "DATE")


def _date_diff(node: exp.DateDiff, typed: Typed) -> exp.Expr:
    for side in (node.this, node.expression):
        typed.require(side, DATES, "datediff")
    if node.args.get("unit") and node.args["unit"].name.upper() not in ("DAY", ""):
        raise NotOnAllowList("datediff with a unit is not on DuckDB's list")
    days = duckdb_call("date_diff", exp.Literal.string("day"), node.expression, node.this)
    return exp.cast(days, "INT")


def _add_months(node: exp.AddMonths, typed: Typed) -> exp.Expr:
    typed.require(node.this, DATES, "add_months")
    typed.require(node.expression, INTEGERS, "add_months")
    months = exp.Mul(
        this=exp.Interval(this=exp.Literal.string("1"), unit=exp.Var(this="MONTH")),
        expression=node.expression,
    )
    return exp.cast(exp.Add(this=node.this, expression=months), "DATE")


def _date_add(node: exp.TsOrDsAdd, typed: Typed) -> exp.Expr:
    typed.require(node.this, DATES, "date_add/date_sub")
    typed.require(node.expression, INTEGERS, "date_add/date_sub")
    unit = node.args.get("unit")
    if unit is not None and unit.name.upper() not in ("DAY", ""):
        raise NotOnAllowList("dateadd with a unit other than days is not on DuckDB's list")
    return exp.Add(this=node.this, expression=node.expression)  # date + int: a date on DuckDB too


def _to_date(node: exp.TsOrDsToDate, typed: Typed) -> exp.Expr:
    if node.args.get("format") is not None:
        raise NotOnAllowList(
            "to_date with a pattern is not on DuckDB's list (Java's and DuckDB's patterns differ)"
        )
    typed.require(node.this, STRINGS | TIMES, "to_date")
    return exp.Cast(this=node.this, to=exp.DataType.build("DATE"))


DATE_RULES: dict[type[exp.Expr], Rule] = dict(
    [
        rule_for(exp.Year, _date_part),
        rule_for(exp.Month, _date_part),
        rule_for(exp.Day, _date_part),
        rule_for(exp.DayOfMonth, _date_part),
        rule_for(exp.DayOfYear, _date_part),
        rule_for(exp.Quarter, _date_part),
        rule_for(exp.WeekOfYear, _date_part),
        rule_for(exp.DayOfWeek, _day_of_week),
        rule_for(exp.Hour, _time_part),
        rule_for(exp.Minute, _time_part),
        rule_for(exp.Extract, _extract),
        rule_for(exp.TimestampTrunc, _timestamp_trunc),
        rule_for(exp.DateTrunc, _date_trunc),
        rule_for(exp.LastDay, _last_day),
        rule_for(exp.DateDiff, _date_diff),
        rule_for(exp.AddMonths, _add_months),
        rule_for(exp.TsOrDsAdd, _date_add),
        rule_for(exp.TsOrDsToDate, _to_date),
    ]
)
