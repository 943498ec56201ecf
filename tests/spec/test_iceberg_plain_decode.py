"""The compiled listing loop reading a manifest's entries still encoded (``_avro_native``'s
``plain_layout`` and ``plain_decode``, through ``_entries.EncodedEntries``) gives exactly the
slices of the same loop over the decoded entries (``plain_slices``) and of the Python loop:
sequence numbers and snapshots inherited, deleted entries skipped, entries it does not cover
(not plain, a partition not cached yet, a partition field the manifest does not have) handed to
the Python loop's body as the dicts ``decode`` gives; a manifest cut or corrupted anywhere fails
as the decoded path fails (``CorruptTable`` naming it), an error of the Python loop is raised as
it is, entries not shaped as it reads them are left to the decoded path, and reading keeps
memory flat.
"""

from __future__ import annotations

import io
import itertools
import json
from typing import Any

import fastavro
import pytest
from pyiceberg.conversions import to_bytes
from pyiceberg.manifest import data_file_with_partition, manifest_entry_schema_with_data_file
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

from storage.formats.iceberg import _avro, _entries, _manifests, index
from storage.formats.iceberg._entries import EncodedEntries
from storage.formats.iceberg._manifests import ManifestInfo, SpecContext
from storage.spec.errors import CorruptTable
from tests.spec.test_avro_native import memory_growth
from tests.spec.test_iceberg_native_listing import DECODER, SCHEMA, _model
from tests.spec.test_iceberg_plain_slices import _manifest, _record

pytestmark = pytest.mark.skipif(
    not _avro.NATIVE_BUILT, reason="the compiled Avro decoder is not built (python scripts/build_native.py)"
)

NAME = PartitionField(6, 1000, IdentityTransform(), "name")
DAY = PartitionField(3, 1001, DayTransform(), "day_day")
SPEC = PartitionSpec(NAME, DAY)


def _entry(k: int, status: int, sequence: int | None, snapshot: int | None, **data: Any) -> dict[str, Any]:
    """``_record``'s entry as fastavro writes it (Iceberg's int maps as arrays of key/value)."""
    stats = {"lower_bounds": [{"key": 1, "value": to_bytes(LongType(), k)}], "null_value_counts": []}
    return _record(k, status, sequence, snapshot, **(stats | data))


def _avro_schema(spec: PartitionSpec) -> dict[str, Any]:
    entry = manifest_entry_schema_with_data_file(2, data_file_with_partition(spec.partition_type(SCHEMA), 2))
    return AvroSchemaConversion().iceberg_to_avro(entry, schema_name="manifest_entry")


def _container(entries: list[dict[str, Any]], spec: PartitionSpec = SPEC) -> bytes:
    schema = _avro_schema(spec)
    partition = [{"name": f.name, "field-id": f.field_id, "source-id": f.source_id} for f in spec.fields]
    out = io.BytesIO()
    fastavro.writer(
        out,
        fastavro.parse_schema(schema),
        entries,
        codec="deflate",
        sync_interval=1,  # small blocks: several payloads per container after joining
        metadata={"partition-spec": json.dumps(partition), "partition-spec-id": "0", "format-version": "2"},
    )
    return out.getvalue()


def _listing(
    manifest: ManifestInfo, data: bytes, how: str, monkeypatch, chunk: int = index._CHUNK, joined: Any = None
) -> list[Any]:
    """The slices of one manifest's entries read ``how``: "encoded" (plain_decode), "decoded"
    (plain_slices over decode's dicts) or "python" (the Python loop)."""
    context = SpecContext(SPEC, SCHEMA)  # a fresh partition cache: the first entry of each misses
    file_index = index.IcebergFileIndex.__new__(index.IcebergFileIndex)
    file_index._decoder = DECODER
    read: list[int] = []
    compiled = _entries.plain_decode

    def counted(layout, payload, offset, count, scan, one):
        read.append(count)
        return compiled(layout, payload, offset, count, scan, one)

    given = index.inherited_sequence  # called by the Python loop's body for each entry it is given

    def to_python(record, manifest):
        to_python.entries.append(record)
        return given(record, manifest)

    to_python.entries = []
    monkeypatch.setattr(index, "inherited_sequence", to_python)
    monkeypatch.setattr(index, "_CHUNK", chunk)
    monkeypatch.setattr(_entries, "plain_decode", counted)
    if how != "encoded":
        monkeypatch.setattr(_entries, "plain_layout", None)
    if how == "python":
        monkeypatch.setattr(index, "plain_slices", None)
    try:
        entries = EncodedEntries(manifest, joined or _avro.join(data))
        checks = index._Checks(None, DECODER)
        found = [  # the slices come a few at a time (lists)
            found_slice
            for chunk in file_index._manifest_slices(
                manifest, entries, entries.partition_names, context, checks, None, None
            )
            for found_slice in chunk
        ]
    finally:
        monkeypatch.undo()
    assert (sum(read) == sum(count for _, count in entries.joined.payloads)) == (how == "encoded")
    GIVEN_TO_PYTHON[how] = to_python.entries
    return [
        (s.partition, s.base_instant, s.file_group_id, s.delete_files, _model(s.base_file)) for s in found
    ]


GIVEN_TO_PYTHON: dict[str, list[dict[str, Any]]] = {}  # the entries the last listing of each way gave it


def _all_ways(manifest: ManifestInfo, data: bytes, monkeypatch, joined: Any = None) -> list[Any]:
    encoded = _listing(manifest, data, "encoded", monkeypatch, joined=joined)
    assert encoded == _listing(manifest, data, "decoded", monkeypatch, joined=joined)
    # the same entries, as the same dicts, go to the Python loop's body: the first of each
    # partition (not cached yet) and those that are not plain
    assert GIVEN_TO_PYTHON["encoded"] == GIVEN_TO_PYTHON["decoded"]
    assert encoded == _listing(manifest, data, "python", monkeypatch, joined=joined)
    assert 0 < len(GIVEN_TO_PYTHON["encoded"]) < len(GIVEN_TO_PYTHON["python"])
    for chunk in (1, 3, 1000):
        assert _listing(manifest, data, "encoded", monkeypatch, chunk, joined=joined) == encoded
    return encoded


def test_sequence_numbers_and_snapshots_are_inherited_as_the_python_loop_inherits_them(monkeypatch):
    entries = [
        _entry(k, status, sequence, snapshot)
        for k, (status, sequence, snapshot) in enumerate(
            itertools.product((0, 1, 2), (None, 0, 5), (None, 7))
        )
    ]
    first, second = _avro.join(_container(entries[:10])), _avro.join(_container(entries[10:]))
    joined = _avro.Joined(first.schema, first.payloads + second.payloads)  # two payloads, read in turn
    for manifest_sequence, manifest_snapshot in itertools.product((0, 3), (None, 11)):
        found = _all_ways(_manifest(manifest_sequence, manifest_snapshot), b"", monkeypatch, joined)
        assert len(found) == 12  # the 6 deleted ones are skipped
        assert {s[4]["extra"][1]["sequence_number"] for s in found} == (
            {0, 5} if manifest_sequence == 0 else {0, 3, 5}
        )
        assert {s[4]["extra"][1]["snapshot_id"] for s in found} == {7, manifest_snapshot}
        assert {s[4]["split_offsets"][1] for s in found} == {(4,), None}


def test_entries_it_does_not_cover_go_to_the_python_loop_in_order(monkeypatch):
    entries = [
        _entry(0, 1, None, None),
        _entry(1, 0, 4, 8, equality_ids=[1]),  # not plain
        _entry(2, 1, None, None, content=1),  # a position delete file in a data manifest
        _entry(3, 1, None, None, file_format="ORC"),
        _entry(4, 2, None, None),
        _entry(5, 1, 9, None, split_offsets=[]),
        _entry(6, 1, None, None),  # a partition cached by an earlier entry
    ]
    found = _all_ways(_manifest(2, 11), _container(entries), monkeypatch)
    assert [s[4]["path"][1] for s in found] == [f"s3://b/{k}.parquet" for k in (0, 1, 2, 3, 5, 6)]
    assert [s[4]["file_format"][1] for s in found] == ["parquet"] * 3 + ["orc"] + ["parquet"] * 2
    assert found[4][4]["split_offsets"][1] is None


def test_a_partition_field_the_manifest_does_not_have_reads_as_none(monkeypatch):
    """The manifest was written with the spec's first field only: both loops look the second up
    and find nothing."""
    entries = [_entry(k, 1, None, None) for k in range(4)]
    for entry in entries:
        del entry["data_file"]["partition"]["day_day"]
    data = _container(entries, PartitionSpec(NAME))
    found = _all_ways(_manifest(1, 1), data, monkeypatch)
    assert [s[0].values["name"] for s in found] == ["n0", "n1", "n2", "n0"]
    assert all(s[0].values["day_day"] is None for s in found)


def _outcome(manifest: ManifestInfo, joined: Any, how: str, monkeypatch) -> Any:
    """The slices, or the type of the error raised (a CorruptTable names the manifest)."""
    try:
        return _listing(manifest, b"", how, monkeypatch, chunk=2, joined=joined)
    except CorruptTable as exc:
        assert manifest.path in str(exc)
        return CorruptTable
    except Exception as exc:  # the Python loop's, on an entry that decoded to garbage
        return type(exc)


def test_entries_cut_or_corrupted_anywhere_fail_as_the_decoded_path_fails(monkeypatch):
    """Cut anywhere, both fail as a corrupt manifest. Corrupted anywhere, both give the same slices
    or both fail; where the decoded path fails decoding a later entry, the encoded one, which
    builds each entry's slice before it reads the next, may fail first on an earlier entry that
    decoded to garbage (a day out of range, say) with the Python loop's error."""
    manifest = _manifest(1, 1)
    joined = _avro.join(_container([_entry(k, k % 3, None, 5) for k in range(6)]))
    payload, count = joined.payloads[0]
    for cut in range(len(payload)):
        broken = _avro.Joined(joined.schema, ((payload[:cut], count),))
        assert _outcome(manifest, broken, "decoded", monkeypatch) is CorruptTable, cut
        assert _outcome(manifest, broken, "encoded", monkeypatch) is CorruptTable, cut
    outcomes = []
    for at, bits in itertools.product(range(len(payload)), (0x01, 0x80, 0xFF)):
        flipped = bytearray(payload)
        flipped[at] ^= bits
        broken = _avro.Joined(joined.schema, ((bytes(flipped), count),))
        want = _outcome(manifest, broken, "decoded", monkeypatch)
        got = _outcome(manifest, broken, "encoded", monkeypatch)
        if isinstance(want, list) or want is not CorruptTable:
            assert got == want, (at, bits)
        else:
            assert isinstance(got, type), (at, bits, got)
        outcomes.append(want if isinstance(want, type) else list)
    assert {list, CorruptTable} <= set(outcomes)  # some corruptions decode, some do not


def test_a_schema_the_compiler_cannot_read_fails_as_a_corrupt_manifest_either_way(monkeypatch):
    """Compiling the decoder's program fails: the encoded path leaves the entries to the decoded
    one, which says the manifest is corrupt, rather than letting the compiler's error out."""
    joined = _avro.join(_container([_entry(0, 1, None, None)]))

    def refuse(self):
        raise ValueError("an Avro schema this decoder cannot read")

    for how in ("encoded", "decoded"):
        monkeypatch.setattr(_avro.ManifestDecoder, "program", refuse)  # _listing undoes it
        assert _outcome(_manifest(1, 1), joined, how, monkeypatch) is CorruptTable, how


def test_an_error_of_the_python_loop_is_raised_as_it_is(monkeypatch):
    """A ValueError raised by the Python loop's body (for an entry it is given) is not taken for
    a corrupt manifest."""
    data = _container([_entry(0, 1, None, None)])

    def failing(self, avro_names):
        def convert(raw):
            raise ValueError("the partition converter failed")

        return convert

    monkeypatch.setattr(SpecContext, "partitions", failing)
    with pytest.raises(ValueError, match="the partition converter failed") as raised:
        context = SpecContext(SPEC, SCHEMA)
        entries = EncodedEntries(_manifest(1, 1), _avro.join(data))
        file_index = index.IcebergFileIndex.__new__(index.IcebergFileIndex)
        file_index._decoder = DECODER
        list(
            file_index._manifest_slices(
                entries.manifest, entries, {}, context, index._Checks(None, DECODER), None, None
            )
        )
    assert not isinstance(raised.value, CorruptTable)


def _program(schema: dict[str, Any]) -> Any:
    return _avro.decoder_for(json.dumps(schema), _entries.KEEP).program()


def test_entries_not_shaped_as_it_reads_them_are_left_to_the_decoded_path():
    schema = _avro_schema(SPEC)
    assert _avro._native.plain_layout(_program(schema), ("name", "day_day")) is not None
    data_file = next(f for f in schema["fields"] if f["name"] == "data_file")
    as_union = dict(
        schema,
        fields=[f if f is not data_file else dict(f, type=["null", f["type"]]) for f in schema["fields"]],
    )
    no_data_file = dict(schema, fields=[f for f in schema["fields"] if f is not data_file])
    partition = next(f for f in data_file["type"]["fields"] if f["name"] == "partition")
    no_partition = dict(
        schema,
        fields=[
            f
            if f is not data_file
            else dict(f, type=dict(f["type"], fields=[g for g in f["type"]["fields"] if g is not partition]))
            for f in schema["fields"]
        ],
    )
    for shape in (as_union, no_data_file, no_partition):
        assert _avro._native.plain_layout(_program(shape), ("name", "day_day")) is None


@pytest.mark.parametrize(
    "args",
    [
        (),
        (None, b"", 0, 0, None, None),
        ("layout", b"", 0, 0, None, None),
    ],
)
def test_malformed_arguments_are_refused(args):
    with pytest.raises(ValueError, match="plain_decode"):
        _avro._native.plain_decode(*args)


def test_a_scan_of_other_keys_or_an_offset_out_of_range_is_refused():
    keys = tuple(["name", "day_day"])
    layout = _avro._native.plain_layout(_program(_avro_schema(SPEC)), keys)
    plain = _manifests.plain_context(DECODER, SpecContext(SPEC, SCHEMA))
    other = tuple(["name", "day_day"])  # equal, but not the layout's own
    assert other == keys and other is not keys
    with pytest.raises(ValueError, match="layout's keys"):
        _avro._native.plain_decode(layout, b"", 0, 0, (plain, index._file_slice, {}, other, None, 1, 1), None)
    for offset, count in ((1, 0), (-1, 0), (0, -1)):
        with pytest.raises(ValueError, match="out of range"):
            _avro._native.plain_decode(
                layout, b"", offset, count, (plain, index._file_slice, {}, keys, None, 1, 1), None
            )


def test_reading_many_times_keeps_memory_flat(monkeypatch):
    data = _container(
        [_entry(k, k % 3, None if k % 2 else k, 5, equality_ids=[1] if k == 4 else None) for k in range(12)]
    )
    joined = _avro.join(data)
    cut = _avro.Joined(joined.schema, ((joined.payloads[0][0][:-3], joined.payloads[0][1]),))
    manifest = _manifest(1, 1)

    def rounds(times: int) -> None:
        for _ in range(times):
            _listing(manifest, b"", "encoded", monkeypatch, joined=joined)
            try:
                _listing(manifest, b"", "encoded", monkeypatch, joined=cut)
            except CorruptTable:
                pass

    grown = memory_growth(rounds, 50, 500)
    assert grown < 32 * 1024, f"{grown} bytes more after 500 rounds (a leak of one object an entry: ~300 kB)"
