from __future__ import annotations

import functools
import math
import re
from html import escape as _escape
from urllib.parse import urlencode

from django import template
from django.templatetags.static import static
from django.urls import get_script_prefix, reverse
from django.utils import timezone
from django.utils.safestring import mark_safe
from django.utils.text import Truncator
from django.utils.timesince import timesince

from console.api.serializers import mask_secrets
from storage.models import format_choices

register = template.Library()

_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"]


@register.filter
def filesize(value) -> str:
    """Binary units, because file sizes in lakehouse settings (target-file-size) are in MiB."""
    try:
        size = float(value or 0)
    except (TypeError, ValueError):
        return "—"
    unit = 0
    while size >= 1024 and unit < len(_UNITS) - 1:
        size /= 1024
        unit += 1
    return f"{int(size)} {_UNITS[unit]}" if unit == 0 else f"{size:.1f} {_UNITS[unit]}"


#: A key or label naming a byte count: ``bytes``, ``bytes_in``, ``orphan_bytes``, "bytes out"...
_BYTES_KEY = re.compile(r"(^|[_\s-])bytes($|[_\s-])", re.IGNORECASE)


@register.filter
def fact(value, key="") -> str:
    """A value of a process's summary, preview or prediction as a person reads it: a byte count
    (its ``key`` names bytes) in binary units with the exact count on hover, a mapping as
    ``key: value`` pairs read the same way, a list as its items, nothing as a dash."""
    return mark_safe(_fact(value, str(key)))


@register.filter
def fact_label(key) -> str:
    """A summary's key as a person reads it (issue 34): ``files_added``, ``added-data-files`` and
    ``numAddedFiles`` read "files added", "added data files" and "num added files"."""
    words = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", str(key)).replace("_", " ").replace("-", " ")
    return " ".join(word if word.isupper() else word.lower() for word in words.split())


def _fact(value, key: str, depth: int = 0) -> str:
    if value is None:
        return "—"
    if _is_count(value) and _BYTES_KEY.search(key):
        return f'<span title="{int(value):,} bytes">{filesize(value)}</span>'
    if isinstance(value, dict):
        pairs = ", ".join(
            f"{_escape(fact_label(k))}: {_fact(v, str(k), depth + 1)}" for k, v in value.items()
        )
        return f"({pairs})" if depth else pairs
    if isinstance(value, list | tuple):
        return ", ".join(_fact(item, key, depth + 1) for item in value)
    return _escape(str(value))


@register.simple_tag
def table_place(table) -> str:
    """The breadcrumb links from the tables list to ``table``: its catalog, then each level of
    its namespace, each a link filtering the list to it ("" for a table registered by location)."""
    if not table.catalog_id:
        return ""
    catalog = table.catalog.name
    links = [(catalog, {"catalog": catalog})]
    parts = [part for part in table.identifier.rpartition(".")[0].split(".") if part]
    links += [
        (part, {"catalog": catalog, "namespace": ".".join(parts[: i + 1])}) for i, part in enumerate(parts)
    ]
    base = reverse("console:table-list")
    return mark_safe(
        "".join(
            f' / <a href="{base}?{_escape(urlencode(query))}">{_escape(label)}</a>' for label, query in links
        )
    )


#: A process parameter naming a byte size: ``target-file-size``, ``min_file_size``, ``max-bytes``...
_SIZE_PARAM = re.compile(r"(^|[_\s-])(size|bytes)$", re.IGNORECASE)


@register.filter
def param(value, key="") -> str:
    """A process parameter as a person reads it: a size (its ``key`` ends in ``size`` or
    ``bytes``) in binary units with the exact bytes on hover, other values as ``fact`` shows them."""
    if _is_count(value) and _SIZE_PARAM.search(str(key)):
        return mark_safe(f'<span title="{int(value):,} bytes">{filesize(value)}</span>')
    return fact(value, key)


def _is_count(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, int) and not isinstance(value, bool)


@register.filter
def intcomma_plain(value) -> str:
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def masked(properties) -> list[tuple[str, object]]:
    return sorted(mask_secrets(properties or {}).items())


@register.filter
def basename(path) -> str:
    return str(path or "").rstrip("/").rsplit("/", 1)[-1]


@register.filter
def stats_rows(data_file) -> list[tuple[str, object, object, object]]:
    """(column, lower, upper, null count) for the columns a file has statistics for; a bound not
    recorded (a struct column has null counts only) is None."""
    if data_file is None:
        return []
    lower = data_file.lower_bounds or {}
    upper = data_file.upper_bounds or {}
    nulls = data_file.null_counts or {}
    columns = sorted(set(lower) | set(upper) | set(nulls))
    return [(c, lower.get(c), upper.get(c), nulls.get(c)) for c in columns]


@register.simple_tag
def query_with(params, **changes) -> str:
    """The current query string with some parameters replaced (pagination links)."""
    query = params.copy() if hasattr(params, "copy") else dict(params)
    for key, value in changes.items():
        query[key] = value
    return (
        query.urlencode() if hasattr(query, "urlencode") else "&".join(f"{k}={v}" for k, v in query.items())
    )


@register.filter
def duration(seconds) -> str:
    if seconds is None:
        return "—"
    seconds = float(seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


@register.filter
def audit_target(event) -> dict:
    """The audit row's target for people: its kind ("table") and a link where the console has one."""
    from console.audit.targets import describe

    return describe(event.target_model, event.target_id)


@register.filter
def json_inline(value) -> str:
    import json

    return json.dumps(value, default=str, sort_keys=True)


@register.filter
def split_words(text: str) -> list[str]:
    return str(text).split()


@register.filter
def get_item(mapping, key):
    return (mapping or {}).get(key)


# --- list rows: one Python pass per list instead of a template loop --------------------------------
# A template loop resolves every {{ variable }} and filter of every row through the template engine,
# which made rows most of a list page's CPU (issue 10: throughput). These tags build the same
# markup with plain string formatting; the row markup lives here, the rest of the list (head,
# empty row, pager) in its template.

_TABLE_ROW = (
    '<tr>\n      <td><a href="{url}" title="{location}">{name}</a>{warning}</td>\n'
    '      <td><span class="badge fmt-{format}">{format_label}</span></td>\n'
    "      <td>{place}</td>\n"
    '      <td class="num"><span class="score score-{band}" title="0 healthy, 100 needs attention now">'
    "{health}</span></td>\n"
    '      <td class="num">{files}</td>\n      <td class="num">{small}</td>\n'
    '      <td class="num" title="{bytes} bytes">{size}</td>\n'
    "      <td>{maintained}</td>\n      <td>{status}</td>\n    </tr>\n"
)
_PROCESS_ROW = (
    '<tr>\n      <td><a href="{url}">#{pk}</a></td>\n{table_cell}'
    "      <td>{action}</td>\n"
    '      <td><span class="status status-{status_class}">{status}</span></td>\n'
    "      <td>{progress}</td>\n      <td>{attempt}</td>\n      <td>{trigger}</td>\n"
    '      <td>{created}</td>\n      <td class="num">{duration}</td>\n    </tr>\n'
)
_MARK = 987654321  # a pk no URL pattern contains: reversed once per list, replaced per row


def _url_pattern(name: str) -> str:
    return reverse(name, args=[_MARK]).replace(str(_MARK), "{}")


def _truncated(text: str, length: int) -> str:
    """``text|truncatechars:length`` (the filter itself only for text it may change)."""
    if len(text) <= length and text.isascii():
        return text
    return Truncator(text).chars(length)


@register.simple_tag
def table_rows(tables) -> str:
    """The ``<tr>`` of each table of the table list (console/partials/table_rows.html); ``tables``
    are the rows of console/table_list.py ``table_page``."""
    url = _url_pattern("console:table-detail")
    labels = dict(format_choices())
    now = timezone.now()
    rows = []
    for table in tables:
        problem, health = table["refresh_error"], table["health"]
        warning = f' <span class="badge warn" title="{_escape(problem)}">unreadable</span>' if problem else ""
        rows.append(
            _TABLE_ROW.format(
                url=url.format(table["id"]),
                name=_escape(table["name"]),
                warning=warning,
                format=_escape(table["format"]),
                format_label=_escape(labels.get(table["format"], table["format"])),
                location=_escape(table["location"]),
                place=_place(table["catalog__name"], table["namespace"]),
                band="—" if health is None else "bad" if health >= 50 else "warn" if health >= 25 else "ok",
                health="—" if health is None else health,
                files=intcomma_plain(table["file_count"]),
                small=intcomma_plain(table["small_file_count"]),
                bytes=intcomma_plain(table["total_bytes"]),
                size=filesize(table["total_bytes"]),
                maintained=_ago(table["last_maintenance_at"], now),
                status=_table_status(*table["status"]),
            )
        )
    return mark_safe("".join(rows))


def _place(catalog: str | None, namespace: str) -> str:
    """The catalog and namespace of a table, each a link filtering the list to it."""
    if not catalog:
        return '<span class="muted">—</span>'
    html = f'<a href="?{_escape(urlencode({"catalog": catalog}))}">{_escape(catalog)}</a>'
    if namespace:
        html += f' / <a href="?{_escape(urlencode({"catalog": catalog, "namespace": namespace}))}">{_escape(namespace)}</a>'
    return html


def _ago(value, now) -> str:
    if value is None:
        return '<span class="muted">never</span>'
    return f'<span title="{_datetime(value)}">{timesince(value, now, depth=1)} ago</span>'


def _table_status(status: str, action: str) -> str:
    css = {"running": "running", "queued": "pending", "failed": "failed", "ok": "success"}[status]
    detail = f" {_escape(action)}" if action else ""
    return f'<span class="status status-{css}">{status}{detail}</span>'


def _progress_cell(process) -> str:
    if process.status in ("RUNNING", "CANCELING"):
        percent = process.progress_percent
        message = _escape(process.progress_message)
        return f'<progress max="100" value="{percent}" title="{message}"></progress> {percent}%'
    if process.failure:
        short = _escape(_truncated(process.failure, 50))
        return f'<span class="muted" title="{_escape(process.failure)}">{short}</span>'
    return ""


@register.simple_tag
def process_rows(processes, with_table=True) -> str:
    """The ``<tr>`` of each process of a process list (processes/partials/rows.html); the table
    column only when ``with_table`` (the global list, not a table's own tab)."""
    url = _url_pattern("console:process-detail")
    table_url = _url_pattern("console:table-processes") if with_table else ""
    rows = []
    for process in processes:
        table_cell = (
            f'      <td><a href="{table_url.format(process.table_id)}">{_escape(_table_name(process))}</a></td>\n'
            if with_table
            else ""
        )
        rows.append(
            _PROCESS_ROW.format(
                url=url.format(process.pk),
                pk=process.pk,
                table_cell=table_cell,
                action=_escape(process.action),
                status_class=_escape(process.status.lower()),
                status=_escape(process.status),
                progress=_progress_cell(process),
                attempt=process.attempt,
                trigger=_escape(process.trigger),
                created=_datetime(process.created_at),
                duration=duration(process.duration_seconds),
            )
        )
    return mark_safe("".join(rows))


def _table_name(process) -> str:
    name = getattr(process, "table_name", None)  # annotated by process_list_rows()
    return process.table.name if name is None else name


def _datetime(value) -> str:
    """``value|date:"Y-m-d H:i:s"`` in the current time zone."""
    return "" if value is None else timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S")


# --- links every page draws (navigation, tabs, assets): worked out once per process ----------------


@functools.lru_cache(maxsize=4096)
def _reversed(prefix: str, name: str, args: tuple) -> str:
    return reverse(name, args=args or None)


@register.simple_tag
def link(name: str, *args) -> str:
    """``{% url name arg… %}`` remembered per script prefix: the navigation and tab links of
    every page are the same few URLs."""
    return _reversed(get_script_prefix(), name, args)


@register.simple_tag
def asset(path: str) -> str:
    """``{% static path %}`` remembered: the (manifest) storage maps a path the same way until
    the process restarts with new static files."""
    return _static_url(path)


@functools.lru_cache(maxsize=256)
def _static_url(path: str) -> str:
    return static(path)
