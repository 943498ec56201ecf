"""Lance datasets written by pylance for the Lance plugin's tests, and Lance's own answers about
them (versions, fragments' data files, rows), taken from pylance, not from the plugin."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

lance = pytest.importorskip("lance", reason="pylance is not installed (make test installs it)")
pytest.importorskip("lakewarden_lance", reason="the lakewarden-lance plugin is not installed")

from lakewarden_lance.demo import build_demo_dataset  # noqa: E402 - only once both are there

__all__ = ["build_demo_dataset", "lance", "lance_rows", "reference_files", "write_history"]


@lance.batch_udf(output_schema=pa.schema([pa.field("note", pa.string())]))
def _note(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The conformance rows' ``note`` column: "note <id>" for odd ids, null for even ones."""
    ids = batch.column("id").to_pylist()
    notes = pa.array([f"note {i}" if i % 2 else None for i in ids], pa.string())
    return pa.RecordBatch.from_arrays([notes], names=["note"])


def write_history(path: Path, events) -> list[int]:
    """A dataset with every kind of commit: create, overwrite, appends, a column added (fragments
    of two data files), a delete (deletion files), an update (rows moved), a tag. ``events`` is
    the conformance suite's row maker. Returns the version numbers, oldest first."""
    uri = str(path)
    lance.write_dataset(events(range(0, 3000), [0]), uri, max_rows_per_file=1000)
    lance.write_dataset(events(range(0, 9000), [0, 1]), uri, mode="overwrite", max_rows_per_file=2500)
    lance.write_dataset(events(range(9000, 18000), [1, 2]), uri, mode="append", max_rows_per_file=2500)
    dataset = lance.dataset(uri)
    dataset.add_columns(_note, read_columns=["id"])
    lance.write_dataset(events(range(18000, 27000), [2, 3], note=True), uri, mode="append")
    dataset = lance.dataset(uri)
    dataset.delete("id >= 1000 and id < 1500")
    dataset = lance.dataset(uri)
    dataset.update({"amount": "amount + 0.25"}, where="id >= 26000 and id < 26100")
    dataset = lance.dataset(uri)
    dataset.tags.create("after-append", 3)
    return [int(v["version"]) for v in sorted(dataset.versions(), key=lambda v: v["version"])]


def reference_files(path: Path, version: int) -> set[str]:
    """Lance's own answer: the first data file of each fragment at ``version``."""
    dataset = lance.dataset(str(path), version=version)
    return {
        os.path.normpath(os.path.join(str(path), "data", fragment.metadata.files[0].path))
        for fragment in dataset.get_fragments()
    }


def lance_rows(path: Path, version: int | None = None) -> pa.Table:
    return lance.dataset(str(path), version=version).to_table()
