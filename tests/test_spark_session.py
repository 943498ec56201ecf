"""The shared Spark session writes parquet the formats can use and reads it back."""

from __future__ import annotations

import datetime as dt

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.spark


def test_the_spark_session_writes_and_reads_parquet_with_microsecond_timestamps(spark, tmp_path):
    rows = [(i, f"name-{i}", dt.datetime(2024, 1, 1, 12, 0, i)) for i in range(20)]
    frame = spark.createDataFrame(rows, "id long, name string, ts timestamp")

    frame.coalesce(1).write.parquet(str(tmp_path / "out"))
    read_back = spark.read.parquet(str(tmp_path / "out"))

    assert read_back.count() == 20
    assert sorted(r.id for r in read_back.collect()) == list(range(20))
    written = next((tmp_path / "out").glob("*.parquet"))
    ts_column = pq.ParquetFile(written).schema.column(2)
    # INT96 would carry no statistics; Iceberg and Delta need TIMESTAMP(MICROS).
    assert ts_column.physical_type == "INT64"
    assert "timeUnit=microseconds" in str(ts_column.logical_type)
