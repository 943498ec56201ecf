"""The workbench's SQL policy: only SELECT queries over allowed functions reach Spark.

Hostile queries hide a forbidden call everywhere a function can sit (CTEs, sub-queries, lateral views,
lambda bodies, window specs, CASE, casts, set operations, hints...) or use a statement or construct
that escapes the query; ordinary analyst queries must pass, and (with a real Spark session) must
resolve in Spark, so the allow-list holds no name Spark lacks.
"""

from __future__ import annotations

import re

import pytest
import sqlglot
from sqlglot import exp

from processes.sql_policy import (
    ALLOWED_FUNCTIONS,
    ALLOWED_HINTS,
    REFUSED_FUNCTIONS,
    SPARK_QUERY_CONF,
    SPARK_STATIC_CONF,
    SYNTAX_FUNCTIONS,
    SqlNotAllowed,
    SqlPolicyError,
    SqlUnparsable,
    check_query,
    parse_query,
)

JM = "java_method('java.lang.System', 'getenv', 'DATABASE_URL')"


def hostile(sql: str, function: str, id: str):
    return pytest.param(sql, function, id=id)


HOSTILE = [
    # -- the reflection functions, spelled every way -------------------------------------------------
    hostile(f"select {JM} as v from demo.customers limit 1", "java_method", "issue-10-java_method"),
    hostile(
        "select JAVA_METHOD('java.lang.System', 'getenv', 'X') from demo.customers",
        "java_method",
        "upper-case",
    ),
    hostile(
        "select Java_Method('java.lang.System', 'getenv', 'X') from demo.customers",
        "java_method",
        "mixed-case",
    ),
    hostile(
        "select `java_method`('java.lang.System', 'getenv', 'X') from demo.customers",
        "java_method",
        "backticks",
    ),
    hostile(
        "select /* look away */ java_method /* here */ ('java.lang.System', 'getenv', 'X') from demo.customers",
        "java_method",
        "block-comments-between-tokens",
    ),
    hostile(
        "select java_method -- line comment\n ('java.lang.System', 'getenv', 'X') from demo.customers",
        "java_method",
        "line-comment-between-tokens",
    ),
    hostile(
        "select\n\tjava_method\n(\n'a',\n'b'\n)\nfrom demo.customers", "java_method", "newlines-and-tabs"
    ),
    hostile("select reflect('java.lang.System', 'getenv', 'X') from demo.customers", "reflect", "reflect"),
    hostile("select REFLECT('java.util.UUID', 'randomUUID')", "reflect", "reflect-no-from"),
    hostile(
        "select try_reflect('java.lang.System', 'getenv', 'X') from demo.customers",
        "try_reflect",
        "try_reflect",
    ),
    hostile(
        f"select system.builtin.{JM} from demo.customers", "java_method", "qualified-builtin-java_method"
    ),
    # -- hidden in every place a function can sit ------------------------------------------------------
    hostile(f"with c as (select {JM} as v from demo.customers) select * from c", "java_method", "cte"),
    hostile(
        f"with a as (select id from demo.customers), b as (select {JM} v from a) select * from b",
        "java_method",
        "second-cte",
    ),
    hostile(
        f"select * from demo.customers where name = (select {JM})", "java_method", "scalar-subquery-in-where"
    ),
    hostile(
        "select * from demo.customers where id in (select reflect('a', 'b') from demo.orders)",
        "reflect",
        "in-subquery",
    ),
    hostile(
        f"select * from demo.customers c where exists (select 1 from demo.orders o where o.status = {JM})",
        "java_method",
        "exists-subquery",
    ),
    hostile(f"select * from (select {JM} as v from demo.customers) x", "java_method", "derived-table"),
    hostile(
        f"select c.id, x.v from demo.customers c, lateral (select {JM} as v) x",
        "java_method",
        "lateral-subquery",
    ),
    hostile(
        f"select id, t from demo.customers lateral view explode(array({JM})) e as t",
        "java_method",
        "lateral-view-explode-arg",
    ),
    hostile(
        "select id from demo.customers lateral view java_method('a', 'b') e as t",
        "java_method",
        "lateral-view-generator",
    ),
    hostile(f"select transform(tags, x -> {JM}) from demo.customers", "java_method", "lambda-transform"),
    hostile(
        "select filter(tags, x -> reflect('a', 'b') = x) from demo.customers", "reflect", "lambda-filter"
    ),
    hostile(
        f"select aggregate(tags, '', (acc, x) -> concat(acc, {JM})) from demo.customers",
        "java_method",
        "lambda-aggregate",
    ),
    hostile(
        "select exists(tags, x -> try_reflect('a', 'b') is null) from demo.customers",
        "try_reflect",
        "lambda-exists",
    ),
    hostile(
        f"select zip_with(tags, tags, (x, y) -> {JM}) from demo.customers", "java_method", "lambda-zip_with"
    ),
    hostile(
        f"select sum(amount) over (partition by {JM} order by ordered_at) from demo.orders",
        "java_method",
        "window-partition",
    ),
    hostile(
        "select row_number() over (order by reflect('a', 'b')) from demo.orders",
        "reflect",
        "window-order",
    ),
    hostile(
        f"select sum(amount) over w from demo.orders window w as (partition by {JM})",
        "java_method",
        "named-window",
    ),
    hostile(
        f"select case when amount > 1 then {JM} else 'x' end from demo.orders", "java_method", "case-then"
    ),
    hostile(f"select case {JM} when 'x' then 1 end from demo.orders", "java_method", "case-operand"),
    hostile(f"select case when {JM} = 'x' then 1 end from demo.orders", "java_method", "case-when"),
    hostile(f"select cast({JM} as string) from demo.orders", "java_method", "cast"),
    hostile("select cast(reflect('a', 'b') as int) + 1 from demo.orders", "reflect", "cast-in-arithmetic"),
    hostile(f"select try_cast({JM} as int) from demo.orders", "java_method", "try_cast"),
    hostile(f"select {JM}::string from demo.orders", "java_method", "double-colon-cast"),
    hostile(
        f"select id from demo.customers union all select {JM} from demo.orders", "java_method", "union-all"
    ),
    hostile("select id from demo.customers except select reflect('a', 'b')", "reflect", "except"),
    hostile(f"select id from demo.customers intersect select {JM}", "java_method", "intersect"),
    hostile(
        f"select upper(lower(concat('x', trim({JM})))) from demo.customers", "java_method", "nested-args"
    ),
    hostile(f"select named_struct('v', {JM}) from demo.customers", "java_method", "named_struct"),
    hostile("select map('k', reflect('a', 'b')) from demo.customers", "reflect", "map"),
    hostile(f"select array(struct({JM})) from demo.customers", "java_method", "array-of-struct"),
    hostile(f"select id from demo.customers group by id, {JM}", "java_method", "group-by"),
    hostile(
        "select id from demo.customers group by id having max(reflect('a', 'b')) > ''", "reflect", "having"
    ),
    hostile(f"select id from demo.customers order by {JM}", "java_method", "order-by"),
    hostile(
        f"select * from demo.customers c join demo.orders o on c.id = o.customer_id and o.status = {JM}",
        "java_method",
        "join-condition",
    ),
    hostile(f"select id from demo.customers distribute by {JM}", "java_method", "distribute-by"),
    hostile(
        f"select count(*) filter (where name = {JM}) from demo.customers", "java_method", "aggregate-filter"
    ),
    hostile(f"select * from demo.customers limit (select length({JM}))", "java_method", "limit-subquery"),
    hostile(
        f"select * from demo.orders pivot (sum(amount) for status in ('open', {JM}))",
        "java_method",
        "pivot",
    ),
    # -- string tricks: a string stays a string, a name built from strings is refused -----------------
    hostile(
        "select * from demo.customers where name = 'x\\' ' , java_method('a', 'b') --'",
        "java_method",
        "backslash-quote-escape",
    ),
    hostile("select * from identifier('demo.' || 'customers')", "identifier", "identifier-clause"),
    hostile("execute immediate 'select java_' || 'method(1)'", "execute", "execute-immediate-concat"),
    hostile("select ${spark.app.name} from demo.customers", "${...}", "variable-substitution"),
    hostile("select '${env:DATABASE_URL}' as v from demo.customers", "${...}", "env-substitution-in-string"),
    hostile(
        "select * from demo.customers where name = '${system:user.name}'", "${...}", "system-substitution"
    ),
    # -- other functions that read outside the tables or leak ------------------------------------------
    hostile("select input_file_name() from demo.customers", "input_file_name", "input_file_name"),
    hostile(
        "select input_file_block_start() from demo.customers",
        "input_file_block_start",
        "input_file_block_start",
    ),
    hostile(
        "select input_file_block_length() from demo.customers",
        "input_file_block_length",
        "input_file_block_length",
    ),
    hostile("select _metadata.file_path from demo.customers", "_metadata", "metadata-column"),
    hostile("select c._metadata from demo.customers c", "_metadata", "qualified-metadata-column"),
    hostile("select `_metadata`.file_name from demo.customers", "_metadata", "backticked-metadata-column"),
    hostile("select version() from demo.customers", "version", "version"),
    hostile("select xpath('<a><b>1</b></a>', 'a/b') from demo.customers", "xpath", "xpath"),
    hostile("select xpath_string(profile, '//b') from demo.customers", "xpath_string", "xpath_string"),
    hostile("select from_xml(profile, 'a int') from demo.customers", "from_xml", "from_xml"),
    hostile("select from_avro(profile, '{}') from demo.customers", "from_avro", "from_avro"),
    hostile("select to_avro(name) from demo.customers", "to_avro", "to_avro"),
    hostile(
        "select from_protobuf(profile, 'M', '/tmp/descriptor.desc') from demo.customers",
        "from_protobuf",
        "from_protobuf",
    ),
    hostile("select secret('scope', 'key') from demo.customers", "secret", "secret"),
    hostile("select python_worker_logs() from demo.customers", "python_worker_logs", "python_worker_logs"),
    hostile("select my_hive_udf(name) from demo.customers", "my_hive_udf", "unknown-udf"),
    hostile("select mydb.myudf(name) from demo.customers", "myudf", "catalog-udf"),
    hostile("select builtin.upper(name) from demo.customers", "builtin.upper", "qualified-allowed-name"),
    hostile("select * from mydb.range(10)", "mydb.range", "qualified-table-function"),
    hostile("select /*+ evil_hint(c) */ * from demo.customers c", "hint evil_hint", "unknown-hint"),
    hostile(f"select /*+ REPARTITION({JM}) */ * from demo.customers", "java_method", "inside-a-hint"),
    # -- tables that are files -------------------------------------------------------------------------
    hostile("select * from read_files('/etc/passwd')", "read_files", "read_files"),
    hostile("select * from parquet.`/var/lib/lakewarden/other`", "parquet.`path`", "parquet-path"),
    hostile("select * from csv.`file:///etc/passwd`", "csv.`path`", "csv-path"),
    hostile("select * from json.`/etc/x.json`", "json.`path`", "json-path"),
    hostile("select * from text.`/proc/self/environ`", "text.`path`", "text-path"),
    hostile("select * from delta.`/lake/someone-else`", "delta.`path`", "delta-path"),
    hostile(
        "select * from `org.apache.spark.sql.parquet`.`/x`",
        "org.apache.spark.sql.parquet.`path`",
        "class-name-path",
    ),
    hostile(
        "select c.id from demo.customers c join text.`/etc/hostname` h on true",
        "text.`path`",
        "path-in-join",
    ),
    # -- script transform -------------------------------------------------------------------------------
    hostile(
        "select transform(name) using 'cat' as (n) from demo.customers", "transform using", "script-transform"
    ),
    hostile(
        "SELECT TRANSFORM(id, name) USING '/bin/sh -c id' FROM demo.customers",
        "transform using",
        "script-transform-shell",
    ),
    # -- statements -------------------------------------------------------------------------------------
    hostile(
        "CREATE TEMPORARY FUNCTION f AS 'com.example.Evil'", "create function", "create-temporary-function"
    ),
    hostile(
        "CREATE FUNCTION f AS 'com.example.Evil' USING JAR '/tmp/x.jar'", "create function", "create-function"
    ),
    hostile(
        "create temporary function f(x int) returns int return x", "create function", "create-sql-function"
    ),
    hostile("ADD JAR /tmp/evil.jar", "add jar", "add-jar"),
    hostile("ADD FILE /tmp/evil.py", "add file", "add-file"),
    hostile("ADD ARCHIVE /tmp/evil.zip", "add archive", "add-archive"),
    hostile("SET spark.sql.variable.substitute=true", "set", "set"),
    hostile("RESET", "reset", "reset"),
    hostile("CACHE TABLE demo.customers", "cache", "cache"),
    hostile("UNCACHE TABLE demo.customers", "uncache", "uncache"),
    hostile("LOAD DATA LOCAL INPATH '/etc/passwd' INTO TABLE demo.customers", "load data", "load-data"),
    hostile("INSERT INTO demo.customers SELECT * FROM demo.customers", "insert", "insert"),
    hostile(
        "INSERT OVERWRITE DIRECTORY '/tmp/out' SELECT * FROM demo.customers", "insert", "insert-directory"
    ),
    hostile("with c as (select 1 as id) insert into demo.customers select * from c", "insert", "cte-insert"),
    hostile("EXPLAIN SELECT * FROM demo.customers", "explain", "explain"),
    hostile(f"EXPLAIN EXTENDED SELECT {JM}", "explain", "explain-extended"),
    hostile("DROP TABLE demo.customers", "drop", "drop"),
    hostile("CREATE TABLE x AS SELECT * FROM demo.customers", "create table", "ctas"),
    hostile("CREATE TEMPORARY VIEW v AS SELECT 1", "create view", "create-view"),
    hostile("ALTER TABLE demo.customers SET LOCATION '/tmp'", "alter", "alter"),
    hostile("DELETE FROM demo.customers", "delete", "delete"),
    hostile("DECLARE VARIABLE v INT", "declare", "declare"),
    hostile("select 1; add jar /tmp/evil.jar", "add jar", "second-statement"),
    hostile("select 1; select 2", "multiple statements", "two-queries"),
    hostile("SHOW TABLES", "show", "show"),
    hostile("USE other", "use", "use"),
    hostile("MSCK REPAIR TABLE demo.customers", "msck repair", "msck"),
]

NORMAL = [
    pytest.param("select * from demo.customers limit 10", id="star"),
    pytest.param("select count(*) from demo.orders", id="count-star"),
    pytest.param(
        "select count(distinct customer_id), approx_count_distinct(customer_id) from demo.orders",
        id="count-distinct",
    ),
    pytest.param(
        "select status, sum(amount) as total, avg(amount), min(amount), max(amount) from demo.orders "
        "group by status having sum(amount) > 10 order by total desc",
        id="group-by-having",
    ),
    pytest.param(
        "select approx_percentile(amount, 0.5), percentile_approx(amount, array(0.25, 0.75)), "
        "percentile(amount, 0.9), median(amount) from demo.orders",
        id="percentiles",
    ),
    pytest.param(
        "select c.name, count(o.order_id) from demo.customers c left join demo.orders o "
        "on o.customer_id = c.id group by c.name",
        id="left-join",
    ),
    pytest.param(
        "select * from demo.customers c join demo.orders o using (id)",
        id="join-using",
    ),
    pytest.param(
        "select c.id, e.kind from demo.customers c inner join demo.events e on e.customer_id = c.id "
        "where e.ts >= timestamp '2024-01-01 00:00:00'",
        id="inner-join-timestamp-literal",
    ),
    pytest.param(
        "select customer_id, amount, row_number() over (partition by customer_id order by ordered_at desc) as rn, "
        "sum(amount) over (partition by customer_id order by ordered_at rows between unbounded preceding and current row) "
        "from demo.orders",
        id="window-functions",
    ),
    pytest.param(
        "select customer_id, lag(amount) over w, lead(amount, 1, 0) over w, dense_rank() over w, "
        "ntile(4) over w, percent_rank() over w, cume_dist() over w from demo.orders "
        "window w as (partition by customer_id order by ordered_at)",
        id="named-window",
    ),
    pytest.param(
        "with recent as (select * from demo.orders where ordered_at > current_timestamp() - interval 30 days), "
        "per_customer as (select customer_id, sum(amount) as total from recent group by customer_id) "
        "select c.name, p.total from per_customer p join demo.customers c on c.id = p.customer_id",
        id="ctes",
    ),
    pytest.param(
        "select date_trunc('month', ordered_at) as month, date_format(ordered_at, 'yyyy-MM'), "
        "to_date(ordered_at), year(ordered_at), month(ordered_at), dayofweek(ordered_at), "
        "datediff(current_date(), to_date(ordered_at)), date_add(to_date(ordered_at), 7), "
        "add_months(to_date(ordered_at), 1), last_day(ordered_at), weekofyear(ordered_at), "
        "unix_timestamp(ordered_at), from_unixtime(0), to_timestamp('2024-01-01'), "
        "extract(hour from ordered_at), months_between(ordered_at, current_timestamp()) from demo.orders",
        id="date-functions",
    ),
    pytest.param(
        "select id, tag from demo.customers lateral view explode(tags) t as tag",
        id="lateral-view-explode",
    ),
    pytest.param(
        "select id, pos, tag from demo.customers lateral view outer posexplode(tags) t as pos, tag",
        id="lateral-view-posexplode",
    ),
    pytest.param("select explode(tags) as tag from demo.customers", id="explode-select"),
    pytest.param(
        "select order_id, item.sku, item.qty * item.price from demo.orders lateral view explode(items) y as item "
        "union all select order_id, sku, qty * price from demo.orders lateral view inline(items) x as sku, qty, price",
        id="inline-and-explode-structs",
    ),
    pytest.param(
        "select case when amount > 100 then 'big' when amount > 10 then 'medium' else 'small' end as size, "
        "case status when 'open' then 1 else 0 end from demo.orders",
        id="case",
    ),
    pytest.param(
        "select cast(amount as int), cast(order_id as string), try_cast(status as int), "
        "amount::decimal(10, 2), cast(ordered_at as date) from demo.orders",
        id="casts",
    ),
    pytest.param(
        "select coalesce(email, 'none'), nvl(country, '?'), ifnull(name, ''), nullif(country, ''), "
        "nvl2(email, 1, 0), if(email is null, 'no', 'yes'), isnull(email) from demo.customers",
        id="null-handling",
    ),
    pytest.param(
        "select upper(name), lower(name), initcap(name), length(name), trim(name), substring(name, 1, 3), "
        "concat(name, ' <', email, '>'), concat_ws(',', tags), split(email, '@')[1], "
        "regexp_extract(email, '@(.*)$', 1), regexp_replace(name, '[aeiou]', '*'), lpad(cast(id as string), 8, '0'), "
        "replace(name, ' ', '_'), name || '!', instr(email, '@'), left(name, 2), reverse(name) from demo.customers",
        id="string-functions",
    ),
    pytest.param(
        "select * from demo.customers where name like 'A%' and email rlike '@example\\\\.com$' "
        "and country in ('DE', 'FR') and id between 1 and 100 and email is not null and not name ilike 'x%'",
        id="predicates",
    ),
    pytest.param(
        "select get_json_object(profile, '$.plan'), from_json(profile, 'plan string, seats int').seats, "
        "json_tuple(profile, 'plan', 'seats'), to_json(named_struct('id', id)), schema_of_json('{\"a\": 1}'), "
        "json_array_length('[1, 2]'), json_object_keys(profile) from demo.customers",
        id="json",
    ),
    pytest.param(
        "select md5(email), sha2(email, 256), sha1(email), hash(email), xxhash64(email), crc32(email), "
        "base64(email) from demo.customers",
        id="hashes",
    ),
    pytest.param(
        "select size(tags), array_contains(tags, 'vip'), sort_array(tags), array_distinct(tags), "
        "array_join(tags, ';'), element_at(tags, 1), tags[0], slice(tags, 1, 2), flatten(array(tags, tags)), "
        "array_union(tags, array('x')), arrays_zip(tags, tags), sequence(1, 3) from demo.customers",
        id="arrays",
    ),
    pytest.param(
        "select map_keys(attrs), map_values(attrs), attrs['tier'], element_at(attrs, 'tier'), "
        "map_contains_key(attrs, 'tier'), map_from_arrays(array('a'), array('b')), map('k', name), "
        "str_to_map('a:1,b:2') from demo.customers",
        id="maps",
    ),
    pytest.param(
        "select named_struct('id', id, 'name', name) as s, struct(id, name).id, array(struct(id)) "
        "from demo.customers",
        id="structs",
    ),
    pytest.param(
        "select transform(tags, t -> upper(t)), filter(tags, t -> t != 'x'), exists(tags, t -> t = 'vip'), "
        "forall(tags, t -> length(t) > 0), aggregate(tags, 0, (acc, t) -> acc + length(t)), "
        "zip_with(tags, tags, (a, b) -> concat(a, b)), map_filter(attrs, (k, v) -> v is not null), "
        "transform_values(attrs, (k, v) -> upper(v)), array_sort(tags) from demo.customers",
        id="higher-order-functions",
    ),
    pytest.param(
        "select customer_id, collect_list(status), collect_set(status), max_by(status, amount), "
        "min_by(status, amount), count_if(amount > 10), bool_or(amount > 100), any_value(status), "
        "first(status), last(status), stddev(amount), variance(amount), corr(amount, order_id), mode(status) "
        "from demo.orders group by customer_id",
        id="aggregates",
    ),
    pytest.param(
        "select round(amount, 2), floor(amount), ceil(amount), abs(amount), pow(amount, 2), sqrt(abs(amount)), "
        "ln(amount + 1), log10(amount + 1), mod(order_id, 7), order_id % 7, order_id div 2, greatest(amount, 1), "
        "least(amount, 1), sign(amount), format_number(amount, 2), rand(), uuid() from demo.orders",
        id="math",
    ),
    pytest.param(
        "select status, count(*) from demo.orders group by rollup(status) "
        "union all select status, count(*) from demo.orders group by cube(status)",
        id="rollup-cube-union",
    ),
    pytest.param(
        "select customer_id from demo.orders intersect select id from demo.customers "
        "except select customer_id from demo.events",
        id="intersect-except",
    ),
    pytest.param(
        "select * from demo.customers c where exists (select 1 from demo.orders o where o.customer_id = c.id) "
        "and c.id not in (select customer_id from demo.events where kind = 'churn')",
        id="correlated-subqueries",
    ),
    pytest.param(
        "select * from (select customer_id, sum(amount) total from demo.orders group by customer_id) t "
        "where total > (select avg(amount) from demo.orders)",
        id="derived-table-scalar-subquery",
    ),
    pytest.param("select * from values (1, 'a'), (2, 'b') as v(id, name)", id="values-in-from"),
    pytest.param("values (1, 'a'), (2, 'b')", id="values-statement"),
    pytest.param("select id from range(10)", id="range"),
    pytest.param(
        "select /*+ BROADCAST(c) */ c.name, o.amount from demo.customers c join demo.orders o on o.customer_id = c.id",
        id="broadcast-hint",
    ),
    pytest.param(
        "select /*+ REPARTITION(4), COALESCE(2) */ * from demo.orders",
        id="partition-hints",
    ),
    pytest.param(
        "select current_date(), current_timestamp(), current_user(), current_database(), "
        "spark_partition_id(), monotonically_increasing_id() from demo.customers",
        id="session-facts",
    ),
    pytest.param(
        "select kind, count(*) filter (where ts > timestamp '2024-01-01') from demo.events group by kind",
        id="aggregate-filter",
    ),
    pytest.param(
        "select first(status) ignore nulls over (partition by customer_id order by ordered_at) from demo.orders",
        id="ignore-nulls",
    ),
    pytest.param(
        "select * from demo.orders pivot (sum(amount) for status in ('open' as open, 'paid' as paid))",
        id="pivot",
    ),
    pytest.param(
        "select w.start, count(*) from (select window(ts, '1 hour') as w from demo.events) group by w.start",
        id="time-window",
    ),
    pytest.param(
        "-- comment line\nselect /* inline */ id from demo.customers -- trailing\n where id > 0",
        id="comments",
    ),
    pytest.param(
        "select 'java_method(1)' as text, 'reflect' as reflect_word from demo.customers",
        id="forbidden-names-inside-strings",
    ),
    pytest.param("select user, version from demo.accounts", id="columns-named-like-functions"),
    pytest.param(
        "select aes_encrypt(email, '0000111122223333'), assert_true(id > 0), url_decode(name), "
        "url_encode(name), parse_url('https://x.org/a?b=1', 'HOST') from demo.customers where id > 0",
        id="crypto-assert-url",
    ),
]


@pytest.mark.parametrize(("sql", "function"), HOSTILE)
def test_hostile_queries_are_refused_naming_the_function(sql, function):
    with pytest.raises(SqlNotAllowed) as refused:
        check_query(sql)

    assert refused.value.function == function
    assert function.lower() in str(refused.value).lower()
    assert "not allowed in workbench queries" in str(refused.value)


@pytest.mark.parametrize("sql", NORMAL)
def test_normal_workbench_queries_pass(sql):
    check_query(sql)


def test_there_are_enough_cases():
    assert len(HOSTILE) >= 60
    assert len(NORMAL) >= 30


def test_the_issue_query_message_names_the_function():
    with pytest.raises(SqlNotAllowed, match="function java_method is not allowed in workbench queries"):
        check_query(f"select {JM} as v from demo.customers limit 1")


def test_refusals_are_value_errors_caught_together():
    with pytest.raises(ValueError):
        check_query(f"select {JM}")
    with pytest.raises(SqlPolicyError):  # one except clause for both kinds of refusal
        check_query(f"select {JM}")
    with pytest.raises(SqlPolicyError):
        check_query("select from where")


def test_statement_refusals_say_only_queries_run():
    with pytest.raises(SqlNotAllowed, match="ADD JAR statements are not allowed.*only queries \\(SELECT"):
        check_query("ADD JAR /tmp/evil.jar")


@pytest.mark.parametrize(
    "sql",
    [
        pytest.param("selec * form demo.customers", id="typo"),
        pytest.param("select * from demo.customers where (", id="unclosed-paren"),
        pytest.param("select 'unclosed from demo.customers", id="unclosed-quote"),
        pytest.param("select 1 # hash comment\n from demo.customers", id="hash-comment"),
        pytest.param("", id="empty"),
        pytest.param("  ;  ", id="only-semicolon"),
        pytest.param("select " + "upper(" * 200 + "name" + ")" * 200 + " from demo.customers", id="too-deep"),
    ],
)
def test_unparsable_text_is_refused_with_a_clear_message(sql):
    with pytest.raises(SqlUnparsable) as refused:
        check_query(sql)

    assert isinstance(refused.value, ValueError)
    assert isinstance(refused.value, SqlPolicyError)
    assert not isinstance(refused.value, SqlNotAllowed)
    assert re.search(r"empty|does not parse|nested too deeply", str(refused.value))


def test_an_already_parsed_expression_is_checked_the_same_way():
    check_query(sqlglot.parse_one("select upper(name) from demo.customers", read="spark"))
    with pytest.raises(SqlNotAllowed) as refused:
        check_query(sqlglot.parse_one(f"select * from (select {JM}) x", read="spark"))
    assert refused.value.function == "java_method"
    with pytest.raises(SqlNotAllowed) as refused:
        check_query(sqlglot.parse_one("CACHE TABLE demo.customers", read="spark"))
    assert refused.value.function == "cache"


def test_an_expression_built_in_code_is_checked_too():
    built = exp.select(exp.Anonymous(this="reflect", expressions=[exp.Literal.string("a")])).from_("t")
    with pytest.raises(SqlNotAllowed) as refused:
        check_query(built)
    assert refused.value.function == "reflect"


def test_parse_query_returns_the_statement():
    statement = parse_query("select id from demo.customers;")
    assert isinstance(statement, exp.Select)


def test_the_refused_names_are_not_in_the_allow_list():
    assert not set(REFUSED_FUNCTIONS) & ALLOWED_FUNCTIONS
    for name in ("java_method", "reflect", "try_reflect", "input_file_name", "version", "xpath", "from_avro"):
        assert name not in ALLOWED_FUNCTIONS
    assert all(name == name.lower() for name in ALLOWED_FUNCTIONS | ALLOWED_HINTS)


@pytest.mark.parametrize("name", sorted(REFUSED_FUNCTIONS))
def test_every_refused_builtin_is_refused_when_called(name):
    with pytest.raises(SqlNotAllowed) as refused:
        check_query(f"select {name}('a', 'b') from demo.customers")
    assert refused.value.function == name
    assert REFUSED_FUNCTIONS[name] in str(refused.value)


# --- against a real Spark session -------------------------------------------------------------------

TABLES = {
    "demo.customers": (
        "id bigint, name string, email string, country string, signup_date date, tags array<string>, "
        "attrs map<string, string>, profile string",
        [
            (
                1,
                "Ada",
                "ada@example.com",
                "DE",
                "2024-01-02",
                ["vip", "beta"],
                {"tier": "gold"},
                '{"plan": "pro", "seats": 3}',
            )
        ],
    ),
    "demo.orders": (
        "order_id bigint, id bigint, customer_id bigint, amount double, status string, ordered_at timestamp, "
        "items array<struct<sku: string, qty: int, price: double>>",
        [(10, 10, 1, 12.5, "open", "2024-02-03 04:05:06", [("sku-1", 2, 6.25)])],
    ),
    "demo.events": (
        "event_id bigint, customer_id bigint, kind string, ts timestamp, payload string",
        [(100, 1, "login", "2024-02-03 04:05:06", "{}")],
    ),
    "demo.accounts": ("user string, version int", [("ada", 1)]),
}


@pytest.fixture(scope="module")
def query_session(spark):
    """A child session of the shared one (own SQL conf and temp views) set up the way workbench
    queries should run, with each demo table as a temp view of one row."""
    import datetime

    session = spark.newSession()
    for key, value in SPARK_QUERY_CONF.items():
        session.conf.set(key, value)
    for name, (schema, rows) in TABLES.items():
        converted = [
            tuple(
                datetime.datetime.fromisoformat(v)
                if isinstance(v, str) and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", v)
                else datetime.date.fromisoformat(v)
                if isinstance(v, str) and re.fullmatch(r"\d{4}-\d\d-\d\d", v)
                else v
                for v in row
            )
            for row in rows
        ]
        session.createDataFrame(converted, schema).createOrReplaceTempView(_view(name))
    return session


def _view(table: str) -> str:
    return "lw_" + table.replace(".", "_")


def _spark_sql(sql: str) -> str:
    """What the cache planner sends to Spark: the sqlglot tree re-generated in the Spark dialect,
    managed tables replaced by temp views (CTE names left alone)."""
    statement = parse_query(sql)
    ctes = {cte.alias_or_name.lower() for cte in statement.find_all(exp.CTE)}
    for node in list(statement.find_all(exp.Table)):
        if node.find_ancestor(exp.Hint):  # BROADCAST(c) names an alias, not a table
            continue
        reference = ".".join(p for p in (node.catalog, node.db, node.name) if p).lower()
        if reference in TABLES:
            node.replace(exp.to_table(_view(reference)).as_(node.alias or node.name, quoted=True))
        else:
            assert not isinstance(node.this, exp.Identifier) or reference in ctes, reference
    return statement.sql(dialect="spark")


@pytest.mark.spark
def test_accepted_queries_resolve_in_spark(query_session):
    failures = []
    for param in NORMAL:
        (sql,) = param.values
        try:
            assert query_session.sql(_spark_sql(sql)).schema is not None  # parsed, analysed: names resolve
        except Exception as error:  # collect every failure, report them together
            failures.append(f"{param.id}: {str(error).splitlines()[0][:300]}")
    assert not failures, "\n".join(failures)


@pytest.mark.spark
def test_every_allowed_function_exists_in_spark(spark):
    registered = {row[0].lower() for row in spark.sql("SHOW FUNCTIONS").collect()}
    missing = sorted(ALLOWED_FUNCTIONS - SYNTAX_FUNCTIONS - registered)
    assert not missing, f"allowed but unknown to Spark: {missing}"
    refused_but_unknown = sorted(set(REFUSED_FUNCTIONS) - registered - {"read_files", "secret", "identifier"})
    assert not refused_but_unknown, refused_but_unknown


@pytest.mark.spark
def test_the_spark_settings_exist_and_close_the_doors(spark, query_session):
    from pyspark.errors import AnalysisException

    for key, value in SPARK_QUERY_CONF.items():
        assert spark.conf.isModifiable(key), key
        assert query_session.conf.get(key) == value
    for key in SPARK_STATIC_CONF:
        spark.conf.get(key)  # a static key Spark knows (it raises SQL_CONF_NOT_FOUND otherwise)
        assert not spark.conf.isModifiable(key)

    # With the settings on, Spark itself neither substitutes variables nor reads files by path.
    assert query_session.sql("select '${env:HOME}' as v").collect()[0].v == "${env:HOME}"
    with pytest.raises(AnalysisException):
        query_session.sql("select * from text.`/etc/hostname`").collect()


@pytest.mark.spark
def test_the_workers_session_refuses_reflection_even_past_the_parser(spark):
    """Every Lakewarden session is built with the policy's settings: reflection is refused by
    Spark itself, variables are not substituted and files are not read by path."""
    from pyspark.errors import AnalysisException

    assert spark.conf.get("spark.sql.reflect.allowList") == "(?!)"
    for sql in (
        "select java_method('java.lang.System', 'getenv', 'HOME')",
        "select reflect('java.lang.System', 'getenv', 'HOME')",
    ):
        with pytest.raises(Exception, match="METHOD_NOT_ALLOWED|not allowed"):
            spark.sql(sql).collect()
    assert spark.sql("select '${env:HOME}' as v").collect()[0].v == "${env:HOME}"
    with pytest.raises(AnalysisException):
        spark.sql("select * from text.`/etc/hostname`").collect()


# --- the check's cost grows with the query's size, not its square (issue 29, item 9) ---------------


def _chain(operator: str, size: int) -> str:
    """``select * from demo.customers where 1=1 <operator> 1=1 ...`` of about ``size`` characters."""
    head = "select * from demo.customers where 1=1"
    term = f" {operator} 1=1"
    return head + term * ((size - len(head)) // len(term))


def test_a_64_kib_chain_of_and_is_checked_and_accepted():
    sql = _chain("and", 64 * 1024)

    check_query(sql)  # 8 KB of this took 26 s, 64 KiB hours: every AND rendered all below it

    assert len(sql) > 65_000


def test_a_forbidden_call_at_the_bottom_of_a_64_kib_chain_is_refused():
    sql = _chain("or", 64 * 1024).replace("1=1", f"{JM} = 1", 1)

    with pytest.raises(SqlNotAllowed) as refused:
        check_query(sql)

    assert refused.value.function == "java_method"


@pytest.mark.parametrize("terms", [100, 400])
def test_each_node_is_rendered_for_one_function_only(monkeypatch, terms):
    """Judging a function renders it with the functions below it cut off: over a chain of RLIKE
    (a function in sqlglot's tree, an operator in Spark) the nodes rendered grow with the chain."""
    from processes import sql_policy

    rendered = []

    def outline(node):
        copy = real(node)
        rendered.append(sum(1 for _ in copy.walk()))
        return copy

    real = sql_policy._outline
    monkeypatch.setattr(sql_policy, "_outline", outline)
    sql = "select name from demo.customers where " + " rlike ".join(["name"] * terms)

    check_query(sql)

    nodes = sum(1 for _ in parse_query(sql).walk())
    assert len(rendered) == 2 * (terms - 1)  # each RLIKE, in the parsed and the regenerated tree
    assert sum(rendered) <= 2 * 4 * nodes  # before: about terms² / 2 nodes per tree
