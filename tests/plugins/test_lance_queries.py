"""Spark reads a Lance table through the ``lakewarden`` data source (the query workbench's path):
the reader, planned on the driver with ``format=lance`` as ``read_table`` sends it, ships splits
that pickle and read, on an executor, the rows Lance reads (deletions applied). Planned and read
here without a Spark session: the same calls Spark makes, without its start-up cost."""

from __future__ import annotations

import pickle

import pyarrow as pa

from storage.spec.spark.source import LakewardenReader, SourceOptions
from storage.spec.spark.types import arrow_schema_to_spark
from tests.plugins.lance_tables import build_demo_dataset, lance


def test_the_data_source_reads_a_lance_table_as_lance_reads_it(tmp_path):
    path = tmp_path / "clicks"
    build_demo_dataset(str(path), appends=5, rows=30, index=False)
    expected = lance.dataset(str(path)).to_table()
    assert 0 < expected.num_rows < 150  # the demo's delete removed some rows
    options = SourceOptions.parse({"location": str(path), "format": "lance", "target_size": "1"})
    reader = LakewardenReader(options, arrow_schema_to_spark(expected.schema))

    partitions = pickle.loads(pickle.dumps(reader.partitions()))

    assert len(partitions) == 5  # one fragment per split at this target size
    rows = pa.Table.from_batches([batch for p in partitions for batch in reader.read(p)])
    assert sorted(rows.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())
    assert rows.sort_by("id").column("score").equals(expected.sort_by("id").column("score"))
