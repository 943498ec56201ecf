"""A demo Lance dataset with many small fragments, so ``rewrite`` has work to do."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa

from lakewarden_lance._dataset import storage_options
from storage.io import StoreOptions

EPOCH = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)


def _batch(rng: random.Random, start: int, rows: int) -> pa.Table:
    ids = range(start, start + rows)
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "user": pa.array([f"user-{rng.randint(1, 200):03d}" for _ in ids]),
            "event_ts": pa.array([EPOCH + dt.timedelta(minutes=i) for i in ids], pa.timestamp("us", "UTC")),
            "score": pa.array([round(rng.random() * 100, 2) for _ in ids], pa.float64()),
        }
    )


def build_demo_dataset(
    location: str,
    *,
    appends: int = 60,
    rows: int = 40,
    index: bool = True,
    storage: StoreOptions | None = None,
) -> bool:
    """Write a dataset of ``appends`` small appends (one fragment each; a scalar index on ``id``
    built after the first half unless ``index`` is False, so the later fragments are not indexed yet), a tag and a delete
    (deletion files) at ``location``; False, writing nothing, when a dataset is already there.
    ``rewrite``, ``expire-snapshots`` and ``optimize-indices`` all have work to do on it."""
    import lance

    from lakewarden_lance.adapter import LanceAdapter

    if LanceAdapter.detect(location, storage):
        return False
    options = storage_options(location, storage)
    rng = random.Random(11)
    for number in range(max(appends, 2)):
        mode = "append" if number else "create"
        lance.write_dataset(_batch(rng, number * rows, rows), location, mode=mode, storage_options=options)
        if index and number == max(appends, 2) // 2:
            lance.dataset(location, storage_options=options).create_scalar_index("id", "BTREE")
    dataset = lance.dataset(location, storage_options=options)
    dataset.tags.create("before-cleanup", dataset.version)
    dataset.delete("score < 10")
    return True
