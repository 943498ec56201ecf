"""A query's whole cached result exported from a storage on the object store (SeaweedFS): the
storage streams its parquet files without Spark, so the CSV holds every row, not the shown ones."""

from __future__ import annotations

import io
import uuid

import pyarrow.parquet as pq
import pytest

from tests.console.tables import write_delta_table

pytestmark = [pytest.mark.spark, pytest.mark.django_db(transaction=True)]


def test_the_export_of_a_result_cached_on_s3_holds_every_row(spark, seaweedfs, warehouse, client_as, viewer):
    from processes import queries
    from processes.models import QueryStatus
    from storage import services
    from storage.results.plugin import StorageDescriptor

    services.table_register(
        location=str(write_delta_table(warehouse / "orders", commits=3, rows_per_commit=10))
    )
    config = {"root": f"s3://results/export-{uuid.uuid4().hex[:8]}", **seaweedfs.s3_properties()}
    backend = services.storage_backend_register(
        name="s3-results", descriptor=StorageDescriptor(type="filesystem", config=config)
    )
    query = queries.query_submit(sql="select id from orders order by id", backend=backend, row_limit=4)
    queries.query_run(query_id=query.pk, spark=spark)
    query.refresh_from_db()
    assert query.status == QueryStatus.SUCCESS and query.truncated, query.error

    client = client_as(viewer)
    csv_answer = client.get(f"/queries/{query.pk}/export.csv")
    parquet_answer = client.get(f"/queries/{query.pk}/export.parquet")

    assert csv_answer["X-Lakewarden-Export"].startswith("whole result: cached result ")
    assert (
        b"".join(csv_answer.streaming_content) == ("id\r\n" + "".join(f"{i}\r\n" for i in range(30))).encode()
    )
    table = pq.read_table(io.BytesIO(b"".join(parquet_answer.streaming_content)))
    assert table.column("id").to_pylist() == list(range(30))
