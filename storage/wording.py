"""Counts in words for people: "1 small file", "2 small files" (never "1 small files")."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str = "") -> str:
    """``count`` with thousands separators and ``noun``, plural unless it is exactly one
    (``plural`` when the plural is not ``noun + "s"``: "process", "processes")."""
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"
