"""``storage.io.local_path``: plain paths and ``file:`` URIs to local paths; anything else refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.io import PathNotAllowed, is_local, local_path


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/lake/orders", "/lake/orders"),
        ("  /lake/orders \n", "/lake/orders"),
        ("relative/orders", "relative/orders"),
        ("file:///lake/orders", "/lake/orders"),
        ("file:/lake/orders", "/lake/orders"),
        ("file://localhost/lake/orders", "/lake/orders"),
        ("FILE:///lake/orders", "/lake/orders"),
        ("file:///lake/my%20orders", "/lake/my orders"),
        ("file:///lake/%2e%2e/orders", "/lake/../orders"),
        ("/lake/%2e%2e/orders", "/lake/%2e%2e/orders"),
    ],
)
def test_a_plain_path_or_file_uri_becomes_a_local_path(location, expected):
    assert local_path(location) == Path(expected)


def test_the_home_folder_is_expanded():
    assert local_path("~/lake") == Path.home() / "lake"


def test_paths_written_by_format_libraries_can_be_taken_literally():
    assert local_path("file:///lake/my%20orders", percent_decoded=False) == Path("/lake/my%20orders")
    assert local_path("file:/lake/a%2Fb", percent_decoded=False) == Path("/lake/a%2Fb")


@pytest.mark.parametrize(
    ("location", "scheme"),
    [("s3://bucket/orders", "s3://"), ("http://127.0.0.1/orders", "http://"), ("/lake/a://b", "://")],
)
def test_other_schemes_are_refused_naming_the_scheme(location, scheme):
    with pytest.raises(
        PathNotAllowed, match=f"only local paths and file:// URIs are supported, not {scheme}"
    ):
        local_path(location)


@pytest.mark.parametrize("location", ["/lake/orders\x00/x", "file:///lake/x%00/y"])
def test_a_nul_character_is_refused_even_percent_encoded(location):
    with pytest.raises(PathNotAllowed, match="NUL"):
        local_path(location)


def test_path_not_allowed_is_a_value_error():
    assert issubclass(PathNotAllowed, ValueError)


@pytest.mark.parametrize(
    ("location", "local"),
    [
        ("/lake/orders", True),
        ("relative", True),
        ("file:///lake", True),
        ("file:/lake", True),
        ("s3://bucket/lake", False),
        ("abfss://c@a.dfs.core.windows.net/lake", False),
    ],
)
def test_is_local_tells_local_locations_from_object_stores(location, local):
    assert is_local(location) is local
