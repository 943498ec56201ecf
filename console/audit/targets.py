"""What an audit row's target is, for people: the model's own name ("table", "process") and a link
to the object's page where the console has one (``target_model`` is the model's label, e.g.
``storage.Table``; a deleted object's link answers 404, as its page would)."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.urls import NoReverseMatch, reverse

#: model name -> the console page of one object (URL name, takes the primary key) or of its list
PAGES = {
    "table": ("console:table-detail", True),
    "process": ("console:process-detail", True),
    "catalog": ("console:catalog-detail", True),
    "query": ("console:query-detail", True),
    "storagebackend": ("console:storage-list", False),
    "cachedresult": ("console:cached-result-list", False),
    "alertrule": ("console:alerts", False),
    "alertchannel": ("console:alerts", False),
}


def describe(target_model: str, target_id: str) -> dict[str, Any]:
    """``{"kind": "table", "url": "/tables/8/"}``; ``url`` None where there is no page (or the id
    is not a number), ``kind`` the label as stored for a model this version does not have."""
    try:
        model = apps.get_model(target_model)
    except (LookupError, ValueError):
        return {"kind": target_model, "url": None}
    kind = str(model._meta.verbose_name)
    page = PAGES.get(model._meta.model_name)
    if page is None:
        return {"kind": kind, "url": None}
    name, by_id = page
    try:
        url = reverse(name, args=[int(target_id)]) if by_id else reverse(name)
    except (ValueError, NoReverseMatch):
        url = None
    return {"kind": kind, "url": url}
