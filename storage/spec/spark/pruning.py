"""Column pruning for the ``lakewarden`` data source, which Spark cannot prune itself.

Spark's Python data sources have no column pruning (``PythonScanBuilder`` only takes filters), so
a query over a table read through the data source would read, decode and ship every column. This
module reads what a query needs from Spark's own optimizer: the optimized plan of the query over
full-width relations says, for each ``lakewarden`` relation, which of its columns the operators
above it reference (``needed_columns``); the caller then reads each table with only those columns
(``read_table(columns=...)``) and plans the query again.

The walk is conservative. A column is needed when an operator above the relation references it,
when the query returns it, when a filter Spark pushed into the scan names it (those filters leave
the plan: they are read from the scan by reflection), or when the relation sits under an operator
this module does not know (a union, a command...), which needs every column. Anything unexpected
(another Spark version's plan classes) means every column. A narrowed relation cannot change an
answer: the query is analysed again over the narrowed tables, and a column it names that is
missing is an analysis error (the caller then reads every column), never a null.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

logger = logging.getLogger(__name__)

# Operators whose output is their children's (some of it) plus, for some, columns of their own:
# what their parent needs of a child's columns stays needed, plus what they reference.
_PASS_THROUGH = frozenset(
    {
        "Filter",
        "Sort",
        "Join",
        "GlobalLimit",
        "LocalLimit",
        "Limit",
        "Offset",
        "Tail",
        "Sample",
        "Repartition",
        "RepartitionByExpression",
        "RebalancePartitions",
        "Window",
        "Generate",
        "SubqueryAlias",
        "View",
        "ResolvedHint",
        "WithWindowDefinition",
        "Deduplicate",
    }
)
# Operators whose output is made of expressions over the child: the child gives what they reference.
_PROJECTING = frozenset({"Project", "Aggregate"})
_SCAN_RELATIONS = frozenset({"DataSourceV2ScanRelation", "DataSourceV2Relation"})

RelationKey = tuple[str, str]  # (location option, instant option or "")


def needed_columns(frame: Any) -> dict[RelationKey, set[str] | None]:
    """For each ``lakewarden`` relation in ``frame``'s optimized plan, keyed by its ``location``
    and ``instant`` options: the names of the columns the query needs, or None for all of them.
    Relations with the same key (a table joined with itself) get the union of their needs.
    Empty when the plan cannot be read (the caller then prunes nothing)."""
    try:
        plan = frame._jdf.queryExecution().optimizedPlan()
        found: dict[RelationKey, set[str] | None] = {}
        _walk(plan, None, found)
        return found
    except Exception as error:  # another Spark's plan classes, Spark Connect: prune nothing
        logger.info("column pruning skipped: the query plan could not be read (%s)", error)
        return {}


def sql_over_views(
    spark: SparkSession, sql: str, readers: Mapping[str, Callable[[list[str] | None], DataFrame]]
) -> DataFrame:
    """``sql`` planned over temporary views, each ``readers[view](columns)`` (None: every column),
    reading through the data source only the columns the query needs.

    Each view is first registered with every column and the query planned; the views read
    through the data source whose plan needs fewer columns are read again with those columns and
    the query planned again. Should that second analysis refuse the query, it is planned over
    the full views (and the reason logged): pruning only ever saves work."""
    full = {view: read(None) for view, read in readers.items()}
    for view, frame in full.items():
        frame.createOrReplaceTempView(view)
    frame = spark.sql(sql)
    needs = needed_columns(frame)
    narrowed = {}
    for view, view_frame in full.items():
        columns = _narrowed_columns(view_frame, needs)
        if columns is not None:
            narrowed[view] = readers[view](columns)
    if not narrowed:
        return frame
    for view, view_frame in narrowed.items():
        view_frame.createOrReplaceTempView(view)
    try:
        return spark.sql(sql)
    except Exception as error:
        logger.warning("column pruning refused (%s): reading every column", str(error).splitlines()[0])
        for view in narrowed:
            full[view].createOrReplaceTempView(view)
        return spark.sql(sql)


def _narrowed_columns(
    view_frame: DataFrame, needs: Mapping[RelationKey, set[str] | None]
) -> list[str] | None:
    """The columns of a data-source view the query needs, in the view's order, when fewer than
    all; None when the view is read otherwise (Spark prunes it) or needs every column."""
    keys = _relation_keys(view_frame)
    if len(keys) != 1 or keys[0] not in needs:
        return None
    wanted = needs[keys[0]]
    if wanted is None:
        return None
    columns = [name for name in view_frame.columns if name in wanted]
    if len(columns) == len(view_frame.columns):
        return None
    # a query that needs no column (count(*)) still reads one, to carry the row count
    return columns or view_frame.columns[:1]


def _relation_keys(frame: Any) -> list[RelationKey]:
    """The keys of the ``lakewarden`` relations of ``frame``'s analyzed plan (analysis only: no
    optimizer, so no filter push-down round trip to a Python worker)."""
    try:
        found: dict[RelationKey, set[str] | None] = {}
        _walk(frame._jdf.queryExecution().analyzed(), None, found)
        return list(found)
    except Exception:
        return []


def _walk(node: Any, needed: set[int] | None, found: dict[RelationKey, set[str] | None]) -> None:
    """``needed``: the expression ids of ``node``'s output its consumers need (None: all)."""
    kind = node.getClass().getSimpleName()
    for subquery in _seq(node.subqueries()):
        _walk(subquery, None, found)
    if kind in _SCAN_RELATIONS:
        _record(node, needed, found)
        return
    references = {_id(a) for a in _seq(node.references().toSeq())}
    for child in _seq(node.children()):
        if kind in _PROJECTING:
            child_needed: set[int] | None = references
        elif kind in _PASS_THROUGH and needed is not None:
            outputs = {_id(a) for a in _seq(child.output())}
            child_needed = references | (needed & outputs)
        else:
            child_needed = None  # a union, a command, an operator not known here: every column
        _walk(child, child_needed, found)


def _record(node: Any, needed: set[int] | None, found: dict[RelationKey, set[str] | None]) -> None:
    relation = node.relation() if node.getClass().getSimpleName() == "DataSourceV2ScanRelation" else node
    if relation.table().getClass().getSimpleName() != "PythonTable":
        return
    options = relation.options()
    location = options.get("location") or options.get("path")
    if not location:
        return
    key = (str(location), str(options.get("instant") or ""))
    names: set[str] | None = None
    if needed is not None:
        output = list(_seq(node.output()))
        names = {a.name() for a in output if _id(a) in needed}
        pushed = _pushed_filter_columns(node, [a.name() for a in output])
        names = None if pushed is None else names | pushed
    if key in found:
        before = found[key]
        found[key] = None if before is None or names is None else before | names
    else:
        found[key] = names


def _pushed_filter_columns(node: Any, names: list[str]) -> set[str] | None:
    """The columns the filters Spark pushed into the scan name (they are no longer in the plan);
    None when they cannot be read or named."""
    if node.getClass().getSimpleName() != "DataSourceV2ScanRelation":
        return set()  # not planned yet: nothing pushed
    scan = node.scan()
    try:
        field = scan.getClass().getDeclaredField("supportedFilters")
        field.setAccessible(True)
        filters = field.get(scan)
    except Exception:
        return None
    columns: set[str] = set()
    for spark_filter in filters or []:
        for reference in spark_filter.references():
            column = _top_level(str(reference), names)
            if column is None:
                return None
            columns.add(column)
    return columns


def _top_level(reference: str, names: list[str]) -> str | None:
    if reference in names:
        return reference
    unquoted = reference.strip("`")
    for name in names:
        if unquoted == name or reference.startswith(name + ".") or unquoted.startswith(name + "."):
            return name
    return None


def _id(attribute: Any) -> int:
    return int(attribute.exprId().id())


def _seq(scala_seq: Any) -> Iterator[Any]:
    for index in range(scala_seq.size()):
        yield scala_seq.apply(index)


__all__ = ["RelationKey", "needed_columns", "sql_over_views"]
