"""The compiled listing loop of a manifest without filter, deletes or row lineage
(``_avro_native.plain_slices``) gives exactly the slices of the Python loop
(``IcebergFileIndex._manifest_slices`` without it): deleted entries skipped, sequence numbers and
snapshot ids inherited by the spec's rules, partitions from the spec's cache, and every entry it
does not cover (a partition not cached yet, an entry that is not plain, a field of an unexpected
type) handed to the Python loop's body, in order.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType

from storage.formats.iceberg import _avro, index
from storage.formats.iceberg._manifests import ManifestInfo, SpecContext
from tests.spec.test_iceberg_native_listing import DECODER, SCHEMA, _model, raw_map

pytestmark = pytest.mark.skipif(
    not _avro.NATIVE_BUILT, reason="the compiled Avro decoder is not built (python scripts/build_native.py)"
)


def _manifest(sequence: int, snapshot: int | None) -> ManifestInfo:
    return ManifestInfo("m.avro", 1, 0, 0, sequence, 0, snapshot, None, None, None, None)


def _record(k: int, status: Any, sequence: int | None, snapshot: int | None, **data: Any) -> dict[str, Any]:
    data_file = {
        "content": 0,
        "file_path": f"s3://b/{k}.parquet",
        "file_format": "PARQUET",
        "partition": {"name": f"n{k % 3}", "day_day": 19000 + k % 2},
        "record_count": k + 1,
        "file_size_in_bytes": 100 + k,
        "lower_bounds": raw_map([(1, to_bytes(LongType(), k))]),
        "upper_bounds": None,
        "null_value_counts": raw_map([]),
        "split_offsets": [4] if k % 2 else None,
        "equality_ids": None,
        "referenced_data_file": None,
        "content_offset": None,
        "content_size_in_bytes": None,
        "first_row_id": None,
    } | data
    return {"status": status, "snapshot_id": snapshot, "sequence_number": sequence, "data_file": data_file}


def _slices(records: list[dict[str, Any]], manifest: ManifestInfo, compiled: bool, monkeypatch) -> list[Any]:
    spec = PartitionSpec(
        PartitionField(6, 1000, IdentityTransform(), "name"),
        PartitionField(3, 1001, DayTransform(), "day_day"),
    )
    context = SpecContext(spec, SCHEMA)
    file_index = index.IcebergFileIndex.__new__(index.IcebergFileIndex)
    file_index._decoder = DECODER
    calls: list[Any] = []
    compiled_loop = index.plain_slices

    def counted(scan: Any, chunk: list[Any], one: Any) -> list[Any]:
        calls.append(len(chunk))
        return compiled_loop(scan, chunk, one)

    monkeypatch.setattr(index, "plain_slices", counted if compiled else None)
    checks = index._Checks(None, DECODER)
    chunks = file_index._manifest_slices(manifest, records, {}, context, checks, None, None)
    found = [found_slice for chunk in chunks for found_slice in chunk]  # a few at a time (lists)
    monkeypatch.undo()
    assert (sum(calls) == len(records)) == compiled
    return [
        (s.partition, s.base_instant, s.file_group_id, s.delete_files, _model(s.base_file)) for s in found
    ]


def test_sequence_numbers_and_snapshots_are_inherited_as_the_python_loop_inherits_them(monkeypatch):
    for manifest_sequence, manifest_snapshot in itertools.product((0, 3), (None, 11)):
        manifest = _manifest(manifest_sequence, manifest_snapshot)
        records = [
            _record(k, status, sequence, snapshot)
            for k, (status, sequence, snapshot) in enumerate(
                itertools.product((0, 1, 2), (None, 0, 5), (None, 7))
            )
        ]
        compiled = _slices(records, manifest, True, monkeypatch)
        assert compiled == _slices(records, manifest, False, monkeypatch)
        assert len(compiled) == 12  # the 6 deleted ones are skipped
        sequences = {s[4]["extra"][1]["sequence_number"] for s in compiled}
        assert sequences == ({0, 5} if manifest_sequence == 0 else {0, 3, 5})


def test_entries_it_does_not_cover_go_to_the_python_loop_in_order(monkeypatch):
    manifest = _manifest(2, 11)
    records = [
        _record(0, 1, None, None),
        _record(1, 0, 4, 8, equality_ids=[1]),  # not plain
        _record(2, 1, None, None, content_offset=4),  # not plain (v3)
        {"status": 1, "data_file": _record(3, 1, None, None)["data_file"], "snapshot_id": None},
        _record(4, True, 1, 2),  # a status that is not an int (bool)
        _record(5, 1, None, None, file_format="ORC"),
        _record(6, 1, None, None, partition={"name": "n6"}),  # a partition field missing
        _record(7, 2, None, None),
        _record(8, 1, None, None),  # a partition cached by an earlier entry
    ]
    compiled = _slices(records, manifest, True, monkeypatch)
    assert compiled == _slices(records, manifest, False, monkeypatch)
    assert [s[4]["path"][1] for s in compiled] == [f"s3://b/{k}.parquet" for k in (0, 1, 2, 3, 4, 5, 6, 8)]


def test_an_error_of_the_python_loop_is_raised(monkeypatch):
    records = [_record(0, 1, None, None), {"status": 1}]  # no data_file: the Python loop's KeyError
    with pytest.raises(KeyError):
        _slices(records, _manifest(1, 1), True, monkeypatch)


@pytest.mark.parametrize(
    "scan, records",
    [
        ((), []),
        (((), None, None, (), None, 0, None), []),
        (((None,) * 6, None, [], (), None, 0, None), []),
        (((None,) * 6, None, None, [], None, 0, None), []),
        (((None,) * 6, None, None, (), None, 0, None), ()),
    ],
)
def test_a_malformed_scan_is_refused(scan, records):
    with pytest.raises(ValueError, match="plain_slices"):
        _avro._native.plain_slices(scan, records, lambda record: None)
