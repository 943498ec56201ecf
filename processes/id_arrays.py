"""Finding table ids in a sorted id column: the lookup the scheduler's columns (awake tables,
evaluation state, due facts, group assignments) all make, with an empty column handled once."""

from __future__ import annotations

import numpy as np


def locate_sorted(sorted_ids: np.ndarray, wanted: np.ndarray | list[int]) -> tuple[np.ndarray, np.ndarray]:
    """For each of ``wanted``: a position in ``sorted_ids`` (valid to index with when the column is
    not empty) and whether the id is there."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if not len(sorted_ids):
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    return at, sorted_ids[at] == wanted


__all__ = ["locate_sorted"]
