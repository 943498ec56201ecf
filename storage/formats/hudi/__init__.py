"""Hudi tables through hudi-rs (read-only): copy-on-write and merge-on-read, table versions 6 and 8."""

from __future__ import annotations

from .adapter import HudiAdapter
from .table import HudiSpecTable, HudiTimeline

__all__ = ["HudiAdapter", "HudiSpecTable", "HudiTimeline"]
