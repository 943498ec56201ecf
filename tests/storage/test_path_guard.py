"""PathGuard: the one rule for what a maintenance process may delete, move or write."""

from __future__ import annotations

import os

import pytest

from storage.io.guard import OutsideTable, PathGuard


@pytest.fixture
def lake(tmp_path):
    """/wh (the allowed root) with table t, a table nested in it, a prefix sibling t2, and a folder
    outside the roots; t holds symlinks to a file and a folder outside."""
    wh = tmp_path / "wh"
    outside = tmp_path / "outside"
    for folder in (wh / "t" / "data", wh / "t" / "sub" / "_delta_log", wh / "t2" / "data", outside / "d"):
        folder.mkdir(parents=True)
    (outside / "secret.parquet").write_bytes(b"x")
    (outside / "d" / "f.parquet").write_bytes(b"x")
    os.symlink(outside / "secret.parquet", wh / "t" / "data" / "link.parquet")
    os.symlink(outside / "d", wh / "t" / "linked")
    guard = PathGuard.build(str(wh / "t"), roots=[str(wh)], others=[str(wh / "t" / "sub"), str(wh / "t2")])
    return wh, outside, guard


def test_a_file_of_the_table_is_allowed_in_every_spelling(lake):
    wh, _, guard = lake
    for spelt in (
        f"{wh}/t/data/a.parquet",
        f"file://{wh}/t/data/a.parquet",
        f"file:{wh}/t/data/a.parquet",
        f"{wh}/t/data/./a.parquet",
        f"{wh}/t/data/x/../a.parquet",
        f"{wh}//t/data/a.parquet",
    ):
        assert guard.refusal(spelt) is None, spelt
    assert guard.check(f"file://{wh}/t/data/a.parquet") == f"{wh}/t/data/a.parquet"


@pytest.mark.parametrize(
    "relative, reason",
    [
        ("t/../t2/data/a.parquet", "outside the table's location"),
        ("t2/data/a.parquet", "outside the table's location"),  # a prefix sibling: /wh/t vs /wh/t2
        ("t", None),
        ("t/sub/_delta_log/00.json", "inside another registered table"),
        ("t/sub", "inside another registered table"),
        ("t/data/link.parquet", "through a symlink"),
        ("t/linked/f.parquet", "through a symlink"),
        ("t/linked", "through a symlink"),
    ],
)
def test_paths_outside_the_table_or_in_a_nested_one_or_through_a_link_are_refused(lake, relative, reason):
    wh, _, guard = lake
    found = guard.refusal(f"{wh}/{relative}")
    if reason is None:
        assert found is None
    else:
        assert found is not None and found.startswith(reason), found


def test_percent_encoded_dots_and_absolute_paths_elsewhere_are_refused(lake):
    wh, outside, guard = lake
    assert guard.refusal(f"file://{wh}/t/%2E%2E/t2/data/a.parquet") == "outside the table's location"
    assert guard.refusal(f"{wh}/t/%2E%2E/t2/data/a.parquet") == "outside the table's location"
    assert guard.refusal(str(outside / "secret.parquet")) == "outside the table's location"
    assert guard.refusal("s3://bucket/t/data/a.parquet") == "outside the table's location"
    assert guard.refusal("t/data/a.parquet") == "outside the table's location"  # relative: from the cwd
    assert guard.refusal(f"{wh}/t/data/a\x00.parquet") == "not a path that can be named safely"
    with pytest.raises(OutsideTable, match="will not delete .*secret.parquet: outside the table"):
        guard.check(str(outside / "secret.parquet"), "delete")


def test_a_table_whose_location_is_outside_the_roots_touches_nothing(tmp_path):
    (tmp_path / "elsewhere" / "t").mkdir(parents=True)
    guard = PathGuard.build(str(tmp_path / "elsewhere" / "t"), roots=[str(tmp_path / "wh")])
    assert guard.refusal(f"{tmp_path}/elsewhere/t/data/a.parquet") == "outside the allowed roots"
    with pytest.raises(OutsideTable, match="outside the allowed roots"):
        guard.check_location()


def test_a_table_location_that_is_a_symlink_out_of_the_roots_is_refused(tmp_path):
    (tmp_path / "wh").mkdir()
    (tmp_path / "outside" / "t").mkdir(parents=True)
    os.symlink(tmp_path / "outside" / "t", tmp_path / "wh" / "t")
    guard = PathGuard.build(str(tmp_path / "wh" / "t"), roots=[str(tmp_path / "wh")])
    assert guard.refusal(f"{tmp_path}/wh/t/data/a.parquet") == "outside the allowed roots"
    with pytest.raises(OutsideTable):
        guard.check_location()


def test_a_nested_table_registered_through_a_symlinked_spelling_is_still_protected(tmp_path):
    (tmp_path / "wh" / "t" / "sub").mkdir(parents=True)
    os.symlink(tmp_path / "wh" / "t", tmp_path / "wh" / "alias")
    guard = PathGuard.build(
        str(tmp_path / "wh" / "t"),
        roots=[str(tmp_path / "wh")],
        others=[str(tmp_path / "wh" / "alias" / "sub")],
    )
    assert guard.refusal(f"{tmp_path}/wh/t/sub/x.parquet").startswith("inside another registered table")
    assert guard.skips_folder(f"{tmp_path}/wh/t/sub")
    assert not guard.skips_folder(f"{tmp_path}/wh/t/data")


def test_two_tables_sharing_a_location_may_delete_nothing(tmp_path):
    (tmp_path / "wh" / "t").mkdir(parents=True)
    guard = PathGuard.build(
        f"{tmp_path}/wh/t", roots=[str(tmp_path / "wh")], others=[f"file://{tmp_path}/wh/t/"]
    )
    assert guard.refusal(f"{tmp_path}/wh/t/data/a.parquet").startswith("inside another registered table")
    with pytest.raises(OutsideTable, match="another registered table's too"):
        guard.check_location()


def test_object_store_keys_are_compared_canonically():
    guard = PathGuard.build(
        "s3a://lake/wh/t/", roots=["s3://lake/wh"], others=["s3://lake/wh/t/sub", "s3://lake/wh/t2"]
    )
    assert guard.refusal("s3://lake/wh/t/data/a.parquet") is None
    assert guard.refusal("s3a://lake/wh/t/data/a.parquet") is None
    assert guard.refusal("s3://lake/wh/t2/data/a.parquet") == "outside the table's location"
    assert guard.refusal("s3://lake/wh/t/sub/a.parquet").startswith("inside another registered table")
    assert guard.refusal("s3://lake/wh/t/../t2/a.parquet") == "not a path that can be named safely"
    assert guard.refusal("s3://lake/wh/t/%2E%2E/t2/a.parquet") == "not a path that can be named safely"
    assert guard.refusal("s3://other/wh/t/a.parquet") == "outside the table's location"
    assert guard.refusal("/wh/t/a.parquet") == "outside the table's location"
    outside_roots = PathGuard.build("s3://lake/elsewhere/t", roots=["s3://lake/wh"])
    assert outside_roots.refusal("s3://lake/elsewhere/t/a.parquet") == "outside the allowed roots"


def test_split_keeps_what_it_refuses_per_reason(lake):
    wh, outside, guard = lake
    allowed, kept = guard.split([f"{wh}/t/data/a.parquet", str(outside / "secret.parquet"), f"{wh}/t/sub/x"])
    assert allowed == [f"{wh}/t/data/a.parquet"]
    assert len(kept) == 2
    summary = kept.summary()
    assert summary["outside the table's location"] == {"count": 1, "files": [str(outside / "secret.parquet")]}
