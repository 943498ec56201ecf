"""A Lance dataset whose schema has duplicate field ids, as Lance 0.10.5 and older wrote after
``add_columns`` and ``drop_columns`` (Lance's test data ``v0.10.5/corrupt_schema``): a column
added after a drop took the id of a dropped column still in an older data file, and a reader
returns the dropped column's values for it, with no error. Lance's own ``validate`` refuses it
(its test ``test_fix_v0_10_5_corrupt_schema`` expects that); so does the plugin, naming the
column, at every version that has the fault, before any read or maintenance.

pylance 14 assigns ids correctly and repairs such a schema on commit, so the dataset is written
by pylance and its last manifest edited as Lance 0.10.5 would have written it: the columns ``b``
and ``c``, added after ``z`` (id 2) was dropped, get ids 2 and 3 instead of 3 and 4, in the
schema and in their data file.
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from storage.formats.hudi._hfile import proto_fields
from storage.formats.hudi._hfile import read_varint as _varint
from tests.plugins.lance_tables import lance
from tests.spec.hudi_metadata_writer import varint as _encode


def _fields(buf: bytes):
    """A protobuf message's (number, wire type, value) triples (Lance's manifest has no fixed-size
    fields: a varint or a length-delimited value each)."""
    return [(n, 0 if isinstance(v, int) else 2, v) for n, v in proto_fields(buf)]


def _message(items) -> bytes:
    out = bytearray()
    for number, wire, value in items:
        out += _encode(number << 3 | wire)
        out += _encode(value) if wire == 0 else _encode(len(value)) + value
    return bytes(out)


def _edit(buf: bytes, path: list[int], change) -> bytes:
    """``buf`` with ``change`` applied to the items of the messages at ``path`` (field numbers)."""
    items = _fields(buf)
    if not path:
        return _message(change(items))
    return _message(
        [(n, w, _edit(v, path[1:], change) if n == path[0] and w == 2 else v) for n, w, v in items]
    )


def renumber_field_ids(manifest_path: Path, renumber: dict[int, int]) -> None:
    """Field ids changed in a manifest's schema (Manifest.fields: Field.id) and its data files
    (Manifest.fragments: DataFragment.files: DataFile.fields, packed), per Lance's protos."""
    data = manifest_path.read_bytes()
    position = struct.unpack("<Q", data[-16:-8])[0]  # footer: position, versions, "LANC"
    size = struct.unpack("<I", data[position : position + 4])[0]
    manifest = data[position + 4 : position + 4 + size]

    def schema_ids(items):
        return [(n, w, renumber.get(v, v) if n == 3 and w == 0 else v) for n, w, v in items]

    def file_ids(items):
        changed = []
        for n, w, v in items:
            if n == 2 and w == 2:
                ids, i = [], 0
                while i < len(v):
                    field_id, i = _varint(v, i)
                    ids.append(renumber.get(field_id, field_id))
                v = b"".join(_encode(field_id) for field_id in ids)
            changed.append((n, w, v))
        return changed

    edited = _edit(_edit(manifest, [1], schema_ids), [2, 2], file_ids)
    assert len(edited) == len(manifest)  # one-byte ids for one-byte ids: the footer stays right
    manifest_path.write_bytes(data[: position + 4] + edited + data[position + 4 + size :])


def _latest_manifest(uri: str) -> Path:
    return min((Path(uri) / "_versions").glob("*.manifest"), key=lambda p: int(p.stem))  # V2 names


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory) -> str:
    """Lance's v0.10.5/corrupt_schema steps (add y and z, add a, drop a and z, add b and c) on 4
    rows, then b and c given the ids 0.10.5 gave them. Versions 1-4 are sound, 5 is not."""
    uri = str(tmp_path_factory.mktemp("lance") / "corrupt_schema")
    dataset = lance.write_dataset(pa.table({"x": pa.array(range(4), pa.int64())}), uri)
    dataset.add_columns({"y": "x * 2", "z": "x * 3"})
    dataset.add_columns({"a": "-x"})
    dataset.drop_columns(["a", "z"])
    dataset.add_columns({"b": "x * 4", "c": "x * 5"})
    assert [(f.name(), f.id()) for f in lance.dataset(uri).lance_schema.fields()][2:] == [("b", 3), ("c", 4)]
    renumber_field_ids(_latest_manifest(uri), {3: 2, 4: 3})
    return uri


def test_the_edited_dataset_has_lances_fault(corrupt):
    dataset = lance.dataset(corrupt)
    assert [f.fields for f in dataset.get_fragments()[0].metadata.files] == [[0], [1, 2], [2, 3]]
    # what a reader got: b reads the dropped z (x * 3), with no error
    assert dataset.to_table().column("b").to_pylist() == [0, 3, 6, 9]
    with pytest.raises(OSError, match="Field id 2 is duplicated"):
        dataset.validate()


def test_a_dataset_with_duplicate_field_ids_is_refused_naming_the_column(corrupt):
    from lakewarden_lance import LanceAdapter

    from storage.spec.errors import CorruptTable

    with pytest.raises(CorruptTable) as refused:
        LanceAdapter.open(corrupt)
    message = str(refused.value)
    assert "field id 2" in message and "column b" in message and "fragment 0" in message
    assert "version 5" in message and "Lance 0.10" in message and 'delete("false")' in message


def test_older_sound_versions_still_read_and_the_faulty_one_is_refused(corrupt):
    from lakewarden_lance import LanceAdapter

    from storage.spec.errors import CorruptTable

    before = LanceAdapter.open(corrupt, version=4)  # after the drop: x and y
    rows = pa.Table.from_batches(list(before.read())).to_pydict()
    assert rows == {"x": [0, 1, 2, 3], "y": [0, 2, 4, 6]}
    with pytest.raises(CorruptTable, match="column b"):
        LanceAdapter.open(corrupt, version=5)


def test_processes_refuse_the_dataset_too(corrupt):
    from lakewarden_lance._dataset import open_dataset

    from storage.spec.errors import CorruptTable

    # the maintenance processes open datasets through open_dataset: a compaction would copy z's
    # values into b for good
    with pytest.raises(CorruptTable, match="duplicate field ids"):
        open_dataset(corrupt)


def test_a_write_by_a_current_lance_repairs_it_and_then_it_reads_right(corrupt, tmp_path):
    from lakewarden_lance import LanceAdapter

    uri = str(tmp_path / "repaired")
    shutil.copytree(corrupt, uri)
    lance.dataset(uri).delete("false")  # the repair the refusal names
    table = LanceAdapter.open(uri)
    rows = pa.Table.from_batches(list(table.read())).to_pydict()
    assert rows == {"x": [0, 1, 2, 3], "y": [0, 2, 4, 6], "b": [0, 4, 8, 12], "c": [0, 5, 10, 15]}
