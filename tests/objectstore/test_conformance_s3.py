"""The conformance suite (tests/spec/test_conformance.py) on the object store: every case's table
is copied to SeaweedFS and opened there through ``load_table(s3://..., storage=...)`` (format
detection by listing the prefix), and must give the same answers as on disk.

The reference answers are the format libraries' own, taken on the local copy; their paths are
moved under the ``s3://`` prefix the copy was uploaded to. Iceberg metadata carries absolute
paths, so an Iceberg table is relocated to its ``s3://`` URI (the fixtures' relocate tool) before
the upload. The same ``KNOWN_BUGS`` marks apply, by case name.
"""

from __future__ import annotations

import dataclasses
import os
import uuid
from pathlib import Path

import pytest

from devtools.seaweedfs import relocate_iceberg
from storage.io import StoreOptions
from storage.spec import load_table
from tests.conftest import shared_fixtures_root, upload_folder
from tests.spec import test_conformance as suite
from tests.spec.test_conformance import BUILDERS, ConformanceCase, Reference, _known_bug, catalog

# Every test of the suite, run here against the object-store copies of its cases.
globals().update({name: getattr(suite, name) for name in dir(suite) if name.startswith("test_")})

__all__ = ["_known_bug", "catalog"]  # fixtures the suite's cases use, found by pytest here


def _relocate_iceberg(local_root: str, prefix: str, target: Path) -> Path:
    """A copy at ``target`` of the Iceberg table at ``local_root`` whose metadata names ``prefix``."""
    root = shared_fixtures_root()
    assert root is not None  # the cases that need the tool skipped already without fixtures
    return relocate_iceberg(root.parent / "tools" / "relocate_iceberg.py", local_root, target, prefix)


def _on_the_object_store(
    case: ConformanceCase, seaweedfs, options: StoreOptions, workdir: Path
) -> ConformanceCase:
    prefix = f"s3://lake/conformance/{case.name}-{uuid.uuid4().hex[:8]}"
    folder = Path(case.root)
    if case.name.startswith("iceberg"):
        folder = _relocate_iceberg(case.root, prefix, workdir / "table")
    upload_folder(seaweedfs, folder, prefix)

    def moved(path: str) -> str:
        relative = os.path.relpath(path, case.root)
        assert not relative.startswith(".."), path
        return f"{prefix}/{relative}"

    reference = dataclasses.replace(
        case.reference, files=[{moved(path) for path in files} for files in case.reference.files]
    )
    table = load_table(prefix, storage=options)
    assert table.format == case.table.format
    return dataclasses.replace(case, table=table, root=prefix, reference=reference)


@pytest.fixture(scope="module", params=list(BUILDERS))
def conformance_table(request: pytest.FixtureRequest, seaweedfs, tmp_path_factory) -> ConformanceCase:
    options = StoreOptions.from_properties(seaweedfs.s3_properties(), environ={})
    local = BUILDERS[request.param](request)
    workdir = tmp_path_factory.mktemp(f"s3-{request.param}")
    return _on_the_object_store(local, seaweedfs, options, workdir)


def test_every_case_is_read_from_the_object_store(conformance_table):
    case = conformance_table
    assert case.root.startswith("s3://lake/conformance/")
    listed = case.base_paths(case.files_at(None))
    assert listed and all(path.startswith(case.root + "/") for path in listed)
    assert isinstance(case.reference, Reference)
