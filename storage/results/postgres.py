"""Cached results as Postgres tables in one schema, for small results shown in the console.

The rows travel through the driver (``DataFrame.toArrow``) and are loaded with ``COPY``; a result
above ``max_rows`` (default 100,000) is refused before anything is written, so use the filesystem
or iceberg backend for large results. The Spark schema is kept as the table's comment, so a read
gives back exactly the types that were written, structs, arrays and maps (stored as ``jsonb``)
included. Filters become parameterised SQL where Postgres answers exactly as Spark would; the rest
is applied by Spark after the read.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from storage.results.plugin import IntermediateResultStorage, WriteStats
from storage.results.registry import StorageConfigError, StorageUnavailable
from storage.secrets import mask_text

DEFAULT_SCHEMA = "lakewarden_cache"
DEFAULT_MAX_ROWS = 100_000
IDENTIFIER = r"^[A-Za-z_][A-Za-z0-9_]{0,62}$"


def check_table_name(table_name: str) -> str:
    if not isinstance(table_name, str) or not table_name.strip():
        raise ValueError("a cached result needs a non-empty table name")
    if "." in table_name or "\x00" in table_name or len(table_name.encode()) > 63:
        raise ValueError(f"table name {table_name!r} must be at most 63 bytes, without '.'")
    return table_name


# -- types -----------------------------------------------------------------------------------------


def pg_type(spark_type: Any) -> str:  # noqa: C901 - one branch per type family
    """The Postgres column type holding a Spark type's values."""
    from pyspark.sql import types as T

    simple = {
        T.ByteType: "smallint",
        T.ShortType: "smallint",
        T.IntegerType: "integer",
        T.LongType: "bigint",
        T.FloatType: "real",
        T.DoubleType: "double precision",
        T.StringType: "text",
        T.BooleanType: "boolean",
        T.DateType: "date",
        T.TimestampType: "timestamptz",
        T.TimestampNTZType: "timestamp",
        T.BinaryType: "bytea",
    }
    for kind, name in simple.items():
        if isinstance(spark_type, kind):
            return name
    if isinstance(spark_type, T.DecimalType):
        return f"numeric({spark_type.precision},{spark_type.scale})"
    if isinstance(spark_type, T.VarcharType | T.CharType):
        return "text"
    if isinstance(spark_type, T.StructType | T.ArrayType | T.MapType):
        return "jsonb"
    raise ValueError(f"the postgres result storage cannot store {spark_type.simpleString()} columns")


def to_json(value: Any, spark_type: Any) -> Any:  # noqa: C901 - one branch per type family
    """A nested value as JSON that ``from_json`` turns back into the same Python value."""
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(spark_type, T.StructType):
        return {f.name: to_json(value.get(f.name), f.dataType) for f in spark_type.fields}
    if isinstance(spark_type, T.ArrayType):
        return [to_json(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, T.MapType):
        # pairs, not an object: JSON keys are strings, map keys need not be
        items = value.items() if isinstance(value, dict) else value
        return [[to_json(k, spark_type.keyType), to_json(v, spark_type.valueType)] for k, v in items]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, decimal.Decimal | dt.date | dt.datetime):
        return str(value) if isinstance(value, decimal.Decimal) else value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # 'nan', 'inf': jsonb has no such numbers
    return value


def from_json(value: Any, spark_type: Any) -> Any:  # noqa: C901 - one branch per type family
    from pyspark.sql import types as T

    if value is None:
        return None
    if isinstance(spark_type, T.StructType):
        return {f.name: from_json(value.get(f.name), f.dataType) for f in spark_type.fields}
    if isinstance(spark_type, T.ArrayType):
        return [from_json(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, T.MapType):
        return {from_json(k, spark_type.keyType): from_json(v, spark_type.valueType) for k, v in value}
    if isinstance(spark_type, T.BinaryType):
        return base64.b64decode(value)
    if isinstance(spark_type, T.DecimalType):
        return decimal.Decimal(value)
    if isinstance(spark_type, T.TimestampType | T.TimestampNTZType):
        return dt.datetime.fromisoformat(value)
    if isinstance(spark_type, T.DateType):
        return dt.date.fromisoformat(value)
    if isinstance(spark_type, T.FloatType | T.DoubleType):
        return float(value)
    return value


# -- filters as SQL --------------------------------------------------------------------------------


@dataclass
class Translation:
    """``where`` (parameterised SQL with ``params``) plus the ``residual`` Spark must still apply."""

    where: Any
    params: list[Any] = field(default_factory=list)
    residual: Any = None


# NaN: Postgres orders it above every number and says NaN = NaN; Arrow and our expressions don't.
_INEXACT = {"real", "double precision", "jsonb"}


def translate(expr: Any, pg_types: Mapping[str, str]) -> Translation:
    """``expr`` (bound to the stored schema) as SQL: the conjuncts Postgres answers exactly as the
    expression does go to ``where``; the others (float or nested columns, a null in an IN list...)
    are the ``residual``."""
    from psycopg import sql

    from storage.spec.expressions import And, and_

    conjuncts = list(expr.children) if isinstance(expr, And) else [expr]
    parts, params, rest = [], [], []
    for conjunct in conjuncts:
        translated = _sql(conjunct, pg_types)
        if translated is None:
            rest.append(conjunct)
        else:
            parts.append(translated[0])
            params.extend(translated[1])
    where = sql.SQL(" AND ").join(parts) if parts else None
    return Translation(where, params, and_(*rest) if rest else None)


def _sql(expr: Any, pg_types: Mapping[str, str]) -> tuple[Any, list[Any]] | None:  # noqa: C901
    from psycopg import sql

    from storage.spec import expressions as E

    if isinstance(expr, E.AlwaysTrue | E.AlwaysFalse):
        return sql.SQL("TRUE" if isinstance(expr, E.AlwaysTrue) else "FALSE"), []
    if isinstance(expr, E.And | E.Or | E.Not):
        children = [expr.child] if isinstance(expr, E.Not) else list(expr.children)
        maybe = [_sql(c, pg_types) for c in children]
        translated = [t for t in maybe if t is not None]
        if len(translated) != len(maybe):
            return None  # all or nothing under or/not: half a disjunction would drop rows
        params = [p for t in translated for p in t[1]]
        if isinstance(expr, E.Not):
            return sql.SQL("(NOT {})").format(translated[0][0]), params
        if not translated:
            return sql.SQL("TRUE" if isinstance(expr, E.And) else "FALSE"), []
        joiner = sql.SQL(" AND " if isinstance(expr, E.And) else " OR ")
        return sql.SQL("({})").format(joiner.join(t[0] for t in translated)), params
    column = getattr(expr, "column", None)
    type_ = pg_types.get(column) if column is not None else None
    if column is None or type_ is None:
        return None  # a nested field: Spark reads it from the struct
    ident = sql.Identifier(column)
    if isinstance(expr, E.IsNull):
        return sql.SQL("{} IS NULL").format(ident), []
    if isinstance(expr, E.NotNull):
        return sql.SQL("{} IS NOT NULL").format(ident), []
    if type_ in _INEXACT:
        return None
    if isinstance(expr, E.Comparison):
        # byte order for text, as Arrow and Spark compare strings, whatever the database collation
        left = sql.SQL('{} COLLATE "C"').format(ident) if type_ == "text" else ident
        return sql.SQL("{} {} {}").format(left, sql.SQL(expr.op), _cast(type_)), [expr.value]
    if isinstance(expr, E.In | E.NotIn):
        if not expr.values or any(v is None for v in expr.values):
            return None
        test = sql.SQL("{} = ANY({}[])").format(ident, _cast(type_))
        if isinstance(expr, E.NotIn):
            test = sql.SQL("(NOT {})").format(test)
        return test, [list(expr.values)]
    if isinstance(expr, E.StartsWith):
        if type_ == "text" and isinstance(expr.prefix, str):
            return sql.SQL("starts_with({}, %s::text)").format(ident), [expr.prefix]
        if type_ == "bytea" and isinstance(expr.prefix, bytes):
            return sql.SQL("substring({} from 1 for %s) = %s::bytea").format(ident), [
                len(expr.prefix),
                expr.prefix,
            ]
    return None


def _cast(type_: str) -> Any:
    from psycopg import sql

    return sql.SQL("%s::" + type_)


# -- the backend -----------------------------------------------------------------------------------


class PostgresStorage(IntermediateResultStorage):
    type_name: ClassVar[str] = "postgres"
    description: ClassVar[str] = "Postgres tables in a schema, for small results shown in the console (COPY)"
    config_schema: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "dsn": {"type": "string", "minLength": 1, "description": "postgresql://user:password@host/db"},
            "schema": {"type": "string", "pattern": IDENTIFIER},
            "max_rows": {"type": "integer", "minimum": 1, "description": "larger results are refused"},
            "connect_timeout": {"type": "integer", "minimum": 1, "maximum": 300},
        },
        "required": ["dsn"],
        "additionalProperties": False,
    }
    secret_keys: ClassVar[frozenset[str]] = frozenset({"dsn"})

    def configure(self, config: Mapping[str, Any]) -> None:
        from psycopg.conninfo import conninfo_to_dict

        super().configure(config)
        self.dsn = str(self.config["dsn"])
        try:
            self._conninfo = conninfo_to_dict(self.dsn)
        except Exception as exc:
            raise StorageConfigError(
                f"dsn: not a Postgres connection string: {self._scrub(str(exc))}"
            ) from None
        self.schema = str(self.config.get("schema") or DEFAULT_SCHEMA)
        self.max_rows = int(self.config.get("max_rows") or DEFAULT_MAX_ROWS)
        self.connect_timeout = int(self.config.get("connect_timeout") or 5)

    def where(self) -> str:
        """host:port/database, never the credentials."""
        info = self._conninfo
        return f"{info.get('host') or 'localhost'}:{info.get('port') or 5432}/{info.get('dbname') or ''}"

    def connect(self) -> Any:
        """An autocommit connection in UTC (``conn.transaction()`` where atomicity matters);
        StorageUnavailable, without the password, when it fails."""
        import psycopg

        try:
            conn = psycopg.connect(self.dsn, connect_timeout=self.connect_timeout, autocommit=True)
        except psycopg.Error as exc:
            reason = self._scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
            raise StorageUnavailable(f"cannot connect to postgres at {self.where()}: {reason}") from None
        conn.execute("SET TIME ZONE 'UTC'")
        return conn

    def verify(self) -> None:
        """Connect once (``StorageUnavailable``, an ``OSError``, naming host and database)."""
        self.connect().close()

    # -- hooks -------------------------------------------------------------------------------------

    def create(self, table_name: str, properties: Mapping[str, Any]) -> dict[str, Any]:
        from psycopg import sql

        check_table_name(table_name)
        with self.connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
        return {**properties, "table": f"{self.schema}.{table_name}"}

    def write(self, dataframe: Any, properties: Mapping[str, Any]) -> WriteStats:
        from psycopg import sql
        from psycopg.types.json import Jsonb

        table = self._table(properties)
        schema = dataframe.schema
        types = [pg_type(f.dataType) for f in schema.fields]  # refuse unsupported types before Spark runs
        # one Spark job: take one row more than allowed to know whether the result is too large
        rows = dataframe.limit(self.max_rows + 1).toArrow()
        if rows.num_rows > self.max_rows:
            raise ValueError(
                f"the result has more than {self.max_rows} rows, the postgres storage's max_rows; "
                "use a filesystem or iceberg storage for large results"
            )
        nested = [t == "jsonb" for t in types]
        columns = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(t))
            for f, t in zip(schema.fields, types, strict=True)
        )
        names = sql.SQL(", ").join(sql.Identifier(f.name) for f in schema.fields)
        with self.connect() as conn, conn.transaction():
            # one transaction: a failed load leaves the previous result (or nothing), never half
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(table, columns))
            conn.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(table, sql.Literal(schema.json())))
            with conn.cursor() as cursor:
                with cursor.copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, names)) as copy:
                    for batch in rows.to_batches(max_chunksize=10_000):
                        values = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
                        for row in zip(*values, strict=True):
                            copy.write_row(
                                [
                                    Jsonb(to_json(v, f.dataType)) if is_nested and v is not None else v
                                    for v, f, is_nested in zip(row, schema.fields, nested, strict=True)
                                ]
                            )
                size = cursor.execute(
                    sql.SQL("SELECT pg_total_relation_size({}::regclass)").format(
                        sql.Literal(self._qualified(properties))
                    )
                ).fetchone()[0]
        return WriteStats(rows=rows.num_rows, size_bytes=int(size))

    def read(
        self,
        spark: Any,
        properties: Mapping[str, Any],
        columns: list[str] | None = None,
        filters: Any = None,
    ) -> Any:
        from psycopg import sql
        from pyspark.sql import types as T
        from pyspark.sql.pandas.types import to_arrow_schema

        from storage.results.parquet import check_columns, quoted
        from storage.spec.expressions import bind_filter, to_spark

        table = self._table(properties)
        with self.connect() as conn:
            spark_schema = self._stored_schema(conn, properties)
            arrow_schema = to_arrow_schema(spark_schema, timezone="UTC")
            columns = check_columns(columns, arrow_schema)
            expr = bind_filter(filters, arrow_schema)
            pg_types = {f.name: pg_type(f.dataType) for f in spark_schema.fields}
            translation = translate(expr, pg_types) if expr is not None else Translation(None, [], None)
            wanted = list(columns) if columns is not None else list(spark_schema.names)
            if translation.residual is not None:
                # Spark filters these rows afterwards: it needs the filter's columns too
                needed = {c.split(".", 1)[0] for c in translation.residual.columns()}
                wanted += [n for n in spark_schema.names if n in needed and n not in wanted]
            fields = [spark_schema[n] for n in wanted]
            query = sql.SQL("SELECT {} FROM {}").format(
                sql.SQL(", ").join(sql.Identifier(n) for n in wanted), table
            )
            if translation.where is not None:
                query = sql.SQL("{} WHERE {}").format(query, translation.where)
            records = conn.execute(query, translation.params).fetchall()
        nested = [isinstance(f.dataType, T.StructType | T.ArrayType | T.MapType) for f in fields]
        rows = [
            tuple(
                from_json(v, f.dataType) if n else v for v, f, n in zip(record, fields, nested, strict=True)
            )
            for record in records
        ]
        frame = spark.createDataFrame(rows, T.StructType(fields) if fields else T.StructType([]))
        if translation.residual is not None:
            frame = frame.where(to_spark(translation.residual))
        if columns is not None:
            frame = frame.select(*[quoted(c) for c in columns])
        return frame

    def exists(self, properties: Mapping[str, Any]) -> bool:
        with self.connect() as conn:
            found = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL", [self._qualified(properties)]
            ).fetchone()
        return bool(found and found[0])

    def clean(self, table_names: list[str], properties: Mapping[str, Mapping[str, Any]]) -> None:
        from psycopg import sql

        with self.connect() as conn:
            for name in table_names:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._table(properties[name])))

    # -- helpers -----------------------------------------------------------------------------------

    def _parts(self, properties: Mapping[str, Any]) -> tuple[str, str]:
        schema, _, name = str(properties["table"]).partition(".")
        # the properties come back from the database: only ever touch our own schema
        if schema != self.schema:
            raise ValueError(f"{properties['table']} is not in the cache schema {self.schema}")
        return schema, check_table_name(name)

    def _table(self, properties: Mapping[str, Any]) -> Any:
        from psycopg import sql

        return sql.Identifier(*self._parts(properties))

    def _qualified(self, properties: Mapping[str, Any]) -> str:
        """The table as regclass text (quoted, so upper case and odd characters survive)."""
        return ".".join('"' + part.replace('"', '""') + '"' for part in self._parts(properties))

    def _stored_schema(self, conn: Any, properties: Mapping[str, Any]) -> Any:
        from pyspark.sql import types as T

        row = conn.execute(
            "SELECT obj_description(to_regclass(%s), 'pg_class')", [self._qualified(properties)]
        ).fetchone()
        if row is None or row[0] is None:
            raise FileNotFoundError(f"no stored result: postgres has no table {properties['table']}")
        return T.StructType.fromJson(json.loads(row[0]))

    def _scrub(self, message: str) -> str:
        """``message`` without the DSN or its password (mask_text finds a libpq DSN's password)."""
        return mask_text(message, secrets=[self.dsn])
