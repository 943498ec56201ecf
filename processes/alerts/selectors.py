"""Alert reads the console page and the API share."""

from __future__ import annotations

from django.db.models import CharField, F, Func, Q, QuerySet, Value
from django.db.models.functions import Cast

from storage.models import Table

#: The subjects' kinds that name a table (``table:8``, ``process:8:rewrite``): ``subject_table_id``
#: in processes/alerts/evaluation.py reads the same shape in Python.
TABLE_SUBJECTS = ("table", "process")


def _part(number: int) -> Func:
    return Func(F("subject"), Value(":"), Value(number), function="split_part", output_field=CharField())


def episodes_about_tables_q(tables: QuerySet[Table]) -> Q:
    """The condition on ``AlertEpisode`` (annotated by ``with_subject_table``) of the episodes whose
    subject is one of ``tables``, whoever's rule it is."""
    ids = tables.order_by().annotate(id_text=Cast("pk", CharField())).values("id_text")
    return Q(subject_kind__in=TABLE_SUBJECTS, subject_table__in=ids)


def with_subject_table(episodes: QuerySet) -> QuerySet:
    """``episodes`` with ``subject_kind`` and ``subject_table`` (the table's id, as text) read from
    the subject in the database, so a list can be narrowed to tables without reading every row."""
    return episodes.annotate(subject_kind=_part(1), subject_table=_part(2))
