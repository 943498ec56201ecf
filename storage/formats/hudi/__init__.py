"""Hudi tables through hudi-rs (read-only): copy-on-write and merge-on-read, table versions 6 and 8."""

from __future__ import annotations

from storage.formats.hudi.adapter import HudiAdapter
from storage.formats.hudi.table import HudiSpecTable, HudiTimeline

__all__ = ["HudiAdapter", "HudiSpecTable", "HudiTimeline"]
