"""storage.io.put_if_absent on local files: created once, never overwritten, no temporary left,
and a clear refusal for stores it has no conditional put for. (S3: tests/objectstore.)"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from storage.io import PutUnsupported, put_if_absent


def test_a_file_is_created_once_and_a_second_put_leaves_the_first_content(tmp_path):
    target = tmp_path / "00000000000000000000.json"
    assert put_if_absent(str(target), b"first") is True
    assert put_if_absent(f"file://{target}", b"second") is False
    assert target.read_bytes() == b"first"
    assert os.listdir(tmp_path) == [target.name]  # no temporary file left behind


def test_racing_puts_of_one_name_leave_exactly_one_winner_and_its_content(tmp_path):
    target = tmp_path / "commit.json"
    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(lambda n: put_if_absent(str(target), f"writer {n}".encode()), range(32)))
    assert won.count(True) == 1
    assert target.read_bytes() == f"writer {won.index(True)}".encode()
    assert os.listdir(tmp_path) == [target.name]


def test_an_existing_folder_of_that_name_is_never_replaced(tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "inside").write_bytes(b"keep")
    assert put_if_absent(str(tmp_path / "taken"), b"x") is False
    assert (tmp_path / "taken" / "inside").read_bytes() == b"keep"


@pytest.mark.parametrize(
    "location", ["gs://bucket/t/_delta_log/0.json", "abfss://c@a.dfs.core.windows.net/t/0.json"]
)
def test_a_store_without_a_conditional_put_here_is_refused_by_name(location):
    with pytest.raises(PutUnsupported, match="S3 stores and local files only"):
        put_if_absent(location, b"x")
