"""The record index of Hudi's metadata table: the pure-Python HFile reader, the record index
layout (key hashing, file groups, log blocks, timeline trust), and ``record_index().tag`` on real
Hudi tables (../shared/fixtures/hudi) beside which ``hudi_metadata_writer`` writes a metadata
table from the tables' own keys."""

from __future__ import annotations

import ctypes
import shutil

import pyarrow.fs as pafs
import pytest

from storage.formats.hudi._hfile import HFileReader, open_hfile
from storage.formats.hudi._metadata_index import (
    IndexUnusable,
    MetadataRecordIndex,
    decode_avro,
    file_group_index,
    java_string_hash,
    location_of,
)
from storage.formats.hudi.record_index import GENERIC_METHOD, HudiRecordIndex, KeyStrings
from storage.spec import load_table
from storage.spec.errors import CorruptTable, UnsupportedFeature
from storage.spec.record_index import RecordIndex
from tests.spec.hudi_metadata_writer import (
    METADATA_SCHEMA_TEXT,
    Location,
    MetadataTable,
    delete_log_block,
    hfile_log_block,
    record_index_hfile,
    rollback_log_block,
    write_hfile,
)

LOCAL = pafs.LocalFileSystem()
COW = "cow_v8_simplekeygen_nonhivestyle"
MOR = "mor_avro_v6_trips_8i1u"
FIRST, SECOND = "20250713011315930", "20250713011316909"  # the COW table's two commits
INIT = FIRST + "010"  # the record index initialisation instant (HoodieTableMetadataUtil suffix)
P10 = "7b0ea4f9-3768-4e87-b12c-8d33efd22b55-0"
P20 = "352d465e-0bef-4a4c-b558-3079e02459ed-0"
P30 = "6653c109-b3c0-470e-8ad4-f45947474a34-0"
KEY = "hudi-key-{:09d}-abcdefghij"  # TestHFileReader.KEY_CREATOR_WITH_SUFFIX
VALUE = "hudi-value-{:09d}"


# --- Java String.hashCode and the file group of a key ------------------------------------------


def _reference_hash(text: str) -> int:
    """Java's int arithmetic done with ctypes, over UTF-16 code units."""
    h = ctypes.c_int32(0)
    units = text.encode("utf-16-le")
    for i in range(0, len(units), 2):
        h = ctypes.c_int32(31 * h.value + int.from_bytes(units[i : i + 2], "little"))
    return h.value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # Integer.MIN_VALUE
        ("é", 233),  # one UTF-16 unit (UTF-8 has two bytes)
        ("😀", 31 * 0xD83D + 0xDE00),  # a surrogate pair: two units
        ("7b0ea4f9-3768-4e87", _reference_hash("7b0ea4f9-3768-4e87")),
    ],
)
def test_java_string_hash(text, expected):
    assert java_string_hash(text) == expected == _reference_hash(text)


@pytest.mark.parametrize(
    ("key", "groups", "expected"),
    [
        ("hello", 10, 2),  # 99162322 % 10
        ("polygenelubricants", 10, 8),  # abs(MIN_VALUE) stays negative: -8 -> 8
        ("polygenelubricants", 2, 0),
        ("😀", 7, 1772899 % 7),
        ("uuid-ß-日本", 4, abs(abs(_reference_hash("uuid-ß-日本")) % 4)),
    ],
)
def test_file_group_of_a_key(key, groups, expected):
    assert file_group_index(key, groups) == expected


# --- the HFile reader ---------------------------------------------------------------------------


def _hfile(tmp_path, cells, name="x.hfile", **options):
    path = tmp_path / name
    path.write_bytes(write_hfile(cells, **options))
    return path, open_hfile(LOCAL, str(path))


@pytest.fixture(scope="module")
def keyed_cells():
    return {KEY.format(i).encode(): VALUE.format(i).encode() for i in range(20000)}


def test_point_lookups_with_hbase_separator_keys(tmp_path, keyed_cells):
    """20,000 keys in 16 KB GZ blocks with HBase's shortened index keys, as in Hudi's
    ``hudi_1_0_hbase_2_4_13_16KB_GZ_20000_fake_first_key.hfile``."""
    path, reader = _hfile(tmp_path, keyed_cells, block_size=16 * 1024, hbase_layout=True)
    assert reader.trailer.codec == "GZ" and reader.entry_count == 20000 and len(reader.root) == 86
    rows = [e.row for e in reader.root]
    # The fake first keys TestHFileReader documents for that file: blocks 2 and 29.
    assert rows[:3] == [KEY.format(0).encode(), b"hudi-key-000000235", b"hudi-key-00000047"]
    assert rows[29] == b"hudi-key-000006815"
    for i in (0, 99, 469, 470, 6815, 13900, 19998, 19999):
        assert reader.get(KEY.format(i).encode()) == VALUE.format(i).encode()
    for absent in (
        "",
        "aa",
        "hudi-key-0000000",
        "hudi-key-00000047",
        "hudi-key-000000470",
        "hudi-key-000019999a",
        "zz",
    ):
        assert reader.get(absent.encode()) is None
    found = reader.get_many([KEY.format(i).encode() for i in (5, 17000, 20001)])
    assert found == {
        KEY.format(5).encode(): VALUE.format(5).encode(),
        KEY.format(17000).encode(): VALUE.format(17000).encode(),
    }
    assert [k for k, _ in reader.items()][:2] == [KEY.format(0).encode(), KEY.format(1).encode()]


def test_uncompressed_blocks_and_a_two_level_index(tmp_path, keyed_cells):
    cells = dict(list(keyed_cells.items())[:5000])
    _, flat = _hfile(tmp_path, cells, "flat.hfile", codec="NONE", block_size=16 * 1024)
    _, deep = _hfile(
        tmp_path, cells, "deep.hfile", block_size=1024, index_levels=2, leaf_fanout=8, hbase_layout=True
    )
    assert flat.trailer.codec == "NONE" and deep.trailer.index_levels == 2
    for reader in (flat, deep):
        assert reader.get(KEY.format(4321).encode()) == VALUE.format(4321).encode()
        assert reader.get(KEY.format(5000).encode()) is None
        assert sum(1 for _ in reader.items()) == 5000


def test_reads_only_the_index_and_one_data_block(tmp_path, keyed_cells):
    path = tmp_path / "reads.hfile"
    path.write_bytes(write_hfile(keyed_cells, block_size=16 * 1024))
    reads: list[int] = []
    data = path.read_bytes()

    def read_at(offset, length):
        reads.append(length)
        return data[offset : offset + length]

    reader = HFileReader(read_at, len(data), str(path))
    opened = sum(reads)
    assert reader.get(KEY.format(12345).encode()) == VALUE.format(12345).encode()
    assert len(reads) == 3 and sum(reads) - opened < 16 * 1024  # trailer, load-on-open, one block


def test_hudi_rs_reads_the_written_hfile(tmp_path):
    """The writer's bytes are what Hudi reads: hudi-rs (a port of Hudi's HFile reader) decodes a
    record index base file written here, key from the HFile, value from the Avro schema."""
    hudi = pytest.importorskip("hudi")
    table = tmp_path / "t"
    (table / ".hoodie").mkdir(parents=True)
    (table / ".hoodie" / "hoodie.properties").write_text(
        "hoodie.table.name=t\nhoodie.table.type=COPY_ON_WRITE\n"
    )
    metadata = MetadataTable(table, 1).create()
    metadata.complete(INIT)
    [path] = metadata.write_base(INIT, {"k1": Location("p", P10, 7), "k2": Location("q", "raw-file-id", 8)})
    batch = hudi.HudiFileGroupReader(str(metadata.folder)).read_file_slice_from_paths(
        f"record_index/{path.name}", []
    )
    rows = {r["key"]: r["recordIndexMetadata"] for r in batch.to_pylist()}
    assert rows["k1"]["partitionName"] == "p" and rows["k1"]["fileIndex"] == 0
    assert rows["k2"]["fileId"] == "raw-file-id" and rows["k2"]["fileIdEncoding"] == 1
    ours = open_hfile(LOCAL, str(path))
    record = decode_avro(ours.get(b"k1"), ours.file_info[b"schema"].decode())
    assert record["recordIndexMetadata"] == rows["k1"] and location_of(record).file_id == P10


def test_a_truncated_or_damaged_hfile_is_corrupt(tmp_path, keyed_cells):
    cells = dict(list(keyed_cells.items())[:3000])
    path, _ = _hfile(tmp_path, cells, block_size=4096)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 100])
    with pytest.raises(CorruptTable, match=f"HFile {path}"):
        open_hfile(LOCAL, str(path))
    path.write_bytes(data[:2000])
    with pytest.raises(CorruptTable, match="too short for an HFile"):
        open_hfile(LOCAL, str(path))
    damaged = bytearray(data)
    damaged[40:60] = bytes(20)  # inside the first data block's gzip stream
    path.write_bytes(bytes(damaged))
    reader = open_hfile(LOCAL, str(path))
    with pytest.raises(CorruptTable, match="corrupt"):
        reader.get(KEY.format(1).encode())
    assert reader.get(KEY.format(2999).encode()) == VALUE.format(2999).encode()  # other blocks read


def test_unsupported_codec_is_refused(tmp_path):
    path, _ = _hfile(tmp_path, {b"a": b"1"}, codec="NONE")
    data = bytearray(path.read_bytes())
    trailer = data[-4096:]
    at = trailer.index(bytes([12 << 3, 2]))  # compression codec field = NONE (2)
    data[len(data) - 4096 + at + 1] = 3  # SNAPPY
    path.write_bytes(bytes(data))
    with pytest.raises(UnsupportedFeature, match="SNAPPY"):
        open_hfile(LOCAL, str(path))


# --- tables with a metadata table ---------------------------------------------------------------


def _copy(hudi_fixture, tmp_path, name):
    source = hudi_fixture(name)
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def _truth(table) -> dict[str, tuple[str, str, str]]:
    """key text -> (partition, file group, file path) of every live row, read from the data."""
    key_column = table.properties["hoodie.table.recordkey.fields"]
    truth = {}
    for file_slice in table.file_index().list_files_at(None):
        for batch in table.read(file_slice, columns=[key_column]):
            for key in batch.column(0).to_pylist():
                truth[str(key)] = (file_slice.partition.path, file_slice.file_group_id, file_slice.path)
    return truth


def _count_reads(spec_table) -> list:
    reads: list = []
    original = spec_table.read

    def read(source=None, *args, **kwargs):
        reads.append(source)
        return original(source, *args, **kwargs)

    spec_table.read = read
    return reads


@pytest.fixture
def cow_with_index(hudi_fixture, tmp_path):
    """The COW table (ids 1, 3 in partition 10; 2 in 20; 4 in 30), its record index initialised
    after the first commit (ids 1-3 in base HFiles) and the second commit's insert of 4 in a log."""
    root = _copy(hudi_fixture, tmp_path, COW)
    metadata = MetadataTable(root, 2, version=8).create()
    metadata.complete(FIRST)
    metadata.complete(INIT)
    metadata.write_base(
        INIT, {"1": Location("10", P10, 1), "2": Location("20", P20, 1), "3": Location("10", P10, 1)}
    )
    metadata.append(file_group_index("4", 2), INIT, hfile_log_block(SECOND, {"4": Location("30", P30, 2)}))
    metadata.complete(SECOND)
    return root, metadata


def test_keys_are_answered_from_the_metadata_record_index(cow_with_index):
    root, _ = cow_with_index
    table = load_table(str(root))
    index = table.record_index()
    assert isinstance(index, HudiRecordIndex) and index.has_metadata_record_index
    reads = _count_reads(table)
    found = {loc.key: loc for loc in index.tag([1, 2, 3, 4, 99])}
    assert (
        index.method == "the metadata table's record index (record_index partition, 2 file groups of HFiles)"
    )
    assert reads == [] and index.files_read == 0 and index.metadata_files_read >= 2
    assert (found[1].partition, found[1].file_group_id) == ("10", P10)
    assert (
        found[1].file_path.endswith(f"{P10}_0-136-193_{SECOND}.parquet")
        and found[1].file_path == found[3].file_path
    )
    assert (found[2].partition, found[2].file_group_id) == ("20", P20) and found[2].file_path.endswith(
        f"_{FIRST}.parquet"
    )
    assert (found[4].partition, found[4].file_group_id) == ("30", P30)  # from the log block
    assert not found[99].found and found[99].file_path is None
    assert {found[k].instant_id for k in (1, 99)} == {SECOND}


def test_the_index_agrees_with_the_generic_path_on_every_key(cow_with_index):
    root, _ = cow_with_index
    table = load_table(str(root))
    truth = _truth(table)
    keys = [int(k) for k in truth] + [0, 5, 1000]
    by_index = {loc.key: loc for loc in table.record_index().tag(keys)}
    generic = {loc.key: loc for loc in RecordIndex(table).tag(keys)}
    assert by_index == generic
    assert {
        str(k): (v.partition, v.file_group_id, v.file_path) for k, v in by_index.items() if v.found
    } == truth


def test_a_metadata_table_behind_the_data_falls_back(cow_with_index):
    root, metadata = cow_with_index
    for name in metadata.timeline.glob(f"{SECOND}*"):
        name.unlink()  # the metadata table never completed the second commit
    index = load_table(str(root)).record_index()
    found = {loc.key: loc for loc in index.tag([1, 4, 99])}
    assert index.method.startswith(
        "the metadata table's record index is not read (the metadata table is behind"
    )
    assert index.method.endswith(GENERIC_METHOD) and f"instant {SECOND}" in index.method
    assert found[4].found and found[4].partition == "30" and not found[99].found  # 4 is not in the index


def test_an_older_instant_the_index_cannot_answer_falls_back(cow_with_index):
    root, _ = cow_with_index
    index = load_table(str(root)).record_index()
    found = {loc.key: loc for loc in index.tag([1, 4], instant=FIRST)}
    assert "has no base file as of instant" in index.method and index.method.endswith(GENERIC_METHOD)
    assert found[1].file_path.endswith(f"_{FIRST}.parquet") and not found[4].found


def test_blocks_of_uncommitted_or_rolled_back_instants_are_ignored(cow_with_index):
    root, metadata = cow_with_index
    failed, rolled_back = "20250713011317000", "20250713011318000"
    (root / ".hoodie" / "timeline" / f"{failed}.commit.inflight").write_text("")  # a failed data commit
    metadata.complete(failed)  # whose metadata commit completed
    metadata.complete(rolled_back)
    group = file_group_index("77", 2)
    metadata.append(group, INIT, hfile_log_block(failed, {"77": Location("30", P30, 3)}))
    metadata.append(group, INIT, hfile_log_block(rolled_back, {"77": Location("30", P30, 3)}))
    metadata.append(group, INIT, rollback_log_block("20250713011319000", rolled_back))
    index = load_table(str(root)).record_index()
    found = {loc.key: loc for loc in index.tag([77, 4])}
    assert index.method.startswith("the metadata table's record index (")
    assert not found[77].found and found[4].found


def test_a_truncated_base_hfile_falls_back_naming_it(cow_with_index):
    root, metadata = cow_with_index
    base = sorted(
        (metadata.folder / "record_index").glob(f"record-index-{file_group_index('2', 2):04d}-0_*.hfile")
    )[0]
    base.write_bytes(base.read_bytes()[:-10])
    index = load_table(str(root)).record_index()
    found = {loc.key: loc for loc in index.tag([2])}
    assert f"HFile {base}" in index.method and index.method.endswith(GENERIC_METHOD)
    assert found[2].found and found[2].partition == "20"


def test_other_key_columns_use_the_generic_path(cow_with_index):
    root, _ = cow_with_index
    index = load_table(str(root)).record_index("name")
    assert "keyed by the record key (id), not by name" in index.method


def test_merge_on_read_v6_table_agrees_on_every_key(hudi_fixture, tmp_path):
    """The MOR table (uuid keys, hive-style partitions, a log file), version 6 timeline layout."""
    root = _copy(hudi_fixture, tmp_path, MOR)
    table = load_table(str(root))
    truth = _truth(table)
    first, second = (i.id for i in table.timeline().instants())
    metadata = MetadataTable(root, 3).create()
    for instant in (first, first + "010", second):
        metadata.complete(instant)
    metadata.write_base(first + "010", {k: Location(p, g, 1) for k, (p, g, _) in truth.items()})
    keys = [*truth, "no-such-trip"]
    table = load_table(str(root))
    by_index = {loc.key: loc for loc in table.record_index().tag(keys)}
    generic = {loc.key: loc for loc in RecordIndex(table).tag(keys)}
    assert by_index == generic and not by_index["no-such-trip"].found
    assert by_index["e96c4396-3fad-413a-a942-4cb36106d721"].partition == "city=san_francisco"


# --- the metadata table reader directly ---------------------------------------------------------


def test_log_blocks_update_delete_and_follow_the_timeline(cow_with_index):
    root, metadata = cow_with_index
    later, pending = "20250713011320000", "20250713011321000"
    (root / ".hoodie" / "timeline" / f"{later}_{later}.commit").write_text("{}")
    (root / ".hoodie" / "timeline" / f"{pending}.commit.requested").write_text("")
    metadata.complete(later)
    group = file_group_index("2", 2)
    metadata.append(group, INIT, delete_log_block(later, ["2"]))
    metadata.append(group, INIT, hfile_log_block(later, {"x": Location("20", "raw-id", 4)}))
    metadata.start(pending)
    metadata.append(group, INIT, delete_log_block(pending, ["x"]))
    index = MetadataRecordIndex(LOCAL, str(root), {"hoodie.table.metadata.partitions": "files,record_index"})
    assert [len(g.base_files) for g in index.file_groups] == [1, 1]
    latest = index.lookup(["1", "2", "3", "4", "x"], later, latest=True)
    assert set(latest) == {"1", "3", "4", "x"} and latest["x"].file_id == "raw-id"
    assert latest["1"].file_id == P10 and latest["1"].partition == "10"
    as_of_second = index.lookup(["2", "x"], SECOND, latest=False)
    assert set(as_of_second) == {"2"}  # the delete and the insert of x came later
    with pytest.raises(IndexUnusable, match="has not completed instant 20250713011399999"):
        index.lookup(["1"], "20250713011399999", latest=True)


def test_declared_partition_and_layout_are_checked(cow_with_index):
    root, metadata = cow_with_index
    with pytest.raises(IndexUnusable, match="declares no record_index"):
        MetadataRecordIndex(LOCAL, str(root), {"hoodie.table.metadata.partitions": "files"})
    properties = {
        "hoodie.table.metadata.partitions": "files,record_index",
        "hoodie.table.metadata.partitions.inflight": "record_index",
    }
    with pytest.raises(IndexUnusable, match="still being built"):
        MetadataRecordIndex(LOCAL, str(root), properties)
    (metadata.folder / "record_index" / "p=1").mkdir()
    with pytest.raises(IndexUnusable, match="partitioned record index"):
        MetadataRecordIndex(LOCAL, str(root), {"hoodie.table.metadata.partitions": "record_index"})


def test_key_strings_simple_and_complex():
    assert KeyStrings(("id",), named=False).format((17,)) == "17"
    assert KeyStrings(("id", "flag"), named=True).format((17, True)) == "id:17,flag:true"


def test_record_index_values_round_trip_every_file_id_encoding():
    for file_id in (P10, "6653c109-b3c0-470e-8ad4-f45947474a34-12", "not-a-uuid"):
        data = record_index_hfile({"k": Location("p=1/q", file_id, 1720000000000)}, codec="NONE")
        reader = HFileReader(lambda o, n, d=data: d[o : o + n], len(data), "mem")
        record = decode_avro(reader.get(b"k"), METADATA_SCHEMA_TEXT)
        assert location_of(record).file_id == file_id
        assert (
            location_of(record).partition == "p=1/q" and location_of(record).instant_millis == 1720000000000
        )
