"""The sweep of a killed rewrite's leftovers (issue 35) looks under the table's whole location, not
only ``data/``, compares with the referenced files as a stream (sorted on disk, never a set), and
deletes only the unreferenced objects of ended processes that the guard allows."""

from __future__ import annotations

import uuid

import pyarrow.fs as pafs
import pytest

from processes.maintenance.outputs import sweep_leftovers
from storage.io.guard import PathGuard

pytestmark = pytest.mark.usefixtures("seaweedfs")


def leftover(process: int) -> str:
    return f"lakewarden-p{process}-{uuid.uuid4().hex}-g00000-part-00000.parquet"


def test_the_sweep_takes_ended_leftovers_anywhere_in_the_location_and_nothing_else(
    seaweedfs, s3_prefix, s3_options
):
    table = f"{s3_prefix}/t"
    named = {
        "ended in data": f"{table}/data/region=eu/{leftover(7)}",
        "ended beside metadata": f"{table}/metadata/{leftover(7)}",
        "ended at the top": f"{table}/{leftover(8)}",
        "ended but referenced": f"{table}/data/{leftover(8)}",
        "ended in the trash": f"{table}/.lakewarden-trash/41/{leftover(7)}",
        "ended in a nested table": f"{table}/nested/data/{leftover(7)}",
        "still running": f"{table}/data/{leftover(9)}",
        "this process": f"{table}/data/{leftover(10)}",
        "a table file": f"{table}/data/00000-0-a.parquet",
    }
    fs = seaweedfs.filesystem()
    for location in named.values():
        with fs.open_output_stream(location.removeprefix("s3://")) as out:
            out.write(b"z" * 10)
    asked = []

    def finished(ids):
        asked.append(sorted(ids))
        return {7, 8} & set(ids)

    guard = PathGuard.build(table, roots=["s3://lake"], others=[f"{table}/nested"])

    deleted = sweep_leftovers(
        table,
        s3_options,
        current=10,
        finished=finished,
        referenced=lambda: iter([named["a table file"], named["ended but referenced"]] * 2),
        guard=guard,
    )

    assert sorted(deleted) == sorted(
        named[k] for k in ("ended in data", "ended beside metadata", "ended at the top")
    )
    assert asked == [[7, 8, 9]]  # the trash and the nested table are not listed
    infos = fs.get_file_info(pafs.FileSelector(table.removeprefix("s3://"), recursive=True))
    left = {f"s3://{info.path}" for info in infos if info.type == pafs.FileType.File}
    assert left == set(named.values()) - set(deleted)


def test_nothing_is_swept_on_a_local_table_or_when_no_process_ended(
    seaweedfs, s3_prefix, s3_options, tmp_path
):
    table = f"{s3_prefix}/t"
    location = f"{table}/data/{leftover(7)}"
    with seaweedfs.filesystem().open_output_stream(location.removeprefix("s3://")) as out:
        out.write(b"z")

    kwargs = {"current": 1, "referenced": lambda: iter(()), "finished": lambda ids: set()}
    assert sweep_leftovers(table, s3_options, **kwargs) == []
    assert sweep_leftovers(str(tmp_path), None, **{**kwargs, "finished": lambda ids: set(ids)}) == []
    assert seaweedfs.filesystem().get_file_info(location.removeprefix("s3://")).type == pafs.FileType.File
