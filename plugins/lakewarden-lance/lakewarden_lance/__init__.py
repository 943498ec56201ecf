"""Lance datasets in Lakewarden (``lakewarden_lance:LanceAdapter``); maintenance processes in
``lakewarden_lance.maintenance``; a demo dataset in ``lakewarden_lance.demo``."""

from __future__ import annotations

from lakewarden_lance.adapter import LanceAdapter
from lakewarden_lance.index import LanceFileIndex
from lakewarden_lance.table import LanceSpecTable, LanceTimeline

__all__ = ["LanceAdapter", "LanceFileIndex", "LanceSpecTable", "LanceTimeline"]
