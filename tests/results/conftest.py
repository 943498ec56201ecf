"""Result storage tests take their throwaway Postgres databases from ``throwaway_database`` in
tests/conftest.py."""

from __future__ import annotations
