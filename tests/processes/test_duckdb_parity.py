"""DuckDB answers as Spark does, or does not run: every query of the parity corpus
(tests/processes/parity_corpus.py) runs on both engines over the same two Delta tables, read as
production reads them (Spark through ``read_table``, DuckDB through the spec API into its
locked-down connection), and must give the same values, types and nulls, or fail on both. Every
construct and function on DuckDB's allow-list, and every cast it allows, appears in the corpus;
what the corpus shows DuckDB answering otherwise is refused with the reason.

One Spark session and one DuckDB connection for the module; the tables are read once."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp

from processes import queries
from processes.duckdb_translation import (
    ANONYMOUS_FUNCTIONS,
    CONSTRUCTS,
    FUNCTIONS,
    NotOnAllowList,
    duckdb_translate,
)
from processes.duckdb_translation.rules import CASTS
from processes.duckdb_translation.typed import (
    BOOLEANS,
    DATES,
    DECIMALS,
    FLOATS,
    INTEGERS,
    LOCAL_TIMESTAMPS,
    NULLS,
    STRINGS,
    TIMESTAMPS,
    Typed,
    annotate,
)
from processes.query_duckdb import DuckDbRun, arrow_rows
from storage.spec import load_table
from storage.spec.spark.pruning import sql_over_views
from storage.spec.spark_source import arrow_type_to_spark, conform_batch, read_table
from tests.processes.parity_corpus import FAILS, PARITY, REFUSED, STRICTER, TABLES

pytestmark = pytest.mark.spark

LIMIT = 1000
GROUPS = {
    "integers": INTEGERS,
    "floats": FLOATS,
    "decimals": DECIMALS,
    "strings": STRINGS,
    "dates": DATES,
    "timestamps": TIMESTAMPS,
    "local timestamps": LOCAL_TIMESTAMPS,
    "booleans": BOOLEANS,
    "nulls": NULLS,
}


@dataclass
class Answer:
    rows: list[list[Any]] | None
    types: list[str]
    columns: list[str]
    error: Exception | None = None


class Engines:
    """The corpus tables on both engines, and one query run on each."""

    def __init__(self, spark, frames: dict[str, Any], arrow: dict[str, pa.Table]) -> None:
        self.spark = spark
        self.frames = frames
        self.schemas = {view: table.schema for view, table in arrow.items()}
        self.duckdb = DuckDbRun()
        self.duckdb.register_arrow(arrow)

    def on_spark(self, sql: str) -> Answer:
        readers = {view: _reader(frame) for view, frame in self.frames.items()}
        try:
            frame = sql_over_views(self.spark, sql, readers)
            rows, columns, _total = queries._collect(frame, LIMIT)
        except Exception as error:
            return Answer(None, [], [], error)
        return Answer(rows, [_type(f.dataType.simpleString()) for f in frame.schema.fields], columns)

    def on_duckdb(self, sql: str) -> Answer:
        translated = duckdb_translate(sql, self.schemas)
        try:
            table, _total = self.duckdb.fetch(translated, LIMIT, whole=False)
        except Exception as error:
            return Answer(None, [], [], error)
        types = [_type(arrow_type_to_spark(f.type).simpleString()) for f in table.schema]
        return Answer(arrow_rows(table, LIMIT), types, list(table.column_names))


def _reader(frame):
    return lambda columns: frame


def _type(text: str) -> str:
    """Spark's type name, decimals without their precision: Spark's decimal arithmetic widens
    precision by its own rule (sum of decimal(10,2) is decimal(20,2), DuckDB's decimal(38,2));
    the scale, and so every digit shown, is the same."""
    return re.sub(r"decimal\(\d+,", "decimal(*,", text)


@pytest.fixture(scope="module")
def engines(spark, tmp_path_factory):
    from deltalake import write_deltalake

    root = tmp_path_factory.mktemp("parity")
    frames, arrow = {}, {}
    for view, table in TABLES.items():
        write_deltalake(str(root / view), table)
        spec = load_table(str(root / view), format="delta")
        arrow[view] = pa.Table.from_batches(
            [conform_batch(batch, spec.schema) for batch in spec.read()], schema=spec.schema
        )
        frames[view] = read_table(spark, str(root / view), "delta").localCheckpoint()
    both = Engines(spark, frames, arrow)
    yield both
    both.duckdb.close()


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or math.isclose(a, b, rel_tol=1e-12)  # the last digit of ln, exp, log...
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _ordered(sql: str) -> bool:
    return sqlglot.parse_one(sql, read="spark").args.get("order") is not None


def _named_columns(sql: str) -> bool:
    """Whether every output is a column or an alias (DuckDB names other expressions its own way)."""
    statement = sqlglot.parse_one(sql, read="spark")
    while isinstance(statement, exp.SetOperation):
        statement = statement.left
    return all(isinstance(item, (exp.Alias, exp.Column)) for item in statement.selects)


@pytest.mark.parametrize("sql", PARITY, ids=[f"{n:03d}" for n in range(len(PARITY))])
def test_duckdb_answers_the_corpus_as_spark_does(engines, sql):
    spark, duckdb = engines.on_spark(sql), engines.on_duckdb(sql)

    assert spark.error is None, f"{sql}: Spark failed: {spark.error}"
    assert duckdb.error is None, f"{sql}: DuckDB failed: {duckdb.error}"
    spark_rows, duckdb_rows = spark.rows, duckdb.rows
    if not _ordered(sql):
        spark_rows, duckdb_rows = sorted(spark_rows, key=repr), sorted(duckdb_rows, key=repr)
    assert _same(spark_rows, duckdb_rows), f"{sql}\nspark:  {spark_rows}\nduckdb: {duckdb_rows}"
    assert spark.types == duckdb.types, sql
    if _named_columns(sql):
        assert spark.columns == duckdb.columns, sql


@pytest.mark.parametrize("sql", FAILS, ids=[f"{n:03d}" for n in range(len(FAILS))])
def test_what_fails_on_spark_fails_on_duckdb(engines, sql):
    spark, duckdb = engines.on_spark(sql), engines.on_duckdb(sql)

    assert spark.error is not None, f"{sql}: the corpus says Spark fails; it answered {spark.rows}"
    assert duckdb.error is not None, f"{sql}: DuckDB answered {duckdb.rows} where Spark failed: {spark.error}"
    # a failure of the data (a cast, an overflow), not SQL DuckDB could not read
    assert not re.match(r"(Binder|Parser|Catalog)", type(duckdb.error).__name__), f"{sql}: {duckdb.error}"


@pytest.mark.parametrize("sql", STRICTER, ids=[f"{n:03d}" for n in range(len(STRICTER))])
def test_where_duckdb_is_stricter_it_fails_rather_than_answers_otherwise(engines, sql):
    spark, duckdb = engines.on_spark(sql), engines.on_duckdb(sql)

    assert spark.error is None and spark.rows, sql
    assert duckdb.error is not None, (
        f"{sql}: DuckDB answered {duckdb.rows}; add it to PARITY if that is Spark's"
    )


@pytest.mark.parametrize(("sql", "reason"), REFUSED, ids=[f"{n:03d}" for n in range(len(REFUSED))])
def test_what_duckdb_answers_otherwise_is_refused_with_the_reason(engines, sql, reason):
    with pytest.raises(NotOnAllowList) as refused:
        duckdb_translate(sql, engines.schemas)

    assert reason in str(refused.value)


def test_every_construct_and_function_on_the_list_is_in_the_corpus():
    seen: set[type] = set()
    anonymous: set[str] = set()
    for sql in PARITY + FAILS:
        for node in sqlglot.parse_one(sql, read="spark").walk():
            seen.add(type(node))
            if isinstance(node, exp.Anonymous):
                anonymous.add(node.name.lower())

    assert sorted(c.__name__ for c in (CONSTRUCTS | FUNCTIONS) - seen) == []
    assert ANONYMOUS_FUNCTIONS <= anonymous


def test_every_cast_on_the_list_is_in_the_corpus(engines):
    allowed = {
        (source, target)
        for source_group, targets in CASTS.items()
        for source, group in GROUPS.items()
        if group == source_group
        for target, target_group in GROUPS.items()
        if targets & target_group
    }
    seen = set()
    for sql in PARITY + FAILS:
        statement = sqlglot.parse_one(sql, read="spark")
        typed = Typed(annotate(statement, engines.schemas))
        for cast in statement.find_all(exp.Cast):  # TryCast is a Cast
            seen.add((_group(typed.kind(cast.this)), _group(frozenset({cast.to.this}))))

    missing = sorted(allowed - seen)
    assert missing == [], "; ".join(f"{a} -> {b}" for a, b in missing)


def _group(kinds: frozenset) -> str:
    return next((name for name, group in GROUPS.items() if kinds <= group), str(sorted(map(str, kinds))))


def test_the_corpus_holds_200_queries_both_engines_run():
    assert len(PARITY) + len(FAILS) >= 200
    assert len(set(PARITY + FAILS)) == len(PARITY + FAILS)
